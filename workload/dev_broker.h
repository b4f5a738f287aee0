/* An in-process Kafka cluster (librdkafka's mock broker, rdkafka_mock.h) on
 * loopback, with topics created up front: for `segd dev-broker`, the demo,
 * the integration tests and the ingest benchmark. Real clients (kcat,
 * python3-confluent-kafka, another segd) can connect to its bootstrap list. */
#ifndef SEGD_DEV_BROKER_H
#define SEGD_DEV_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h> /* before rdkafka_mock.h, which needs it */
#include <librdkafka/rdkafka_mock.h>

#include "base/err.h"

typedef struct segd_dev_broker segd_dev_broker_t;

segd_err_t segd_dev_broker_new(segd_dev_broker_t **out, int brokers, int partitions,
                               const char *const *topics, size_t n_topics, char *errstr,
                               size_t errstr_size);
void segd_dev_broker_destroy(segd_dev_broker_t *b);

/* "127.0.0.1:PORT,..."; borrowed until destroy. */
const char *segd_dev_broker_bootstraps(const segd_dev_broker_t *b);

/* Fault injection for tests: take broker `id` (1-based) down or up. */
void segd_dev_broker_set_down(segd_dev_broker_t *b, int32_t id, int down);

/* The mock cluster itself, for tests that inject errors, delays or leaders
 * with rdkafka_mock.h; borrowed until destroy. */
rd_kafka_mock_cluster_t *segd_dev_broker_mock(segd_dev_broker_t *b);

#endif
