/* The ingest pipeline of `segd run`: a librdkafka consumer-group member that
 * polls a batch, decodes and validates each message, dead-letters bad ones,
 * and writes one WriteBatch of merges + next offsets (DESIGN §4), then commits
 * the same offsets to Kafka asynchronously for lag tools. Partitions start
 * from the offsets in the store. Faults (store I/O, registry or broker down)
 * stall progress with backoff and never commit past unapplied input. An
 * event in another partition than input.partitioner puts its user in is
 * applied and counted (misrouted; the store's total goes into each batch's
 * WriteBatch with its offsets, DESIGN §7).
 *
 * Threads: one thread drives a pipeline (new, step/run, close, destroy);
 * librdkafka's rebalance callback runs inside step on that thread.
 * get_stats is for that thread too; segd_pipeline_assigned may be called
 * from any thread.
 * Ownership: cfg, store and stop are borrowed and must outlive the
 * pipeline (the config's strings are read at every step); the pipeline owns
 * its consumer, dead-letter queue (consumer/dlq.h), message checks
 * (consumer/ingest.h: registry client, codec) and batch. */
#ifndef SEGD_PIPELINE_H
#define SEGD_PIPELINE_H

#include <signal.h>
#include <stdint.h>

#include "config/config.h"
#include "consumer/ingest.h" /* the dead-letter reasons */
#include "consumer/sweep.h"
#include "consumer/lag.h"
#include "metrics/registry.h"
#include "store/store.h"

typedef struct segd_pipeline segd_pipeline_t;

typedef struct segd_pipeline_stats {
    uint64_t messages; /* consumed, good and bad */
    uint64_t events;   /* applied */
    uint64_t segments; /* applied segment updates */
    uint64_t batches;  /* store writes */
    uint64_t commits;  /* offset commits sent to the group after batches */
    uint64_t dlq[SEGD_DLQ_REASONS];
    uint64_t retries;  /* waits on a store, registry or broker fault */
    uint64_t misrouted; /* applied events whose partition is not
                           segd_partition_of(input.partitioner, user, P); the
                           store's running total is meta counter "misrouted" */
    segd_sweep_stats_t sweep; /* zero without a sweep (sweep.after.s = 0) */
    /* segd_mono_s() when the pipeline was made, got its first assignment
     * and consumed its first message (0 = not yet): the group join and the
     * ingest proper are timed apart (segd demo) */
    double created_s, assigned_s, first_message_s;
    /* seconds this thread spent per stage (segd bench ingest's breakdown):
     * waiting in or served by consumer_poll, decoding and checking messages,
     * building the WriteBatch (operands, outbox items), writing it (outbox
     * entry, RocksDB write), the Kafka commit and publisher kick, held
     * while the outbox is over changes.max.outbox, and upkeep (GC
     * watermark, sweep, unread partitions, dead letters, lag table) */
    double poll_s, check_s, build_s, write_s, commit_s, hold_s, upkeep_s;
    /* with ingest.writer.thread, write_s is the writer thread's time, and
     * this thread's wait for it (a drain) is writer_wait_s */
    double writer_wait_s;
    /* of poll_s, the polls that waited and returned nothing (the local
     * queue empty: the thread waited for a fetch), and the batches closed
     * because nothing more was fetched before batch.max.messages */
    double poll_idle_s;
    uint64_t batches_short;
    /* the fetcher woken after a full queue drained (consumer/fetch_nudge.h) */
    uint64_t fetch_nudges;
    uint64_t rebuilds; /* consumers rebuilt after a fatal error (DESIGN §7.2) */
} segd_pipeline_stats_t;

/* store and stop are borrowed and must outlive the pipeline. stop is polled
 * between messages and during fault backoff (set by a signal handler). */
segd_err_t segd_pipeline_new(segd_pipeline_t **out, const segd_config_t *cfg,
                             segd_store_t *store, volatile sig_atomic_t *stop,
                             char *errstr, size_t errstr_size);

/* One batch: poll up to batch.max.messages or batch.max.ms, apply, write,
 * commit. Returns SEGD_OK also when nothing arrived. */
segd_err_t segd_pipeline_step(segd_pipeline_t *p, char *errstr, size_t errstr_size);

/* Steps until *stop; then finishes the batch, flushes and closes. */
segd_err_t segd_pipeline_run(segd_pipeline_t *p, char *errstr, size_t errstr_size);

void segd_pipeline_get_stats(const segd_pipeline_t *p, segd_pipeline_stats_t *st);

/* How the pipeline reaches the change publisher without knowing it: the
 * program that owns both (app/daemon.c) fills these; any may be NULL. They
 * run on the pipeline's thread and must not block for long. */
typedef struct segd_pipeline_hooks {
    void (*committed)(void *ctx);   /* a batch was written: publish its outbox entry;
                                       with ingest.writer.thread it runs on the
                                       pipeline's writer thread (thread-safe) */
    uint64_t (*backlog)(void *ctx); /* unpublished outbox entries; ingest pauses
                                       while this exceeds changes.max.outbox */
    void *ctx;                      /* borrowed; must outlive the pipeline */
    /* Restore on assignment (app/restorer.h): a partition assigned with no
     * stored offset is handed to restore_begin with the topic's partition
     * count (0 = taken; it then stays paused) and polled with restore_state until it says
     * SEGD_PIPELINE_RESTORED (its offset is now in the store) or
     * SEGD_PIPELINE_REPLAY (input.offset.reset). NULL = no restore. */
    int (*restore_begin)(void *ctx, const char *topic, int32_t partition,
                         int32_t partitions);
    int (*restore_state)(void *ctx, const char *topic, int32_t partition);
    void (*restore_cancel)(void *ctx, const char *topic, int32_t partition); /* revoked */
    void *restore_ctx;
} segd_pipeline_hooks_t;

#define SEGD_PIPELINE_RESTORING 0
#define SEGD_PIPELINE_RESTORED 1
#define SEGD_PIPELINE_REPLAY 2

/* Call before the first step; h is copied. Without hooks nothing waits for
 * the change stream (the outbox is still written when changes.enable = 1). */
void segd_pipeline_set_hooks(segd_pipeline_t *p, const segd_pipeline_hooks_t *h);

/* Reports into m (borrowed; must outlive the pipeline): per partition
 * messages consumed, events and segments applied, consumer lag; dead
 * letters by reason, batch size and write time (docs/metrics.md). Call
 * before the first step, from the pipeline's thread. */
void segd_pipeline_set_metrics(segd_pipeline_t *p, segd_metrics_t *m);

/* The lag of every assigned partition as of the last step that got to its
 * end (250 ms apart; a step stalled in a fault wait does not):
 * *out malloc'd (the caller frees; NULL when none), *assigned = 0 until the
 * group's first assignment; *age_ms how old the table is. Thread-safe. */
segd_err_t segd_pipeline_lags(segd_pipeline_t *p, segd_partition_lag_t **out, size_t *n,
                              int *assigned, int64_t *age_ms);

/* Why no broker answers (for /readyz), copied to out; returns 0 and leaves
 * out empty while one does. Thread-safe. */
int segd_pipeline_brokers_down(segd_pipeline_t *p, char *out, size_t size);

/* The input topic's partition count from the brokers (SEGD_ERR_NOTFOUND
 * for a topic they do not know); remembered for the misrouted check. */
segd_err_t segd_pipeline_partitions(segd_pipeline_t *p, const char *topic, int32_t *count,
                                    char *errstr, size_t errstr_size);

/* Partitions currently assigned to this member (thread-safe; -1 on error). */
int segd_pipeline_assigned(segd_pipeline_t *p);

/* The partitions of topic assigned to this member now, ascending, in
 * *parts (malloc'd, freed by the caller; NULL when none), and, when there
 * are some, the topic's partition count from the broker's metadata (left
 * as it was otherwise): what periodic snapshot units
 * are made of (DESIGN §6). Thread-safe, as segd_pipeline_assigned;
 * SEGD_ERR_KAFKA when either cannot be read. */
segd_err_t segd_pipeline_assignment(segd_pipeline_t *p, const char *topic, int32_t **parts,
                                    size_t *n_parts, int32_t *partition_count,
                                    char *errstr, size_t errstr_size);

/* Writes the pending batch, leaves the group and flushes dead letters;
 * stats stay readable. Idempotent. */
void segd_pipeline_close(segd_pipeline_t *p);

/* Closes if needed and frees everything. */
void segd_pipeline_destroy(segd_pipeline_t *p);

/* The links topic's consumer (identity.enable, DESIGN §10), NULL when off;
 * borrowed until segd_pipeline_destroy. Set its change callback before the
 * first step. */
typedef struct segd_links segd_links_t;
segd_links_t *segd_pipeline_links(segd_pipeline_t *p);

/* The group consumer (librdkafka's rd_kafka_t) as it is now, for tests
 * that inject its faults; replaced (and the old one destroyed) after a
 * fatal error. The pipeline's thread only. */
struct rd_kafka_s;
struct rd_kafka_s *segd_pipeline_consumer(segd_pipeline_t *p);

#endif
