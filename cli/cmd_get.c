/* `segd get`: what a bidder reads for each user. Opens the store read-only,
 * so it works beside a running writer (it sees the state as of opening).
 * In a fleet (DESIGN §7) a store holds the users of its own input
 * partitions: a user of a partition the store holds no offset for is
 * answered with a note on stderr that the answer may be stale. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "wire/profile_json.h"
#include "cli/cli.h"
#include "config/config.h"
#include "core/partition.h"
#include "core/query.h"
#include "store/identity.h"

#define MAX_HELD 4096

/* The input partitions this store holds offsets for, per topic, and the
 * topic's partition count as segd run last saw it. */
typedef struct held_topic {
    char topic[256];
    int32_t count; /* 0 = not recorded (a store written before segd recorded it) */
    int32_t parts[MAX_HELD];
    size_t n;
} held_topic_t;

typedef struct held {
    held_topic_t topics[SEGD_MAX_TOPICS];
    size_t n;
} held_t;

typedef struct get_args {
    int json;
    int64_t now_s;
    segd_query_t q;
    int has_range;
    int64_t range_lo, range_hi;
    int64_t limit; /* text output: segments printed per user; 0 = all */
    segd_partitioner_t partitioner; /* input.partitioner from --config */
    int linked;       /* --linked: the join over USER's component (DESIGN §10.5) */
    const held_t *held; /* NULL: ownership unknown */
    int known;          /* the user being printed has a record (segd_store_known) */
} get_args_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: segd get --db DIR [--json] [--now S] [--expiring-after S]\n"
               "                [--updated-since MS] [--count-range A:B] [--limit N]\n"
               "                [--config FILE] [--linked] USER...\n"
               "  --linked: the join of the segments of every id linked to USER (its\n"
               "    identity-graph component), with \"master\", \"members\" and the input\n"
               "    partitions of members this store does not own (\"missing_partitions\")\n"
               "  --limit N: print at most N segments per user (text output)\n"
               "  --config FILE: segd run's configuration, for input.partitioner: a user\n"
               "    of an input partition this store holds no offset for is answered\n"
               "    with a note on stderr (another instance owns it)\n");
}

static void print_json(const char *user, const segd_entry_t *e, size_t n,
                       const get_args_t *a, uint64_t count, json_t *extra)
{
    json_t *o = json_object();
    json_object_set_new(o, "user_id", json_string(user));
    /* the key order of the cache's HTTP API: user_id, known, segments */
    json_object_set_new(o, "known", json_boolean(a->known));
    json_object_set_new(o, "segments", segd_entries_json(e, n));
    if (a->has_range)
        json_object_set_new(o, "count_range",
                            json_pack("{s:I,s:I,s:I}", "from", (json_int_t)a->range_lo, "to",
                                      (json_int_t)a->range_hi, "count", (json_int_t)count));
    if (extra)
        json_object_update(o, extra);
    json_dumpf(o, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(o);
}

static void print_text(const char *user, const segd_entry_t *e, size_t n,
                       const get_args_t *a, uint64_t count, json_t *extra)
{
    /* JSON's "known": false, said in words (a user with no record is not a
     * user whose segments all expired) */
    if (!a->known && !n && !extra)
        printf("%s: unknown (no record in this store), 0 live segments\n", user);
    else
        printf("%s: %zu live segment%s\n", user, n, n == 1 ? "" : "s");
    if (extra) {
        char *members = json_dumps(json_object_get(extra, "members"), JSON_COMPACT);
        char *missing = json_dumps(json_object_get(extra, "missing_partitions"), JSON_COMPACT);
        printf("  master=%s members=%s missing_partitions=%s\n",
               json_string_value(json_object_get(extra, "master")), members ? members : "?",
               missing ? missing : "?");
        free(members);
        free(missing);
    }
    if (a->has_range)
        printf("  live in [%" PRId64 ", %" PRId64 "]: %" PRIu64 "\n", a->range_lo,
               a->range_hi, count);
    size_t shown = a->limit && (size_t)a->limit < n ? (size_t)a->limit : n;
    for (size_t i = 0; i < shown; i++)
        printf("  %-10" PRId64 " expires_at=%" PRId64 " ts_ms=%" PRId64
               " flags=%d partner_id=%d\n",
               e[i].segment_id, e[i].expiry_s, e[i].ts_ms, e[i].flags, e[i].partner_id);
    if (shown < n)
        printf("  ... %zu more\n", n - shown);
}

static int32_t unowned_partition(const held_t *h, const get_args_t *a, const char *user,
                                 size_t len);

typedef struct linked_out {
    const get_args_t *a;
    json_t *members, *missing;
} linked_out_t;

static int add_member(void *ctx, const char *m, size_t len)
{
    linked_out_t *lo = ctx;
    json_array_append_new(lo->members, json_stringn(m, len));
    int32_t p = lo->a->held ? unowned_partition(lo->a->held, lo->a, m, len) : -1;
    int seen = p < 0;
    for (size_t i = 0; !seen && i < json_array_size(lo->missing); i++)
        seen = json_integer_value(json_array_get(lo->missing, i)) == p;
    if (!seen)
        json_array_append_new(lo->missing, json_integer(p));
    return 0;
}

/* The §3 join over user's component; *extra gets master, members and the
 * partitions of members this store does not own. */
static segd_err_t read_user(segd_store_t *s, const char *user, const get_args_t *a,
                            segd_profile_t *p, json_t **extra, char *err, size_t n)
{
    *extra = NULL;
    if (!a->linked)
        return segd_store_get(s, user, strlen(user), p, err, n);
    linked_out_t lo = {a, json_array(), json_array()};
    segd_err_t e = segd_ident_get_linked(s, user, strlen(user), p, add_member, &lo, err, n);
    if (e) {
        json_decref(lo.members);
        json_decref(lo.missing);
        return e;
    }
    *extra = json_object();
    json_object_set(*extra, "master", json_array_get(lo.members, 0));
    json_object_set_new(*extra, "members", lo.members);
    json_object_set_new(*extra, "missing_partitions", lo.missing);
    return SEGD_OK;
}

static int get_user(segd_store_t *s, const char *user, get_args_t *a, segd_profile_t *p)
{
    char err[512];
    json_t *extra = NULL;
    if (segd_store_known(s, user, strlen(user), &a->known, err, sizeof(err)) != SEGD_OK ||
        read_user(s, user, a, p, &extra, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd get: %s: %s\n", user, err);
        return -1;
    }
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_entry_t *sel = malloc((p->n ? p->n : 1) * sizeof(*sel));
    if (!sel) {
        json_decref(extra);
        return -1;
    }
    size_t n = segd_query_select(p, &rule, &a->q, sel);
    uint64_t count =
        a->has_range ? segd_query_count_range(p, &rule, a->range_lo, a->range_hi) : 0;
    (a->json ? print_json : print_text)(user, sel, n, a, count, extra);
    segd_policy_rule_release(&rule);
    json_decref(extra);
    free(sel);
    return 0;
}

static int held_offset(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    held_t *h = ctx;
    (void)next;
    held_topic_t *t = NULL;
    for (size_t i = 0; i < h->n && !t; i++)
        if (!strcmp(h->topics[i].topic, topic))
            t = &h->topics[i];
    if (!t && h->n < SEGD_MAX_TOPICS) {
        t = &h->topics[h->n++];
        snprintf(t->topic, sizeof(t->topic), "%s", topic);
    }
    if (t && t->n < MAX_HELD)
        t->parts[t->n++] = partition;
    return 0;
}

/* Which input partitions the store holds. A store that cannot say, because
 * it has no offsets (backfilled, or never run), makes no notes. */
static void load_held(segd_store_t *s, held_t *h)
{
    segd_store_view_t *v = NULL;
    char err[256];
    h->n = 0;
    if (segd_store_view_open(s, &v, err, sizeof(err)) == SEGD_OK)
        segd_store_view_positions(v, "offset", held_offset, h, err, sizeof(err));
    segd_store_view_close(v);
    for (size_t i = 0; i < h->n; i++)
        if (segd_store_partition_count(s, h->topics[i].topic, &h->topics[i].count, err,
                                       sizeof(err)) != SEGD_OK)
            h->topics[i].count = 0;
}

/* The input partition of user when this store does not own it, else -1. */
static int32_t unowned_partition(const held_t *h, const get_args_t *a, const char *user,
                                 size_t len)
{
    for (size_t i = 0; i < h->n; i++) {
        const held_topic_t *t = &h->topics[i];
        if (t->count <= 0)
            continue;
        int32_t p = segd_partition_of(a->partitioner, user, len, t->count);
        int held = 0;
        for (size_t j = 0; j < t->n && !held; j++)
            held = t->parts[j] == p;
        if (!held)
            return p;
    }
    return -1;
}

static void note_if_not_owned(const held_t *h, const get_args_t *a, const char *user)
{
    int32_t p = unowned_partition(h, a, user, strlen(user));
    if (p >= 0)
        fprintf(stderr, "user %s is in partition %" PRId32 ", owned by another instance: "
                        "this store may be stale\n", user, p);
}

/* input.partitioner from segd run's configuration file. */
static int load_partitioner(const char *file, get_args_t *a)
{
    segd_config_t cfg;
    char err[512];
    segd_config_init(&cfg);
    int bad = segd_config_load_file(&cfg, file, err, sizeof(err)) != SEGD_OK;
    if (bad)
        fprintf(stderr, "segd get: %s\n", err);
    a->partitioner = cfg.partitioner;
    segd_config_free(&cfg);
    return bad;
}

static int parse_range(const char *s, get_args_t *a)
{
    const char *colon = strchr(s, ':');
    char lo[32];
    if (!colon || (size_t)(colon - s) >= sizeof(lo))
        return -1;
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = 0;
    if (segd_arg_int("get", "--count-range", lo, 0, INT64_MAX, &a->range_lo) ||
        segd_arg_int("get", "--count-range", colon + 1, 0, INT64_MAX, &a->range_hi))
        return -1;
    a->has_range = 1;
    return 0;
}

int segd_cmd_get(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"json", no_argument, 0, 'j'},
                                         {"now", required_argument, 0, 'n'},
                                         {"expiring-after", required_argument, 0, 'e'},
                                         {"updated-since", required_argument, 0, 'u'},
                                         {"count-range", required_argument, 0, 'r'},
                                         {"limit", required_argument, 0, 'l'},
                                         {"config", required_argument, 0, 'c'},
                                         {"linked", no_argument, 0, 'L'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    get_args_t a = {0};
    const char *db = NULL;
    int c;
    optind = 1;
    while ((c = segd_args_next("get", argc, argv, "h", opts)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': db = optarg; break;
        case 'j': a.json = 1; break;
        case 'n': bad = segd_arg_int("get", "--now", optarg, 1, INT64_MAX / 1000, &a.now_s); break;
        case 'e':
            bad = segd_arg_int("get", "--expiring-after", optarg, 0, INT64_MAX,
                               &a.q.expiring_after_s);
            break;
        case 'u':
            bad = segd_arg_int("get", "--updated-since", optarg, 0, INT64_MAX,
                               &a.q.updated_since_ms);
            break;
        case 'r': bad = parse_range(optarg, &a); break;
        case 'l': bad = segd_arg_int("get", "--limit", optarg, 0, INT64_MAX, &a.limit); break;
        case 'c': bad = load_partitioner(optarg, &a); break;
        case 'L': a.linked = 1; break;
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: bad = 1; /* said by segd_args_next */
        }
        if (bad)
            return SEGD_EXIT_USAGE;
    }
    if (!db || optind >= argc) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    segd_store_t *s = segd_app_open_reader("get", db, a.now_s);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_profile_t p;
    segd_profile_init(&p);
    held_t *held = calloc(1, sizeof(*held));
    if (held)
        load_held(s, held);
    a.held = held;
    /* one unreadable user must not hide the others: each is reported */
    int rc = SEGD_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        if (held)
            note_if_not_owned(held, &a, argv[i]);
        if (get_user(s, argv[i], &a, &p))
            rc = SEGD_EXIT_FAIL;
    }
    free(held);
    segd_profile_free(&p);
    segd_store_close(s);
    return rc;
}
