/* A synthetic DMP: produces the seed workload (workload/seed.h) as Avro
 * SegmentEvents to a Kafka topic, key = user id, in any input framing.
 * Shared by `segd produce`, the demo, the ingest benchmark and tests. */
#ifndef SEGD_SEED_PRODUCER_H
#define SEGD_SEED_PRODUCER_H

#include <signal.h>
#include <stdint.h>

#include "base/log.h"
#include "wire/avro_codec.h"
#include "workload/seed.h"

typedef struct segd_seed_produce_opts {
    const char *brokers;
    const char *topic;
    segd_seed_opts_t seed;
    uint64_t max_events;     /* 0 = the whole workload */
    segd_framing_t framing;  /* CONFLUENT needs registry_url */
    const char *registry_url;
    double rate;             /* events/s; 0 = as fast as possible */
    int progress;            /* print a progress line on stderr */
    const char *const *kafka_props; /* extra key, value pairs, NULL-terminated */
    /* message.timeout.ms: how long librdkafka tries to deliver an event
     * before it reports it failed; 0 leaves librdkafka's default (5 min) */
    int delivery_timeout_ms;
    const segd_log_t *log; /* librdkafka's lines; borrowed; NULL: the default */
} segd_seed_produce_opts_t;

typedef struct segd_seed_produce_result {
    uint64_t events, segments, bytes; /* handed to librdkafka */
    uint64_t delivered;               /* of events: acknowledged by a broker */
    uint64_t failed;                  /* delivery reports with an error */
    int interrupted;                  /* *stop was set: the rest was purged */
    double seconds;
} segd_seed_produce_result_t;

/* Produces and waits for every delivery report. stop may be NULL; when it
 * is set, what is still queued or in flight is purged (counted as not
 * delivered) and the call returns SEGD_ERR_ABORTED. Any event not delivered
 * is an error whose errstr says how many of how many were, to which
 * brokers, and the last broker error librdkafka reported (so an unreachable
 * cluster reads "no broker answered at B: ..."). res is filled either way. */
segd_err_t segd_seed_produce(const segd_seed_produce_opts_t *o, volatile sig_atomic_t *stop,
                             segd_seed_produce_result_t *res, char *errstr,
                             size_t errstr_size);

#endif
