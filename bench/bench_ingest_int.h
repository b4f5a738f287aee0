/* What `segd bench ingest`'s run (bench_ingest.c) and its report
 * (bench_ingest_report.c) share: the arguments, one pipeline run's
 * measurements and the whole run's. Private to bench/. */
#ifndef SEGD_BENCH_INGEST_INT_H
#define SEGD_BENCH_INGEST_INT_H

#include <stddef.h>
#include <stdint.h>

#include "consumer/pipeline.h"
#include "publisher/publisher.h"
#include "workload/seed_producer.h"

#define TOPIC "bench.events"
#define WINDOW_S 10.0
#define MAX_WINDOWS 720

extern char **environ;

typedef struct ingest_args {
    int64_t users, partitions, batch; /* batch 0 = memory.limit.mb's */
    int64_t memory_mb;                /* memory.limit.mb; 0 = the default */
    int64_t prefill_users;            /* written straight into the store first */
    const char *brokers;              /* a running cluster; NULL = the mock */
    int producer_process;             /* the paced producer as `segd produce` */
    int compact_during;               /* a full compaction inside the half-peak run */
    int ratio_only; /* --ratio-only: end to end and the store pass, nothing else */
    /* --writer: ingest.writer.thread of the pipelines; WRITER_BOTH runs end to
     * end twice, off then on, before the one store pass */
    int writer;
#define WRITER_DEFAULT (-1)
#define WRITER_BOTH 2
    /* -X key=value: librdkafka settings of the pipelines' clients, after
     * the bench's own (the operator's -X of segd run) */
#define BENCH_X_MAX 16
    const char *x[BENCH_X_MAX];
    int n_x;
    char dir[256];
} ingest_args_t;

/* One 10 s window of a run: the counters at its end, the latency of the
 * outbox entries acknowledged inside it, and the profiles family's state. */
typedef struct window {
    double end_s;                /* since the run's first message */
    uint64_t messages, segments; /* pipeline totals at the end */
    int64_t p50, p99, max;       /* ms, entries acknowledged in the window */
    uint64_t l0, pending_mb, delayed, stopped, compacting;
    double rss_mib; /* the process's resident set at the window's end */
} window_t;

/* CPU seconds per kind of thread (/proc/self/task/N/stat's utime + stime),
 * digits dropped from the names ("rdk:broker1" -> "rdk:broker"); the
 * process's own threads are told apart by being the main one or not. */
#define CPU_GROUPS 16
typedef struct cpu_use {
    char name[CPU_GROUPS][64];
    double s[CPU_GROUPS];
    size_t n;
    double total; /* getrusage(RUSAGE_SELF): exited threads included */
    double main_waited; /* the main thread's seconds runnable but not running */
} cpu_use_t;

/* What one pipeline run measured. */
typedef struct run_result {
    cpu_use_t cpu0, cpu1;       /* at its start and at its end */
    double seconds;             /* first message -> last delta acknowledged */
    segd_pipeline_stats_t st;
    segd_pipeline_stats_t st0; /* at the first message: the join is not the run */
    segd_publisher_stats_t pub;
    window_t w[MAX_WINDOWS];
    size_t nw;
    uint64_t stall_micros;      /* RocksDB's write stall time, the whole store */
    double compact_from, compact_to; /* the full compaction, since the first message */
} run_result_t;


typedef struct ingest_run {
    segd_seed_produce_result_t res;
    double raw, harness;
    uint64_t sum;
    run_result_t prefill, e2e, bare, store, fresh, fresh4;
    run_result_t e2e_off; /* --writer both: end to end with the writer thread off */
} ingest_run_t;

/* Peak RSS of the whole process (getrusage's ru_maxrss), MiB. */
double segd_bench_ingest_peak_rss_mib(void);

/* Prints the run's markdown report. */
void segd_bench_ingest_report(const ingest_args_t *a, const ingest_run_t *x);

#endif
