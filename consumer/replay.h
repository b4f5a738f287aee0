/* segd replay's engine: reads a range of one input topic with a group-less
 * consumer (assign, never commit) and applies it through the same checks
 * (consumer/ingest.h), dead-letter queue (consumer/dlq.h) and write path
 * (consumer/apply.h) as segd run, one WriteBatch per batch with its outbox
 * entry. It never writes the daemon's input offsets (DESIGN §4 offset/...):
 * by §3 a range the store already holds changes nothing.
 * Ranges per partition are [start, end): start from the log start, given
 * offsets or the first message at or after a time; end at the high
 * watermark read at start, given offsets (exclusive) or the first message
 * at or after a time (exclusive). Time bounds are also checked on the
 * messages' timestamps, so a broker whose time lookup answers nothing (the
 * dev broker) costs a read from the log start, not a wrong range.
 * One thread; cfg, store and stop borrowed. */
#ifndef SEGD_REPLAY_H
#define SEGD_REPLAY_H

#include <signal.h>
#include <stdint.h>

#include "config/config.h"
#include "consumer/ingest.h"
#include "store/store.h"

#define SEGD_REPLAY_MAX_PARTITIONS 1024

typedef enum { SEGD_REPLAY_BEGINNING, SEGD_REPLAY_OFFSETS, SEGD_REPLAY_TIME } segd_replay_from_t;
typedef enum { SEGD_REPLAY_END, SEGD_REPLAY_TO_OFFSETS, SEGD_REPLAY_TO_TIME } segd_replay_to_t;

typedef struct segd_replay_pos {
    int32_t partition;
    int64_t offset;
} segd_replay_pos_t;

typedef struct segd_replay_stats {
    uint64_t messages;   /* read in the ranges, good and bad */
    uint64_t events;     /* applied */
    uint64_t segments;   /* applied segment updates */
    uint64_t dead;       /* dead-lettered */
    uint64_t misrouted;  /* applied events in another partition than
                            input.partitioner puts their user in */
    uint64_t dlq[SEGD_DLQ_REASONS];
    uint64_t batches;    /* store writes */
    uint64_t partitions; /* in the replay */
    uint64_t total;      /* offsets in the ranges: sum of end - start */
    uint64_t done;       /* offsets passed (gaps of compacted topics count) */
    uint64_t retries;    /* fault waits */
    uint64_t lost;       /* offsets of the ranges deleted (retention) or truncated
                          * away while replaying: never applied */
    uint64_t clamped;    /* offsets of the asked starts below the log start when the
                          * replay began (deleted or compacted away): never applied */
} segd_replay_stats_t;

typedef struct segd_replay_opts {
    const segd_config_t *cfg; /* brokers, topics[0], kafka.*, input.*, limits.*, dlq.topic,
                                 batch.*, retry.max.ms, changes.enable */
    const int32_t *partitions; /* NULL: every partition of the topic */
    size_t n_partitions;
    segd_replay_from_t from;
    const segd_replay_pos_t *from_offsets; /* SEGD_REPLAY_OFFSETS; the partitions replayed
                                              unless partitions is set */
    size_t n_from;
    int64_t from_ms; /* SEGD_REPLAY_TIME */
    segd_replay_to_t to;
    const segd_replay_pos_t *to_offsets; /* SEGD_REPLAY_TO_OFFSETS; others run to the end */
    size_t n_to;
    int64_t to_ms; /* SEGD_REPLAY_TO_TIME */
    const char *dlq_file; /* NULL: the DLQ topic */
    int no_changes;       /* no outbox entries */
    /* every batch also stores each replayed partition's next offset and the
     * topic's partition count, as segd run does: for `segd rebuild`, whose
     * fresh store segd run then continues from where the replay ended. They
     * are written once before the first batch too, so a partition with
     * nothing to read (empty, or its whole log deleted) has its offset:
     * segd run never falls back to input.offset.reset on it */
    int write_offsets;
    /* count only: read the ranges and check every message as a replay
     * would, but apply, dead-letter and write nothing: st then says what a
     * replay would do now (DESIGN §3.1: how much of a range lies below the
     * store's ingest floor, asked before a repair applies anything), and
     * below_floor, when set, is called for each message refused as too_late */
    int count_only;
    void (*below_floor)(void *ctx, int32_t partition, int64_t ts_ms);
    void *below_floor_ctx;
    /* called after every batch (and once before the first) with the stats so
     * far; may be NULL */
    void (*progress)(void *ctx, const segd_replay_stats_t *st);
    void *progress_ctx;
} segd_replay_opts_t;

/* Replays the ranges into store; st (always filled) says what was done.
 * SEGD_ERR_CONFIG: a range names a partition the topic lacks or the flags
 * contradict; SEGD_ERR_ABORTED: stop was set (what was written stays);
 * anything else: a broker, store or dead-letter failure. */
segd_err_t segd_replay_run(const segd_replay_opts_t *o, segd_store_t *store,
                           volatile sig_atomic_t *stop, segd_replay_stats_t *st, char *errstr,
                           size_t errstr_size);

#endif
