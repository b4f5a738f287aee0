/* The ingest pipeline of `segd run`: a librdkafka consumer-group member that
 * polls a batch, decodes and validates each message, dead-letters bad ones,
 * and writes one WriteBatch of merges + next offsets (DESIGN §4), then commits
 * the same offsets to Kafka asynchronously for lag tools. Partitions start
 * from the offsets in the store. Faults (store I/O, registry or broker down)
 * stall progress with backoff and never commit past unapplied input. */
#ifndef SEGD_PIPELINE_H
#define SEGD_PIPELINE_H

#include <signal.h>
#include <stdint.h>

#include "config.h"
#include "store/store.h"

typedef struct segd_pipeline segd_pipeline_t;

enum segd_dlq_reason {
    SEGD_DLQ_DECODE,       /* does not decode as SegmentEvent */
    SEGD_DLQ_UNKNOWN_SCHEMA,
    SEGD_DLQ_OVERSIZE,     /* message larger than limits.max.message.bytes */
    SEGD_DLQ_LIMIT,        /* too many segments, user id too long */
    SEGD_DLQ_INVALID,      /* breaks the contract (ttl, ids, ts) */
    SEGD_DLQ_KEY_MISMATCH, /* Kafka key != user_id */
    SEGD_DLQ_TOO_LATE,     /* ts_ms below W + grace: can no longer apply exactly */
    SEGD_DLQ_FROM_FUTURE,  /* ts_ms above now + limits.max.clock.skew.ms */
    SEGD_DLQ_REASONS
};

typedef struct segd_pipeline_stats {
    uint64_t messages; /* consumed, good and bad */
    uint64_t events;   /* applied */
    uint64_t segments; /* applied segment updates */
    uint64_t batches;  /* store writes */
    uint64_t dlq[SEGD_DLQ_REASONS];
    uint64_t retries;  /* waits on a store, registry or broker fault */
} segd_pipeline_stats_t;

const char *segd_dlq_reason_name(int reason);

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

/* The change-stream publisher (NULL when changes.enable = 0); borrowed. */
struct segd_publisher;
struct segd_publisher *segd_pipeline_publisher(segd_pipeline_t *p);

/* Partitions currently assigned to this member (thread-safe; -1 on error). */
int segd_pipeline_assigned(segd_pipeline_t *p);

/* Writes the pending batch, leaves the group and flushes dead letters;
 * stats stay readable. Idempotent. */
void segd_pipeline_close(segd_pipeline_t *p);

/* Closes if needed and frees everything. */
void segd_pipeline_destroy(segd_pipeline_t *p);

#endif
