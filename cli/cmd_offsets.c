/* `segd offsets show|set`: the daemon's stored positions (DESIGN §4 meta
 * offset/<topic>/<partition>: the next input offset segd run reads, and
 * changes/...: the change topic's position after the last acknowledged
 * delta), shown as a table or JSON, and set offline: the supported way to
 * make segd run re-consume (or skip) a range. Both open the store
 * read-write, so a store in use by segd run is refused (RocksDB's LOCK). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: segd offsets show --db DIR [--json]\n"
        "       segd offsets set --db DIR --topic T [--force] P:O[,P:O...]\n"
        "  show: every stored input offset (the next offset `segd run` reads per\n"
        "        topic and partition), every change-topic position and the GC\n"
        "        watermark; a table, or one JSON object with --json.\n"
        "  set:  rewinds or advances `segd run`'s input offsets of topic T to O\n"
        "        (the next offset it will read) in one synced write; applying a\n"
        "        range twice changes nothing, so rewinding re-consumes it safely.\n"
        "        A topic or partition with no stored offset (the daemon never consumed\n"
        "        it; a typo?) is refused (exit 2) unless --force.\n"
        "  Offline: the store must not be in use (stop `segd run` first).\n");
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

static int print_json(const positions_t *ps, int64_t w)
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

static int cmd_show(segd_store_t *s, int json)
{
    positions_t ps = {0};
    char err[512];
    int rc = SEGD_EXIT_OK;
    if (read_positions(s, &ps, err, sizeof(err))) {
        fprintf(stderr, "segd offsets: %s\n", err);
        rc = SEGD_EXIT_FAIL;
    } else if (json) {
        if (print_json(&ps, segd_store_gc_watermark(s))) {
            fprintf(stderr, "segd offsets: out of memory\n");
            rc = SEGD_EXIT_FAIL;
        }
    } else {
        print_table(&ps, segd_store_gc_watermark(s));
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

/* Nothing is written unless every partition has a stored offset or force:
 * setting one the daemon never consumed is most likely a typo in T or P. */
static int cmd_set(segd_store_t *s, const char *topic, const int32_t *parts,
                   const int64_t *offs, size_t n, int force)
{
    char err[512];
    segd_batch_t *b = NULL;
    if (segd_batch_new(s, &b)) {
        fprintf(stderr, "segd offsets: out of memory\n");
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
            fprintf(stderr, "segd offsets: %s\n", err);
            rc = SEGD_EXIT_FAIL; /* not a usage error, whatever came before */
            goto out_old;
        }
        if (old[i] < 0 && !force) {
            fprintf(stderr, "segd offsets: no stored offset for %s [%" PRId32 "]: the daemon "
                    "never consumed it; --force to set it anyway\n", topic, parts[i]);
            rc = SEGD_EXIT_USAGE;
        }
        segd_batch_set_offset(b, topic, parts[i], offs[i]);
    }
    if (rc == SEGD_EXIT_USAGE)
        goto out_old;
    if (segd_store_write_sync(s, b, err, sizeof(err))) {
        fprintf(stderr, "segd offsets: nothing written: %s\n", err);
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
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL, *topic = NULL;
    int json = 0, force = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd') db = optarg;
        else if (c == 'j') json = 1;
        else if (c == 't') topic = optarg;
        else if (c == 'f') force = 1;
        else if (c == 'h') return usage(stdout), SEGD_EXIT_OK;
        else return usage(stderr), SEGD_EXIT_USAGE;
    }
    const char *verb = optind < argc ? argv[optind++] : "";
    int show = !strcmp(verb, "show"), set = !strcmp(verb, "set");
    enum { MAXP = 1024 };
    int32_t parts[MAXP];
    int64_t offs[MAXP];
    size_t n = 0;
    if (!db || (!show && !set) || (show && (topic || force || optind != argc)) ||
        (set && (json || !topic || !*topic || optind + 1 != argc))) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    if (set && !valid_topic(topic)) {
        fprintf(stderr, "segd offsets: bad topic name '%s' (Kafka's: 1 to 249 of "
                        "a-z A-Z 0-9 . _ -)\n", topic);
        return SEGD_EXIT_USAGE;
    }
    if (set && parse_positions(argv[optind], parts, offs, MAXP, &n)) {
        fprintf(stderr, "segd offsets: bad positions '%s' (want P:O[,P:O...], each "
                        "partition once)\n", argv[optind]);
        return SEGD_EXIT_USAGE;
    }
    segd_store_t *s = segd_app_open_existing_store("offsets", db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    int rc = show ? cmd_show(s, json) : cmd_set(s, topic, parts, offs, n, force);
    segd_store_close(s);
    return rc;
}
