/* One input message into a batch: checked (consumer/ingest.h), then added to
 * the applier's WriteBatch with where it came from, or to the dead letters
 * with its reason. segd run's pipeline (consumer/pipeline_batch.c) and segd
 * replay (consumer/replay.c) take every message through this one step; each
 * keeps its own counters and decides what else an outcome means. One
 * thread: the ingest, applier and dead letters are the caller's. */
#ifndef SEGD_INGEST_STEP_H
#define SEGD_INGEST_STEP_H

#include <librdkafka/rdkafka.h>

#include "consumer/apply.h"
#include "consumer/dlq.h"
#include "consumer/ingest.h"

/* Seconds the step spent checking and adding, added to by each call. */
typedef struct segd_ingest_step_times {
    double check_s, build_s;
} segd_ingest_step_times_t;

/* Takes message m (borrowed for the call) through the checks; a good event
 * goes into ap with m's topic, partition, offset and timestamp, a bad one
 * into dlq with its reason. With ap NULL the message is only checked
 * (replay --count-only). dlq_exact keeps an empty key or value as empty
 * (a dead-letter file tells null from empty); otherwise it goes out as
 * none, as segd run has always sent it. times may be NULL.
 * Returns 1 when applied (*ev: the event, borrowed until the next check),
 * 0 when dead-lettered (*ev NULL, *reason and why set), -1 when a stop came
 * during a fault wait and -2 when memory ran out; after -1 and -2 the
 * message is unapplied and its offset must not be written. */
int segd_ingest_step(segd_ingest_t *g, segd_applier_t *ap, segd_dlq_t *dlq, int dlq_exact,
                     const rd_kafka_message_t *m, const segd_event_t **ev, int *reason,
                     char *why, size_t why_size, segd_ingest_step_times_t *times);

#endif
