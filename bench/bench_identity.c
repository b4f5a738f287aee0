/* `segd bench identity`: the identity graph's costs (DESIGN §8, §10).
 * Linked reads: persons of 1, 5 and 20 ids, each id holding 1000 live
 * segments in the store; a linked read = two graph reads + one record read
 * per member + the §3 join + the live filter, timed one by one (p50/p99).
 * Link events applied per second: random LINKs within groups of 10 ids
 * (every join re-points members, the guard never refuses), through the
 * online union-find into batches of 1000 written with their offset. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/app.h"
#include "base/args.h"
#include "bench/bench.h"
#include "cache/edge.h"
#include "cache/edge_load.h"
#include "publisher/snapshot.h"
#include "consumer/apply.h"
#include "core/query.h"
#include "store/identity.h"

#define SEGMENTS 1000
#define LINK_BATCH 1000

typedef struct id_bench_args {
    int64_t persons, lookups, link_events;
    char dir[512];
} id_bench_args_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int member_id(char *out, size_t cap, int size, int64_t person, int m)
{
    return snprintf(out, cap, "k%02d-p%06" PRId64 "-m%02d", size, person, m);
}

/* Every member of every person gets one event of 1000 segments. */
static int load_segments(segd_store_t *s, const id_bench_args_t *a, const int *sizes, int n,
                         int64_t now_ms)
{
    segd_applier_t ap;
    segd_event_t ev;
    char err[512], id[64];
    uint64_t seed = 42;
    if (segd_applier_init(&ap, s))
        return -1;
    segd_event_init(&ev);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++)
        for (int64_t p = 0; p < a->persons && !rc; p++)
            for (int m = 0; m < sizes[k] && !rc; m++) {
                segd_event_reset(&ev);
                size_t len = (size_t)member_id(id, sizeof(id), sizes[k], p, m);
                segd_event_set_user(&ev, id, len);
                ev.ts_ms = now_ms - (int64_t)(rng(&seed) % (30LL * 86400000));
                ev.op = SEGD_OP_UPSERT;
                for (int i = 0; i < SEGMENTS; i++) {
                    segd_seg_update_t u = {(int64_t)(rng(&seed) % 82000), 60 * 86400, 0, 0};
                    segd_event_add_segment(&ev, &u);
                }
                rc = segd_applier_add(&ap, &ev) != SEGD_OK;
                if (!rc && segd_batch_count(ap.batch) >= 256)
                    rc = segd_applier_flush(&ap, err, sizeof(err)) != SEGD_OK;
            }
    if (!rc)
        rc = segd_applier_flush(&ap, err, sizeof(err)) != SEGD_OK;
    segd_event_free(&ev);
    segd_applier_free(&ap);
    return rc;
}

/* Applies evs in batches of LINK_BATCH, each written with an offset. */
static int apply_links(segd_store_t *s, segd_ident_t *id, const segd_link_event_t *evs,
                       size_t n, uint64_t *refused)
{
    segd_batch_t *b = NULL;
    char err[512];
    if (segd_batch_new(s, &b))
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        for (size_t k = 0; k < LINK_BATCH && i < n && !rc; k++, i++) {
            segd_ident_result_t res;
            rc = segd_ident_apply(id, b, &evs[i], NULL, NULL, &res, err, sizeof(err)) != SEGD_OK;
            *refused += res != SEGD_IDENT_APPLIED;
        }
        segd_batch_set_offset(b, "segments.links", 0, (int64_t)i);
        if (!rc && segd_store_write(s, b, err, sizeof(err)))
            rc = -1;
        segd_batch_clear(b);
        segd_ident_reset(id);
    }
    segd_batch_destroy(b);
    if (rc)
        fprintf(stderr, "segd bench identity: %s\n", err);
    return rc;
}

/* The persons' chains: member 0 - 1 - ... - k-1, weight 1. */
static int link_persons(segd_store_t *s, segd_ident_t *id, const id_bench_args_t *a,
                        const int *sizes, int n, int64_t now_ms)
{
    size_t cap = 0, cnt = 0;
    for (int k = 0; k < n; k++)
        cap += (size_t)a->persons * (size_t)(sizes[k] - 1);
    segd_link_event_t *evs = calloc(cap ? cap : 1, sizeof(*evs));
    char (*names)[2][64] = calloc(cap ? cap : 1, sizeof(*names));
    if (!evs || !names) {
        free(evs);
        free(names);
        return -1;
    }
    for (int k = 0; k < n; k++)
        for (int64_t p = 0; p < a->persons; p++)
            for (int m = 1; m < sizes[k]; m++, cnt++) {
                size_t la = (size_t)member_id(names[cnt][0], 64, sizes[k], p, m - 1);
                size_t lb = (size_t)member_id(names[cnt][1], 64, sizes[k], p, m);
                evs[cnt] = (segd_link_event_t){names[cnt][0], la, names[cnt][1], lb, SEGD_LINK,
                                               now_ms - m, 1.0};
            }
    uint64_t refused = 0;
    int rc = apply_links(s, id, evs, cnt, &refused);
    free(evs);
    free(names);
    return rc || refused ? -1 : 0;
}

/* p50/p99 of linked reads of random persons of one size, in microseconds. */
static int time_reads(segd_store_t *s, const id_bench_args_t *a, int size, double *p50,
                      double *p99, double *members, size_t *live)
{
    double *lat = malloc((size_t)a->lookups * sizeof(*lat));
    segd_entry_t *sel = malloc((size_t)size * SEGMENTS * sizeof(*sel));
    segd_profile_t p;
    segd_profile_init(&p);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_query_t q = {0};
    uint64_t seed = 7 + (uint64_t)size;
    char id[64], err[512];
    int rc = !lat || !sel;
    *live = 0;
    for (int64_t i = 0; !rc && i < a->lookups; i++) {
        int64_t person = (int64_t)(rng(&seed) % (uint64_t)a->persons);
        size_t len = (size_t)member_id(id, sizeof(id), size, person,
                                       (int)(rng(&seed) % (uint64_t)size));
        double t0 = now_s();
        rc = segd_ident_get_linked(s, id, len, &p, NULL, NULL, err, sizeof(err)) != SEGD_OK;
        size_t n = rc ? 0 : segd_query_select(&p, &rule, &q, sel);
        lat[i] = (now_s() - t0) * 1e6;
        *live += n;
    }
    if (!rc) {
        qsort(lat, (size_t)a->lookups, sizeof(*lat), cmp_double);
        *p50 = lat[a->lookups / 2];
        *p99 = lat[a->lookups * 99 / 100];
        *members = (double)size;
        *live /= (size_t)a->lookups;
    } else
        fprintf(stderr, "segd bench identity: %s\n", err);
    free(lat);
    free(sel);
    segd_profile_free(&p);
    return rc;
}

/* The edge cache a snapshot of the store loads (DESIGN §10.6: the units
 * carry the graph's members files), as a bidder's cache holds it. */
static int build_cache(segd_store_t *s, const id_bench_args_t *a, int64_t now_ms,
                       segd_edge_t **out)
{
    char snap[600], topic_dir[700], err[512] = "";
    snprintf(snap, sizeof(snap), "%s/snap", a->dir);
    snprintf(topic_dir, sizeof(topic_dir), "%s/bench", snap);
    segd_snapshot_opts_t so;
    segd_snapshot_opts_default(&so);
    so.topic = "bench";
    so.buckets = 4;
    segd_manifest_t m;
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = now_ms;
    int rc = segd_snapshot_export(s, snap, &so, &m, NULL, err, sizeof(err)) != SEGD_OK;
    if (!rc)
        segd_manifest_free(&m);
    rc = rc || segd_edge_new(out, &eo) != SEGD_OK ||
         segd_edge_load_snapshot(*out, topic_dir, NULL, &m, err, sizeof(err)) != SEGD_OK;
    if (!rc)
        segd_manifest_free(&m);
    else
        fprintf(stderr, "segd bench identity: cache: %s\n", err);
    return rc;
}

/* The same reads from the cache: segd_edge_lookup_linked, in microseconds. */
static int time_cache_reads(segd_edge_t *e, const id_bench_args_t *a, int size, double *p50,
                            double *p99, size_t *live)
{
    size_t cap = (size_t)size * SEGMENTS;
    double *lat = malloc((size_t)a->lookups * sizeof(*lat));
    segd_entry_t *out = malloc(cap * sizeof(*out));
    uint64_t seed = 7 + (uint64_t)size; /* the store's sequence of persons */
    char id[64];
    int rc = !lat || !out;
    *live = 0;
    for (int64_t i = 0; !rc && i < a->lookups; i++) {
        int64_t person = (int64_t)(rng(&seed) % (uint64_t)a->persons);
        size_t len = (size_t)member_id(id, sizeof(id), size, person,
                                       (int)(rng(&seed) % (uint64_t)size));
        size_t n = 0;
        int known = 0;
        double t0 = now_s();
        rc = segd_edge_lookup_linked(e, id, len, out, cap, &n, &known, NULL, NULL) != SEGD_OK ||
             !known;
        lat[i] = (now_s() - t0) * 1e6;
        *live += n;
    }
    if (!rc) {
        qsort(lat, (size_t)a->lookups, sizeof(*lat), cmp_double);
        *p50 = lat[a->lookups / 2];
        *p99 = lat[a->lookups * 99 / 100];
        *live /= (size_t)a->lookups;
    } else
        fprintf(stderr, "segd bench identity: a cache lookup failed\n");
    free(lat);
    free(out);
    return rc;
}

/* Random LINKs within groups of 10 fresh ids: events applied per second. */
static int time_link_rate(segd_store_t *s, segd_ident_t *id, const id_bench_args_t *a,
                          int64_t now_ms, double *rate)
{
    size_t n = (size_t)a->link_events;
    segd_link_event_t *evs = calloc(n ? n : 1, sizeof(*evs));
    char (*names)[2][32] = calloc(n ? n : 1, sizeof(*names));
    uint64_t seed = 99, groups = n / 10 + 1, refused = 0;
    if (!evs || !names) {
        free(evs);
        free(names);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t g = rng(&seed) % groups, x = rng(&seed) % 10, y = (x + 1 + rng(&seed) % 9) % 10;
        size_t la = (size_t)snprintf(names[i][0], 32, "g%08" PRIu64 "-%" PRIu64, g, x);
        size_t lb = (size_t)snprintf(names[i][1], 32, "g%08" PRIu64 "-%" PRIu64, g, y);
        evs[i] = (segd_link_event_t){names[i][0], la, names[i][1], lb, SEGD_LINK,
                                     now_ms - (int64_t)(rng(&seed) % 86400000), 0.9};
    }
    double t0 = now_s();
    int rc = apply_links(s, id, evs, n, &refused);
    *rate = (double)n / (now_s() - t0);
    free(evs);
    free(names);
    return rc || refused ? -1 : 0;
}

static int parse(int argc, char **argv, id_bench_args_t *a)
{
    static const struct option opts[] = {{"persons", required_argument, 0, 'p'},
                                         {"lookups", required_argument, 0, 'l'},
                                         {"link-events", required_argument, 0, 'e'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("bench identity", argc, argv, "h", opts)) != -1) {
        int bad = 0;
        switch (c) {
        case 'p': bad = segd_arg_int("bench identity", "--persons", optarg, 1, 1000000, &a->persons); break;
        case 'l': bad = segd_arg_int("bench identity", "--lookups", optarg, 1, 100000000, &a->lookups); break;
        case 'e':
            bad = segd_arg_int("bench identity", "--link-events", optarg, 1, 100000000, &a->link_events);
            break;
        case 'd': snprintf(a->dir, sizeof(a->dir), "%s", optarg); break;
        default: bad = 1;
        }
        if (bad) {
            if (c != 'h')
                return -1; /* said */
            fprintf(stdout, "usage: segd bench identity [--persons N] "
                    "[--lookups N] [--link-events N] [--dir DIR]\n");
            return c == 'h' ? 1 : -1;
        }
    }
    return 0;
}

int segd_bench_identity(int argc, char **argv)
{
    id_bench_args_t a = {.persons = 200, .lookups = 2000, .link_events = 100000};
    snprintf(a.dir, sizeof(a.dir), "/tmp/segd-bench-identity-XXXXXX");
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    int own_dir = strstr(a.dir, "XXXXXX") != NULL; /* made here: removed at the end */
    if (own_dir && !mkdtemp(a.dir))
        return SEGD_EXIT_FAIL;
    static const int sizes[] = {1, 5, 20};
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    segd_store_t *s = segd_app_open_store("bench", a.dir, 0, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_ident_t *id = NULL;
    char err[512];
    int rc = segd_ident_new(s, NULL, &id, err, sizeof(err)) ||
             load_segments(s, &a, sizes, 3, now_ms) || link_persons(s, id, &a, sizes, 3, now_ms);
    segd_edge_t *edge = NULL;
    if (!rc)
        rc = build_cache(s, &a, now_ms, &edge);
    printf("## identity (segd bench identity --persons %" PRId64 " --lookups %" PRId64
           " --link-events %" PRId64 ")\n\n| component | store linked read p50 µs | p99 µs | "
           "cache linked read p50 µs | p99 µs | live segments returned |\n"
           "|---|---|---|---|---|---|\n",
           a.persons, a.lookups, a.link_events);
    for (int k = 0; k < 3 && !rc; k++) {
        double p50, p99, members, c50 = 0, c99 = 0;
        size_t live, clive = 0;
        rc = time_reads(s, &a, sizes[k], &p50, &p99, &members, &live) ||
             time_cache_reads(edge, &a, sizes[k], &c50, &c99, &clive);
        if (!rc && clive != live) {
            fprintf(stderr, "segd bench identity: the cache returned %zu live segments a read, "
                    "the store %zu\n", clive, live);
            rc = 1;
        }
        if (!rc)
            printf("| %d id%s | %.1f | %.1f | %.2f | %.2f | %zu |\n", sizes[k],
                   sizes[k] > 1 ? "s" : "", p50, p99, c50, c99, live);
    }
    segd_edge_destroy(edge);
    double rate = 0;
    if (!rc)
        rc = time_link_rate(s, id, &a, now_ms, &rate);
    if (!rc)
        printf("\nlink events applied: %.0f/s (%" PRId64 " random LINKs within groups of 10 "
               "ids, batches of %d)\n",
               rate, a.link_events, LINK_BATCH);
    segd_ident_destroy(id);
    segd_store_close(s);
    if (own_dir) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", a.dir);
        if (system(cmd))
            fprintf(stderr, "segd bench identity: could not remove %s\n", a.dir);
    }
    if (rc)
        fprintf(stderr, "segd bench identity: failed\n");
    return rc ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}
