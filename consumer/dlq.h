/* The dead letters of one batch and where they go: the DLQ topic (segd run,
 * segd replay without --dlq-file), produced with headers segd.error,
 * segd.source and segd.original_size, or a JSON-lines file (segd replay
 * --dlq-file), one object per letter {"topic","partition","offset","reason",
 * "error","key_b64","value_b64"}, appended and fsync'd. Either way a batch's
 * letters are delivered before its data is written (deliver), then dropped
 * (clear). Bytes passed in are copied. One thread. */
#ifndef SEGD_DLQ_H
#define SEGD_DLQ_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer/backoff.h"
#include "config/config.h"

typedef struct segd_dlq segd_dlq_t;

/* The DLQ topic cfg->dlq_topic on cfg->brokers (both read at every
 * delivery), its producer configured with the consumer's connection
 * settings (segd_config_connection_props: TLS, SASL, client.id). cfg, stop
 * and backoff are borrowed and must outlive the DLQ. */
segd_err_t segd_dlq_new_topic(segd_dlq_t **out, const segd_config_t *cfg,
                              volatile sig_atomic_t *stop, segd_backoff_t *backoff,
                              char *errstr, size_t errstr_size);
/* The topic DLQ's producer (borrowed, lives as long as the DLQ), for
 * metadata requests that may let brokers auto-create a topic; NULL for a
 * file DLQ. */
rd_kafka_t *segd_dlq_producer(segd_dlq_t *d);

/* Appends to path (created 0644 if absent; existing lines are kept). */
segd_err_t segd_dlq_new_file(segd_dlq_t **out, const char *path, char *errstr,
                             size_t errstr_size);

/* One bad message: key NULL = the message had none (null in the file), value
 * NULL likewise; why is the error text, reason its class
 * (segd_dlq_reason_name). SEGD_ERR_NOMEM leaves the DLQ as it was. */
segd_err_t segd_dlq_add(segd_dlq_t *d, const char *topic, int32_t partition, int64_t offset,
                        const void *key, size_t klen, const void *value, size_t vlen,
                        const char *reason, const char *why);
/* Letters added since the last clear. */
size_t segd_dlq_count(const segd_dlq_t *d);

/* Delivers every letter not yet delivered. Topic: waits for the broker's
 * acks, retrying with backoff until they come or stop is set
 * (SEGD_ERR_KAFKA). File: one write and an fsync; on failure the file is
 * cut back to where it was (SEGD_ERR_IO) and the letters stay pending. */
segd_err_t segd_dlq_deliver(segd_dlq_t *d, char *errstr, size_t errstr_size);
/* Drops the letters (their batch was written). */
void segd_dlq_clear(segd_dlq_t *d);

/* Flushes the producer (at most 5 s) and releases the sink; letters stay
 * countable. Idempotent. */
void segd_dlq_close(segd_dlq_t *d);
void segd_dlq_destroy(segd_dlq_t *d);

#endif
