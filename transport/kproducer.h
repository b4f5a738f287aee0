/* An acknowledged producer: librdkafka's producer with what a segd command
 * that writes to Kafka needs to tell the truth about it. Only a broker's
 * acknowledgement counts as delivered; the last transport error is kept, so
 * an unreachable cluster is named as such; a stop purges what is queued, so
 * an interrupted run ends promptly and counts only what was acknowledged;
 * and one report says how many of how many reached which topic, and why the
 * rest did not. `segd produce` (workload/seed_producer.c) and `segd identity
 * produce` write through it.
 *
 * Single-threaded: send, drain and the reports run on the caller's thread,
 * where librdkafka calls the delivery and error callbacks (in poll/flush). */
#ifndef SEGD_KPRODUCER_H
#define SEGD_KPRODUCER_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/log.h"

typedef struct segd_kproducer segd_kproducer_t;

typedef struct segd_kproducer_opts {
    const char *brokers;
    const char *what;               /* the client in messages, e.g. "links producer" */
    const char *const *defaults;    /* key, value pairs, NULL-terminated; may be NULL */
    const char *const *kafka_props; /* the caller's, applied after the defaults */
    /* message.timeout.ms: how long librdkafka tries to deliver an event
     * before it reports it failed; 0 leaves librdkafka's default (5 min) */
    int delivery_timeout_ms;
    const segd_log_t *log; /* librdkafka's lines; borrowed; NULL: the default */
    /* More settings applied last (a --config file's TLS and SASL); may be
     * NULL. A failure refuses the producer with its message. */
    segd_err_t (*configure)(void *ctx, rd_kafka_conf_t *conf, char *errstr, size_t n);
    void *configure_ctx;
} segd_kproducer_opts_t;

typedef struct segd_kproducer_counts {
    uint64_t queued;    /* handed to librdkafka */
    uint64_t delivered; /* of queued: acknowledged by a broker */
    uint64_t failed;    /* delivery reports with an error */
    int interrupted;    /* a stop purged what was left */
} segd_kproducer_counts_t;

segd_err_t segd_kproducer_new(segd_kproducer_t **out, const segd_kproducer_opts_t *o,
                              char *errstr, size_t errstr_size);

/* Queues one message (copied). While librdkafka's queue is full it serves
 * delivery reports and tries again; SEGD_ERR_ABORTED when stop (may be NULL)
 * is set meanwhile, SEGD_ERR_KAFKA for any other refusal. */
segd_err_t segd_kproducer_send(segd_kproducer_t *kp, const char *topic, const void *key,
                               size_t key_len, const void *value, size_t value_len,
                               volatile sig_atomic_t *stop, char *errstr, size_t errstr_size);

/* Serves delivery reports without waiting. */
void segd_kproducer_poll(segd_kproducer_t *kp);

/* Waits for every delivery report: bounded by message.timeout.ms, after
 * which librdkafka fails the rest. When stop is set, what is queued or in
 * flight is purged (its reports, errors, come at once) and the run counts as
 * interrupted; so is a run whose caller stopped queuing early
 * (segd_kproducer_interrupted). */
void segd_kproducer_drain(segd_kproducer_t *kp, volatile sig_atomic_t *stop);

/* Marks the run as interrupted: its caller stopped queuing before the end. */
void segd_kproducer_interrupted(segd_kproducer_t *kp);

/* Waits, up to wait_ms, for what is queued so far to be acknowledged. */
void segd_kproducer_flush(segd_kproducer_t *kp, int wait_ms, volatile sig_atomic_t *stop);

void segd_kproducer_counts(const segd_kproducer_t *kp, segd_kproducer_counts_t *c);

/* SEGD_OK when every queued message was acknowledged and the run was not
 * interrupted. Otherwise the error says "[interrupted (Q of TOTAL NOUN
 * queued): ]delivered D of Q NOUN to TOPIC: CAUSE", the cause being "no
 * broker answered at BROKERS: <last transport error>" when nothing was
 * acknowledged and a transport error was seen, else the first failed
 * report's error with the brokers and the last transport error;
 * SEGD_ERR_ABORTED when interrupted, else SEGD_ERR_KAFKA. */
segd_err_t segd_kproducer_report(const segd_kproducer_t *kp, const char *topic,
                                 const char *noun, uint64_t total, char *errstr,
                                 size_t errstr_size);

/* Waits for nothing: what is unacknowledged is dropped. NULL is a no-op. */
void segd_kproducer_destroy(segd_kproducer_t *kp);

#endif
