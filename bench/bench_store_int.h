/* What `segd bench store` (bench_store.c) and its retirement-marker phases
 * (bench_store_retire.c) share: the arguments, one model's measurements,
 * one marker phase's, and the helpers both call. Private to bench/. */
#ifndef SEGD_BENCH_STORE_INT_H
#define SEGD_BENCH_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define SEED_SEGMENT_IDS 82000 /* the seed's segment ids lie in [0, this) */
#define DAY_MS (86400 * 1000LL)
#define RETIRE_PASSES 3 /* timed read passes per marker phase; the median is reported */
#define RETIRE_PHASES 4

typedef struct store_args {
    int64_t users, baseline_users, reads, batch, seed, cache_mb;
    int64_t horizon_s; /* 0 = the store's default (store.horizon.s) */
    /* --retire N,M: after the main reads, the marker phases of retire_phases
     * with N segment and M partner markers; both 0 = no marker phases. */
    int64_t retire_segments, retire_partners;
    int keep, made_dir;
    char dir[256];
    char cmdline[1024]; /* as typed, for the report */
} store_args_t;

typedef struct model_result {
    uint64_t segments_written;
    double write_s, compact_s;
    uint64_t live, stored, disk_bytes; /* after full compaction */
    uint64_t dir_bytes, wal_bytes;     /* everything left on disk after close */
    double reads_per_s, p50_us, p99_us, p999_us, live_per_read;
} model_result_t;

/* One phase of the same store: reads, a full scan and a full compaction
 * with the markers the phase added. */
typedef struct retire_phase {
    const char *name;
    model_result_t pass[RETIRE_PASSES]; /* sorted by reads/s after the phase */
    double scan_s, compact_s;
    uint64_t scan_live;
} retire_phase_t;

/* Reads one user's live segments into the model's scratch; sets *live. */
typedef int (*read_fn_t)(void *ctx, const char *uid, size_t *live);

/* bench_store_reads.c, below the run and the marker phases. */
/* Prints "segd bench store: what: why"; returns -1. */
int bench_store_fail(const char *what, const char *why);
/* Grows *e to hold n entries; -1 (said) when out of memory. */
int bench_store_reserve_entries(segd_entry_t **e, size_t *cap, size_t n);
/* The timed warm reads of segd's store into r (a bidder's Get and select). */
int bench_store_segd_reads(segd_store_t *s, const store_args_t *a, model_result_t *r);
/* The warm reads of users [0, users) through fn into r's read figures. */
int bench_store_timed_reads(const store_args_t *a, int64_t users, read_fn_t fn, void *ctx,
                            model_result_t *r);

/* bench_store_retire.c: the marker phases. Whether --retire asked for them. */
int bench_store_retire_on(const store_args_t *a);
/* The RETIRE_PHASES phases on s, after its main reads, into ph. */
int bench_store_retire_phases(segd_store_t *s, const store_args_t *a, int64_t now_ms,
                               retire_phase_t *ph);
void bench_store_retire_report(const store_args_t *a, const retire_phase_t *ph);

#endif
