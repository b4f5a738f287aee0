/* `segd bench cache`: the edge table's lookup latency in process (DESIGN §8
 * reads, for the cache): U seed-workload users (1000 segments each) joined
 * into a segd_edge_t, then random lookups timed one by one, with the same
 * lookups against the store's record decode (segd_record_decode + live
 * filter) side by side, the cost the table's layout avoids. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "core/record.h"
#include "workload/seed.h"
#include "cache/edge.h"
#include "app/app.h"
#include "base/args.h"
#include "core/query.h"

typedef struct cache_args {
    int64_t users, lookups;
} cache_args_t;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every user's profile, built from its seed events (they come interleaved). */
static segd_profile_t *build_profiles(const cache_args_t *a, int64_t now_ms)
{
    segd_seed_opts_t so;
    segd_seed_t *g = NULL;
    segd_seed_opts_default(&so);
    so.users = (uint64_t)a->users;
    so.now_ms = now_ms;
    segd_profile_t *p = calloc((size_t)a->users, sizeof(*p)), op, out;
    if (!p || segd_seed_new(&g, &so)) {
        free(p);
        return NULL;
    }
    segd_profile_init(&op);
    segd_profile_init(&out);
    segd_event_t ev;
    segd_event_init(&ev);
    while (segd_seed_next(g, &ev)) {
        uint64_t u = strtoull(ev.user_id + 1, NULL, 10);
        if (u >= (uint64_t)a->users || segd_event_to_profile(&ev, 3600, &op))
            continue;
        const segd_profile_t *in[2] = {&p[u], &op};
        if (segd_profile_join(&out, in, 2, NULL) == SEGD_OK) {
            segd_profile_t t = p[u];
            p[u] = out;
            out = t;
        }
    }
    segd_event_free(&ev);
    segd_profile_free(&op);
    segd_profile_free(&out);
    segd_seed_destroy(g);
    return p;
}

typedef struct lat {
    double p50, p99, p999, mean_live;
} lat_t;

static void summarize(double *ns, int64_t n, uint64_t live, lat_t *l)
{
    qsort(ns, (size_t)n, sizeof(*ns), cmp_double);
    l->p50 = ns[n / 2] / 1e3;
    l->p99 = ns[n * 99 / 100] / 1e3;
    l->p999 = ns[n * 999 / 1000] / 1e3;
    l->mean_live = (double)live / (double)n;
}

/* Returns -1 to go on, or the exit code (--help, a bad option). */
static int parse_args(int argc, char **argv, cache_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"lookups", required_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("bench cache", argc, argv, "h", opts)) != -1)
        if ((c != 'u' || segd_arg_int("bench cache", "--users", optarg, 1, 10000000, &a->users)) &&
            (c != 'l' || segd_arg_int("bench cache", "--lookups", optarg, 1, 100000000, &a->lookups))) {
            if (c != 'h')
                return SEGD_EXIT_USAGE; /* said */
            fprintf(stdout,
                    "usage: segd bench cache [--users N] [--lookups N]\n");
            return c == 'h' ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
        }
    return -1;
}

/* Puts every user's profile into the edge table and encodes it as the store
 * would, for the decode side; *stored counts the entries put. */
static int fill(const cache_args_t *a, segd_profile_t *prof, segd_edge_t *e, segd_buf_t *enc,
                uint64_t *stored)
{
    for (int64_t u = 0; u < a->users; u++) {
        char uid[32];
        segd_seed_user_id((uint64_t)u, uid, sizeof(uid));
        if (segd_edge_put(e, uid, strlen(uid), &prof[u]) ||
            segd_record_encode(&prof[u], &enc[u]))
            return -1;
        *stored += prof[u].n;
    }
    return 0;
}

/* Times a->lookups random lookups, each one against the edge table (ns) and
 * against the store's record decode plus live filter (ns2). The two
 * alternate so that both see the same noise from the machine. */
static void time_lookups(const cache_args_t *a, segd_edge_t *e, const segd_buf_t *enc,
                         const segd_prune_t *rule, segd_entry_t *out, double *ns, double *ns2,
                         uint64_t *live, uint64_t *live2)
{
    segd_query_t q = {0};
    segd_profile_t scratch;
    segd_profile_init(&scratch);
    unsigned r = 1;
    for (int64_t i = 0; i < a->lookups; i++) {
        r = r * 1103515245u + 12345u;
        int64_t u = (int64_t)((r >> 4) % (uint64_t)a->users);
        char uid[32];
        segd_seed_user_id((uint64_t)u, uid, sizeof(uid));
        size_t n = 0;
        double s = now_ns();
        segd_edge_lookup(e, uid, strlen(uid), out, 8192, &n);
        ns[i] = now_ns() - s;
        *live += n;
        s = now_ns();
        segd_record_decode(enc[u].data, enc[u].len, &scratch);
        size_t n2 = segd_query_select(&scratch, rule, &q, out);
        ns2[i] = now_ns() - s;
        *live2 += n2;
    }
    segd_profile_free(&scratch);
}

static void report(const cache_args_t *a, segd_edge_t *e, uint64_t stored, double build_s,
                   double load_s, const lat_t *le, const lat_t *ld)
{
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    printf("## segd bench cache --users %" PRId64 " --lookups %" PRId64 "\n\n", a->users,
           a->lookups);
    printf("%" PRId64 " seed users, %" PRIu64 " entries (%.0f per user) built in %.1f s and put "
           "into the edge table in %.2f s (%.0f users/s); the table keeps %" PRIu64 " of them "
           "(expired ones past the horizon go), %.1f MB (%.2f bytes/entry)\n\n",
           a->users, stored, (double)stored / (double)a->users, build_s, load_s,
           (double)a->users / load_s, st.entries, (double)st.bytes / 1e6,
           (double)st.bytes / (double)st.entries);
    printf("| lookup of one user's live segments | p50 µs | p99 µs | p99.9 µs | live/lookup |\n"
           "|---|---|---|---|---|\n");
    printf("| segd_edge_lookup (tuple dictionary) | %.2f | %.2f | %.2f | %.0f |\n", le->p50,
           le->p99, le->p999, le->mean_live);
    printf("| store record decode + live filter | %.2f | %.2f | %.2f | %.0f |\n", ld->p50,
           ld->p99, ld->p999, ld->mean_live);
    printf("\ntarget p99 <= 5 µs for a 1000-segment user: %s\n",
           le->p99 <= 5.0 ? "met" : "missed");
}

int segd_bench_cache(int argc, char **argv)
{
    cache_args_t a = {20000, 200000};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    double t0 = now_ns();
    segd_profile_t *prof = build_profiles(&a, now_ms);
    if (!prof)
        return SEGD_EXIT_FAIL;
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = now_ms;
    segd_edge_t *e = NULL;
    segd_buf_t *enc = calloc((size_t)a.users, sizeof(*enc));
    double *ns = malloc((size_t)a.lookups * sizeof(*ns));
    double *ns2 = malloc((size_t)a.lookups * sizeof(*ns2));
    segd_entry_t *out = malloc(8192 * sizeof(*out));
    rc = SEGD_EXIT_FAIL;
    if (!enc || !ns || !ns2 || !out || segd_edge_new(&e, &eo))
        goto out;
    uint64_t stored = 0;
    double t1 = now_ns();
    if (fill(&a, prof, e, enc, &stored))
        goto out;
    double load_s = (now_ns() - t1) / 1e9;
    segd_prune_t rule = {.now_ms = now_ms, .horizon_ms = eo.horizon_ms, .complete = 1};
    uint64_t live = 0, live2 = 0;
    time_lookups(&a, e, enc, &rule, out, ns, ns2, &live, &live2);
    if (live != live2) {
        fprintf(stderr, "segd bench cache: the edge and the store's records disagree\n");
        goto out;
    }
    lat_t le, ld;
    summarize(ns, a.lookups, live, &le);
    summarize(ns2, a.lookups, live2, &ld);
    report(&a, e, stored, (t1 - t0) / 1e9, load_s, &le, &ld);
    rc = SEGD_EXIT_OK;
out:
    for (int64_t u = 0; prof && u < a.users; u++) {
        segd_profile_free(&prof[u]);
        if (enc)
            segd_buf_free(&enc[u]);
    }
    free(prof);
    free(enc);
    free(ns);
    free(ns2);
    free(out);
    segd_edge_destroy(e);
    return rc;
}
