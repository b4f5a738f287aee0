/* `segd offsets show|set`: the daemon's stored positions (DESIGN §4 meta
 * offset/<topic>/<partition>: the next input offset segd run reads, and
 * changes/...: the change topic's position after the last acknowledged
 * delta), shown as a table or JSON, and set offline: the supported way to
 * make segd run re-consume (or skip) a range. show opens the store
 * read-only (it works beside a running segd run); set writes, so a store in
 * use by segd run is refused (RocksDB's LOCK). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/repair_check.h"

extern char **environ;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: segd offsets show --db DIR [--json]\n"
        "       segd offsets set --db DIR --topic T [--brokers B] [--config FILE]\n"
        "                        [--force] P:O[,P:O...]\n"
        "  show: every stored input offset (the next offset `segd run` reads per\n"
        "        topic and partition), every change-topic position and the GC\n"
        "        watermark W with the ingest floor; a table, or one JSON object with\n"
        "        --json. Read-only: works beside a running `segd run`.\n"
        "  set:  rewinds or advances `segd run`'s input offsets of topic T to O\n"
        "        (the next offset it will read) in one synced write. Offline: stop\n"
        "        `segd run` first. A rewind makes segd run consume the range again,\n"
        "        but only events at or above the store's ingest floor (DESIGN 3.1:\n"
        "        the horizon, W + grace, or a partition's import floor) are applied;\n"
        "        older ones are dead-lettered as too_late. So before writing, a rewind\n"
        "        on a store with a floor reads the range from the brokers (--brokers,\n"
        "        or the --config's brokers and input format) and counts the events\n"
        "        below it: if any, it names them and the floor and refuses (exit 4);\n"
        "        without brokers it cannot count and refuses a rewind too. --force\n"
        "        writes anyway.\n"
        "        A topic or partition with no stored offset (the daemon never consumed\n"
        "        it; a typo?) is refused (exit 2) unless --force.\n"
        SEGD_REPAIR_PATHS);
}

typedef struct pos {
    char kind[8];
    char topic[256];
    int32_t partition;
    int64_t next;
} pos_t;

typedef struct positions {
    pos_t *arr;
    size_t n, cap;
    const char *kind;
    int nomem;
} positions_t;

static int collect(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    positions_t *ps = ctx;
    pos_t *arr = segd_array_grow(ps->arr, &ps->cap, ps->n + 1, sizeof(*arr));
    if (!arr)
        return ps->nomem = 1;
    ps->arr = arr;
    pos_t *p = &arr[ps->n++];
    snprintf(p->kind, sizeof(p->kind), "%s", ps->kind);
    snprintf(p->topic, sizeof(p->topic), "%s", topic);
    p->partition = partition;
    p->next = next;
    return 0;
}

/* Both kinds through one view, so they agree with each other. */
static segd_err_t read_positions(segd_store_t *s, positions_t *ps, char *err, size_t n)
{
    segd_store_view_t *v = NULL;
    segd_err_t e = segd_store_view_open(s, &v, err, n);
    if (e)
        return e;
    static const char *const kinds[] = {"offset", "changes"};
    for (int i = 0; !e && i < 2; i++) {
        ps->kind = kinds[i];
        e = segd_store_view_positions(v, kinds[i], collect, ps, err, n);
        if (!e && ps->nomem)
            e = segd_errf(SEGD_ERR_NOMEM, err, n, "out of memory");
    }
    segd_store_view_close(v);
    return e;
}

static int print_json(const positions_t *ps, int64_t w, int64_t floor)
{
    json_t *o = json_object(), *offs = json_array(), *chg = json_array();
    int bad = !o || !offs || !chg;
    for (size_t i = 0; !bad && i < ps->n; i++) {
        const pos_t *p = &ps->arr[i];
        json_t *e = json_pack("{s:s, s:i, s:I}", "topic", p->topic, "partition",
                              (int)p->partition, "next_offset", (json_int_t)p->next);
        bad = !e || json_array_append_new(strcmp(p->kind, "offset") ? chg : offs, e);
    }
    char *s = NULL;
    if (!bad) {
        json_object_set_new(o, "offsets", offs);
        json_object_set_new(o, "changes", chg);
        offs = chg = NULL;
        bad = json_object_set_new(o, "gc_watermark_ms", json_integer(w)) ||
              json_object_set_new(o, "ingest_floor_ms", json_integer(floor)) ||
              !(s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER));
    }
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(offs);
    json_decref(chg);
    json_decref(o);
    return bad ? -1 : 0;
}

static void print_table(const positions_t *ps, int64_t w)
{
    printf("%-8s %-40s %10s %20s\n", "KIND", "TOPIC", "PARTITION", "NEXT_OFFSET");
    for (size_t i = 0; i < ps->n; i++)
        printf("%-8s %-40s %10" PRId32 " %20" PRId64 "\n", ps->arr[i].kind, ps->arr[i].topic,
               ps->arr[i].partition, ps->arr[i].next);
    printf("gc_watermark_ms %" PRId64 "\n", w);
}

/* The store-wide floor (W's start phase or W + grace) and each partition's
 * import floor above it: what a rewind or a replay meets (DESIGN 3.1). */
static void print_floor(segd_store_t *s, const positions_t *ps)
{
    segd_policy_t *pol = segd_store_policy(s);
    char why[160];
    segd_policy_floor_explain(pol, 0, why, sizeof(why));
    printf("ingest_floor_ms %s\n", why);
    for (size_t i = 0; i < ps->n; i++) {
        const pos_t *p = &ps->arr[i];
        int64_t f = strcmp(p->kind, "offset") ? 0
                                              : segd_store_import_floor(s, p->topic, p->partition);
        if (f > segd_policy_ts_floor(pol)) {
            segd_policy_floor_explain(pol, f, why, sizeof(why));
            printf("ingest_floor_ms %s [%" PRId32 "] %s\n", p->topic, p->partition, why);
        }
    }
}

static int cmd_show(segd_store_t *s, int json)
{
    positions_t ps = {0};
    char err[512];
    int rc = SEGD_EXIT_OK;
    if (read_positions(s, &ps, err, sizeof(err))) {
        fprintf(stderr, "segd offsets show: %s\n", err);
        rc = SEGD_EXIT_FAIL;
    } else if (json) {
        if (print_json(&ps, segd_store_gc_watermark(s),
                       segd_policy_ts_floor(segd_store_policy(s)))) {
            fprintf(stderr, "segd offsets show: out of memory\n");
            rc = SEGD_EXIT_FAIL;
        }
    } else {
        print_table(&ps, segd_store_gc_watermark(s));
        print_floor(s, &ps);
    }
    free(ps.arr);
    return rc;
}

/* "P:O,P:O", each partition once, offsets >= 0. */
static int parse_positions(const char *s, int32_t *parts, int64_t *offs, size_t max, size_t *n)
{
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long part = strtoll(p, &end, 10);
        if (end == p || *end != ':' || part < 0 || part > INT32_MAX || *n == max)
            return -1;
        p = end + 1;
        long long off = strtoll(p, &end, 10);
        if (end == p || off < 0)
            return -1;
        for (size_t i = 0; i < *n; i++)
            if (parts[i] == part)
                return -1;
        parts[*n] = (int32_t)part;
        offs[(*n)++] = off;
        p = end;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            return -1;
    }
    return *n ? 0 : -1;
}

/* Kafka's rule for topic names: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
static int valid_topic(const char *t)
{
    size_t len = strlen(t);
    return len >= 1 && len <= 249 && strcmp(t, ".") && strcmp(t, "..") &&
           strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

typedef struct set_args {
    const char *db, *topic, *brokers, *config;
    int force;
} set_args_t;

/* segd run's configuration for reading the range: --config's input format
 * and kafka settings, SEGD_* variables, --brokers over them. */
static int range_config(const set_args_t *a, segd_config_t *cfg, char *err, size_t n)
{
    return (a->config && segd_config_load_file(cfg, a->config, err, n)) ||
           segd_config_load_env(cfg, environ, err, n) ||
           (a->brokers && segd_config_set(cfg, "brokers", a->brokers, err, n)) ||
           segd_config_set(cfg, "topics", a->topic, err, n) ||
           segd_config_set(cfg, "db", a->db, err, n) ||
           (!cfg->group && segd_config_set(cfg, "group", "segd-offsets", err, n)) ||
           (cfg->brokers && segd_config_finish(cfg, err, n));
}

/* A rewind makes segd run consume [O, stored) again; on a store with an
 * ingest floor the events of it below the floor would be dead-lettered,
 * not applied (DESIGN 3.1), so they are counted first (repair_check.h).
 * Advancing skips input and needs no check. */
static int rewind_check(segd_store_t *s, const set_args_t *a, const int32_t *parts,
                        const int64_t *old, const int64_t *offs, size_t n)
{
    static segd_replay_pos_t from[SEGD_REPLAY_MAX_PARTITIONS], to[SEGD_REPLAY_MAX_PARTITIONS];
    static int32_t ids[SEGD_REPLAY_MAX_PARTITIONS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < SEGD_REPLAY_MAX_PARTITIONS; i++)
        if (old[i] > offs[i]) {
            ids[k] = parts[i];
            from[k] = (segd_replay_pos_t){parts[i], offs[i]};
            to[k++] = (segd_replay_pos_t){parts[i], old[i]};
        }
    segd_policy_t *pol = segd_store_policy(s);
    if (!k || (!segd_policy_ts_floor(pol) && !segd_policy_import_floor(pol)))
        return SEGD_EXIT_OK;
    segd_config_t cfg;
    char err[512];
    int rc = SEGD_EXIT_OK;
    segd_config_init(&cfg);
    if (range_config(a, &cfg, err, sizeof(err))) {
        fprintf(stderr, "segd offsets set: %s\n", err);
        rc = SEGD_EXIT_USAGE;
    } else if (!cfg.brokers) {
        char why[160];
        segd_policy_floor_explain(pol, segd_policy_import_floor(pol), why, sizeof(why));
        fprintf(stderr, "segd offsets set: a rewind re-consumes events that may be below the "
                "store's ingest floor %s, which are dead-lettered, not applied; give "
                "--brokers (or --config) so that they can be counted first%s\n", why,
                a->force ? "; --force: writing anyway" : ", or --force");
        rc = a->force ? SEGD_EXIT_OK : SEGD_EXIT_REFUSED;
        if (!a->force)
            fputs(SEGD_REPAIR_PATHS, stderr);
    } else {
        segd_replay_opts_t o = {.cfg = &cfg, .partitions = ids, .n_partitions = k,
                                .from = SEGD_REPLAY_OFFSETS, .from_offsets = from, .n_from = k,
                                .to = SEGD_REPLAY_TO_OFFSETS, .to_offsets = to, .n_to = k};
        rc = segd_repair_check("offsets set", &o, s, segd_app_stop_on_signals(), a->force);
    }
    segd_config_free(&cfg);
    return rc;
}

/* Nothing is written unless every partition has a stored offset or force
 * (setting one the daemon never consumed is most likely a typo in T or P),
 * and a rewind passed rewind_check. */
static int cmd_set(segd_store_t *s, const set_args_t *a, const int32_t *parts,
                   const int64_t *offs, size_t n)
{
    const char *topic = a->topic;
    char err[512];
    segd_batch_t *b = NULL;
    if (segd_batch_new(s, &b)) {
        fprintf(stderr, "segd offsets set: out of memory\n");
        return SEGD_EXIT_FAIL;
    }
    int64_t *old = calloc(n, sizeof(*old));
    int rc = SEGD_EXIT_FAIL;
    if (!old)
        goto out_batch;
    for (size_t i = 0; i < n; i++) {
        segd_err_t e = segd_store_offset_get(s, topic, parts[i], &old[i], err, sizeof(err));
        if (e == SEGD_ERR_NOTFOUND) {
            old[i] = -1;
        } else if (e) {
            fprintf(stderr, "segd offsets set: %s\n", err);
            rc = SEGD_EXIT_FAIL; /* not a usage error, whatever came before */
            goto out_old;
        }
        if (old[i] < 0 && !a->force) {
            fprintf(stderr, "segd offsets set: no stored offset for %s [%" PRId32 "]: the daemon "
                    "never consumed it; --force to set it anyway\n", topic, parts[i]);
            rc = SEGD_EXIT_USAGE;
        }
        segd_batch_set_offset(b, topic, parts[i], offs[i]);
    }
    if (rc == SEGD_EXIT_USAGE)
        goto out_old;
    if ((rc = rewind_check(s, a, parts, old, offs, n)) != SEGD_EXIT_OK)
        goto out_old;
    rc = SEGD_EXIT_FAIL;
    if (segd_store_write_sync(s, b, err, sizeof(err))) {
        fprintf(stderr, "segd offsets set: nothing written: %s\n", err);
        goto out_old;
    }
    for (size_t i = 0; i < n; i++) {
        if (old[i] < 0)
            printf("%s [%" PRId32 "]: (none) -> %" PRId64 "\n", topic, parts[i], offs[i]);
        else
            printf("%s [%" PRId32 "]: %" PRId64 " -> %" PRId64 "\n", topic, parts[i], old[i],
                   offs[i]);
    }
    rc = SEGD_EXIT_OK;
out_old:
    free(old);
out_batch:
    segd_batch_destroy(b);
    return rc;
}

int segd_cmd_offsets(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"json", no_argument, 0, 'j'},
                                         {"topic", required_argument, 0, 't'},
                                         {"force", no_argument, 0, 'f'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"config", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    set_args_t a = {0};
    int json = 0, c;
    /* the verb may follow flags: then a first pass over every flag of both
     * (refusing any other) leaves the operands, the verb first, behind them */
    optind = 1;
    if (argc < 2 || (strcmp(argv[1], "show") && strcmp(argv[1], "set"))) {
        while ((c = segd_args_next("offsets", argc, argv, "h", opts)) != -1)
            if (c == 'h')
                return usage(stdout), SEGD_EXIT_OK;
            else if (c == '?')
                return SEGD_EXIT_USAGE;
    }
    const char *verb = optind < argc ? argv[optind] : "";
    int show = !strcmp(verb, "show"), set = !strcmp(verb, "set");
    if (!show && !set) {
        fprintf(stderr, "segd offsets: %s%s%s (see segd offsets --help)\n",
                *verb ? "unknown subcommand '" : "give a subcommand: show or set", verb,
                *verb ? "'" : "");
        return SEGD_EXIT_USAGE;
    }
    /* then only the verb's own flags */
    const char *cmd = show ? "offsets show" : "offsets set";
    struct option mine[sizeof(opts) / sizeof(opts[0])];
    segd_args_pick(opts, show ? "djh" : "dtfbch", mine, sizeof(mine) / sizeof(mine[0]));
    optind = 1;
    while ((c = segd_args_next(cmd, argc, argv, "h", mine)) != -1) {
        if (c == 'd') a.db = optarg;
        else if (c == 'j') json = 1;
        else if (c == 't') a.topic = optarg;
        else if (c == 'f') a.force = 1;
        else if (c == 'b') a.brokers = optarg;
        else if (c == 'c') a.config = optarg;
        else if (c == 'h') return usage(stdout), SEGD_EXIT_OK;
        else return SEGD_EXIT_USAGE; /* said by segd_args_next */
    }
    optind++; /* the verb */
    enum { MAXP = 1024 };
    int32_t parts[MAXP];
    int64_t offs[MAXP];
    size_t n = 0;
    const char *db = a.db, *topic = a.topic;
    const char *why = !db                                   ? "--db DIR is required"
                      : set && (!topic || !*topic)          ? "--topic T is required"
                      : show && optind != argc              ? "show takes no operand"
                      : set && optind + 1 != argc           ? "give one P:O[,P:O...]"
                                                            : NULL;
    if (why) {
        fprintf(stderr, "segd %s: %s (see segd offsets --help)\n", cmd, why);
        return SEGD_EXIT_USAGE;
    }
    if (set && !valid_topic(topic)) {
        fprintf(stderr, "segd offsets set: bad topic name '%s' (Kafka's: 1 to 249 of "
                        "a-z A-Z 0-9 . _ -)\n", topic);
        return SEGD_EXIT_USAGE;
    }
    if (set && parse_positions(argv[optind], parts, offs, MAXP, &n)) {
        fprintf(stderr, "segd offsets set: bad positions '%s' (want P:O[,P:O...], each "
                        "partition once)\n", argv[optind]);
        return SEGD_EXIT_USAGE;
    }
    /* show only reads: a read-only open works beside a running segd run */
    segd_store_t *s = show ? segd_app_open_reader("offsets show", db, 0)
                           : segd_app_open_existing_store("offsets set", db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    int rc = show ? cmd_show(s, json) : cmd_set(s, &a, parts, offs, n);
    segd_store_close(s);
    return rc;
}
