/* A synthetic DMP: produces the seed workload (workload/seed.h) as Avro
 * SegmentEvents to a Kafka topic, key = user id, in any input framing.
 * Shared by `segd produce`, the demo, the ingest benchmark and tests. */
#ifndef SEGD_SEED_PRODUCER_H
#define SEGD_SEED_PRODUCER_H

#include <signal.h>
#include <stdint.h>

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
} segd_seed_produce_opts_t;

typedef struct segd_seed_produce_result {
    uint64_t events, segments, bytes;
    uint64_t failed; /* delivery failures */
    double seconds;
} segd_seed_produce_result_t;

/* Produces and waits for every delivery report. stop may be NULL. */
segd_err_t segd_seed_produce(const segd_seed_produce_opts_t *o, volatile sig_atomic_t *stop,
                             segd_seed_produce_result_t *res, char *errstr,
                             size_t errstr_size);

#endif
