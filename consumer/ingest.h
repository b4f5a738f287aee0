/* Message -> validated event: the checks every reader of the input topic
 * makes (segd run's pipeline, segd replay), in order: size limit, decode
 * (waiting while the schema registry is unreachable: that is not bad input),
 * the event contract, Kafka key == user_id, and the time checks against the
 * store's GC watermark and clock (DESIGN §3). A bad message comes back with
 * its dead-letter reason and why. Owns the registry client, the codec and
 * the decoded event; cfg, store, stop and the backoff are borrowed and must
 * outlive it. One thread. */
#ifndef SEGD_INGEST_H
#define SEGD_INGEST_H

#include <signal.h>
#include <stddef.h>

#include "consumer/backoff.h"
#include "config/config.h"
#include "store/store.h"

enum segd_dlq_reason {
    SEGD_DLQ_DECODE,       /* does not decode as SegmentEvent */
    SEGD_DLQ_UNKNOWN_SCHEMA,
    SEGD_DLQ_OVERSIZE,     /* message larger than limits.max.message.bytes */
    SEGD_DLQ_LIMIT,        /* too many segments, user id too long */
    SEGD_DLQ_INVALID,      /* breaks the contract (ttl, ids, ts) */
    SEGD_DLQ_KEY_MISMATCH, /* Kafka key != user_id */
    SEGD_DLQ_BAD_UTF8,     /* user_id is not strict UTF-8 */
    SEGD_DLQ_TOO_LATE,     /* ts_ms below W + grace: can no longer apply exactly */
    SEGD_DLQ_FROM_FUTURE,  /* ts_ms above now + limits.max.clock.skew.ms */
    SEGD_DLQ_SUPERNODE,    /* a link event the identity graph's guard refused (§10.4) */
    SEGD_DLQ_REASONS
};

/* "decode", "unknown_schema", ...; "?" out of range. */
const char *segd_dlq_reason_name(int reason);

typedef struct segd_ingest segd_ingest_t;

segd_err_t segd_ingest_new(segd_ingest_t **out, const segd_config_t *cfg, segd_store_t *store,
                           volatile sig_atomic_t *stop, segd_backoff_t *backoff, char *errstr,
                           size_t errstr_size);
void segd_ingest_destroy(segd_ingest_t *g);

/* Checks one message of (topic, partition) (key NULL: the message has none,
 * nothing to compare; topic NULL: no partition, no import floor).
 * Returns 1 with *ev set (owned by g, valid until the next call), 0 when it
 * must be dead-lettered (*reason, why filled), -1 when a stop interrupted a
 * registry wait (the message is not decided: read it again later). */
int segd_ingest_check(segd_ingest_t *g, const char *topic, int32_t partition, const void *key,
                      size_t klen, const void *value, size_t vlen, const segd_event_t **ev,
                      int *reason, char *why, size_t n);

/* The ts_ms of the event the last check decoded (after a too_late verdict:
 * the refused event's time). */
int64_t segd_ingest_last_ts(const segd_ingest_t *g);

#endif
