/* The timed warm reads of `segd bench store` (bench_store_int.h), below both
 * the main run (bench_store.c, which reads segd's store and the baseline)
 * and the retirement-marker phases (bench_store_retire.c, which read segd's
 * store again after each phase), and the helpers all of them use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "bench/bench_store_int.h"
#include "core/query.h"
#include "workload/seed.h"

int bench_store_fail(const char *what, const char *why)
{
    fprintf(stderr, "segd bench store: %s: %s\n", what, why);
    return -1;
}

/* Grows a scratch entry array to hold at least n entries. */
int bench_store_reserve_entries(segd_entry_t **e, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    size_t c = n < 4096 ? 4096 : n;
    segd_entry_t *p = realloc(*e, c * sizeof(*p));
    if (!p)
        return bench_store_fail("read buffer", "out of memory");
    *e = p;
    *cap = c;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads the same pseudo-random users on every call (so the untimed pass
 * warms exactly what the timed pass reads); lat may be NULL. */
static int read_pass(const store_args_t *a, int64_t users, read_fn_t fn, void *ctx,
                     double *lat, uint64_t *live_total)
{
    uint64_t rng = (uint64_t)a->seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < a->reads; i++) {
        char uid[32];
        size_t live = 0;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        segd_seed_user_id((rng >> 33) % (uint64_t)users, uid, sizeof(uid));
        double t0 = segd_mono_s();
        if (fn(ctx, uid, &live))
            return -1;
        if (lat)
            lat[i] = segd_mono_s() - t0;
        *live_total += live;
    }
    return 0;
}

/* An untimed pass that warms the cache, then the timed pass: reads per
 * second and latency percentiles into r. */
int bench_store_timed_reads(const store_args_t *a, int64_t users, read_fn_t fn, void *ctx,
                            model_result_t *r)
{
    int64_t n = a->reads;
    uint64_t warm_live = 0, live = 0;
    double *lat = malloc((size_t)n * sizeof(*lat));
    if (!lat)
        return bench_store_fail("latency buffer", "out of memory");
    int rc = read_pass(a, users, fn, ctx, NULL, &warm_live);
    double t0 = segd_mono_s();
    if (!rc)
        rc = read_pass(a, users, fn, ctx, lat, &live);
    if (!rc) {
        r->reads_per_s = (double)n / (segd_mono_s() - t0);
        qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
        r->p50_us = lat[n / 2] * 1e6;
        r->p99_us = lat[n * 99 / 100] * 1e6;
        r->p999_us = lat[n * 999 / 1000] * 1e6;
        r->live_per_read = (double)live / (double)n;
    }
    free(lat);
    return rc;
}

typedef struct segd_reader {
    segd_store_t *s;
    segd_profile_t p;
    segd_entry_t *sel;
    size_t sel_cap;
    segd_prune_t rule;
} segd_reader_t;

/* What a bidder does: one Get, decode, keep the live entries. */
static int segd_read(void *ctx, const char *uid, size_t *live)
{
    segd_reader_t *rd = ctx;
    char err[256];
    if (segd_store_get(rd->s, uid, strlen(uid), &rd->p, err, sizeof(err)))
        return bench_store_fail("get", err);
    if (bench_store_reserve_entries(&rd->sel, &rd->sel_cap, rd->p.n))
        return -1;
    *live = segd_query_select(&rd->p, &rd->rule, NULL, rd->sel);
    return 0;
}

int bench_store_segd_reads(segd_store_t *s, const store_args_t *a, model_result_t *r)
{
    segd_reader_t rd = {.s = s};
    segd_profile_init(&rd.p);
    segd_policy_rule(segd_store_policy(s), &rd.rule, 1);
    int rc = bench_store_timed_reads(a, a->users, segd_read, &rd, r);
    free(rd.sel);
    segd_profile_free(&rd.p);
    return rc;
}
