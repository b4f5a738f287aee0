/* `segd bench store --retire N,M`: the read cost of retirement markers on
 * the store bench_store.c wrote and read: the same reads, a full scan keeping
 * live entries (the export's read path) and a full compaction, with no
 * markers, N segment markers, N segment + M partner markers retiring
 * nothing, then retiring some; and the report's table of them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "bench/bench_store_int.h"
#include "core/query.h"

typedef struct scan_ctx {
    segd_prune_t rule;
    segd_entry_t *sel;
    size_t sel_cap;
    uint64_t live;
    int failed;
} scan_ctx_t;

/* What an export does with each record: keep its live entries. */
static int scan_select(void *ctx, const char *user, size_t user_len, const segd_profile_t *p)
{
    scan_ctx_t *c = ctx;
    (void)user, (void)user_len;
    if (bench_store_reserve_entries(&c->sel, &c->sel_cap, p->n)) {
        c->failed = 1;
        return 1;
    }
    c->live += segd_query_select(p, &c->rule, NULL, c->sel);
    return 0;
}

static int cmp_reads(const void *x, const void *y)
{
    double a = ((const model_result_t *)x)->reads_per_s, b = ((const model_result_t *)y)->reads_per_s;
    return (a > b) - (a < b);
}

static int retire_measure(segd_store_t *s, const store_args_t *a, retire_phase_t *ph)
{
    char err[512] = "";
    scan_ctx_t sc = {0};
    for (int i = 0; i < RETIRE_PASSES; i++)
        if (bench_store_segd_reads(s, a, &ph->pass[i]))
            return -1;
    qsort(ph->pass, RETIRE_PASSES, sizeof(ph->pass[0]), cmp_reads);
    segd_policy_rule(segd_store_policy(s), &sc.rule, 1);
    double t0 = segd_mono_s();
    segd_err_t e = segd_store_scan(s, scan_select, &sc, err, sizeof(err));
    ph->scan_s = segd_mono_s() - t0;
    ph->scan_live = sc.live;
    segd_policy_rule_release(&sc.rule);
    free(sc.sel);
    if (e || sc.failed)
        return bench_store_fail("scan", e ? err : "out of memory");
    t0 = segd_mono_s();
    if (segd_store_compact(s, err, sizeof(err)))
        return bench_store_fail("compact", err);
    ph->compact_s = segd_mono_s() - t0;
    return 0;
}

/* Sets the phase's markers (each a synced write, as `segd segments retire`).
 * Segment markers are spread over the seed's ids, so every lookup of one of
 * them finds it; the seed's entries all have partner 0, the first partner
 * marker. before_ms = 1 retires nothing; the last phase raises the segment
 * markers to now - 15 d and partner 0's to now - 25 d (the seed's events
 * span 30 days), retiring some entries but not most. */
static int retire_set(segd_store_t *s, const store_args_t *a, int phase, int64_t now_ms)
{
    char err[512] = "";
    int64_t nseg = phase >= 1 ? a->retire_segments : 0, npart = phase >= 2 ? a->retire_partners : 0;
    int64_t seg_before = phase == 3 ? now_ms - 15 * DAY_MS : 1;
    for (int64_t i = 0; i < nseg; i++)
        if (segd_store_retire(s, i * SEED_SEGMENT_IDS / nseg, seg_before, NULL, err, sizeof(err)))
            return bench_store_fail("retire", err);
    for (int64_t j = 0; j < npart; j++) {
        int64_t before = phase == 3 && j == 0 ? now_ms - 25 * DAY_MS : 1;
        if (segd_store_retire(s, segd_retire_key_of_partner((int32_t)j), before, NULL, err,
                              sizeof(err)))
            return bench_store_fail("retire", err);
    }
    return 0;
}

int bench_store_retire_phases(segd_store_t *s, const store_args_t *a, int64_t now_ms,
                               retire_phase_t *ph)
{
    static const char *names[RETIRE_PHASES] = {
        "no markers", "N segment markers, retiring nothing",
        "N segment + M partner markers, retiring nothing",
        "N segment + M partner markers, retiring some"};
    for (int p = 0; p < RETIRE_PHASES; p++) {
        ph[p].name = names[p];
        fprintf(stderr, "bench store: marker phase %d: %s\n", p, names[p]);
        if (retire_set(s, a, p, now_ms) || retire_measure(s, a, &ph[p]))
            return -1;
    }
    return 0;
}

int bench_store_retire_on(const store_args_t *a)
{
    return a->retire_segments || a->retire_partners;
}

void bench_store_retire_report(const store_args_t *a, const retire_phase_t *ph)
{
    const model_result_t *base = &ph[0].pass[RETIRE_PASSES / 2];
    printf("\n### Retirement markers on the same segd store (N = %" PRId64 " segment, M = %" PRId64
           " partner markers)\n\n"
           "Phases in this order, each adding to the last: reads (%d timed passes of %" PRId64
           " warm reads, the median pass shown, min-max reads/s beside), a full scan keeping "
           "live entries (the export's read path), a full compaction. \"Retiring some\" "
           "raises the segment markers to now - 15 d and partner 0's (every seed entry's "
           "partner) to now - 25 d.\n\n",
           a->retire_segments, a->retire_partners, RETIRE_PASSES, a->reads);
    printf("| phase | warm reads/s (min-max) | ratio to none | p50 us | p99 us | live per read "
           "| scan s | scan ratio | compaction s | compaction ratio |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int p = 0; p < RETIRE_PHASES; p++) {
        const model_result_t *m = &ph[p].pass[RETIRE_PASSES / 2];
        printf("| %s | %.0f (%.0f-%.0f) | %.3f | %.1f | %.1f | %.1f | %.2f | %.3f | %.1f | %.3f |\n",
               ph[p].name, m->reads_per_s, ph[p].pass[0].reads_per_s,
               ph[p].pass[RETIRE_PASSES - 1].reads_per_s, m->reads_per_s / base->reads_per_s,
               m->p50_us, m->p99_us, m->live_per_read, ph[p].scan_s,
               ph[p].scan_s / ph[0].scan_s, ph[p].compact_s, ph[p].compact_s / ph[0].compact_s);
    }
}
