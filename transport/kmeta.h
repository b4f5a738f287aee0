/* Topic metadata from the brokers: how many partitions a topic has. The
 * ingest pipeline (misrouted events), the change publisher (partition-aligned
 * change topic), `segd owner` and `segd replay` ask it; one place knows how
 * librdkafka answers an unknown topic and a topic still being created. */
#ifndef SEGD_KMETA_H
#define SEGD_KMETA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* *count = the topic's partition count. SEGD_ERR_NOTFOUND when the brokers
 * do not know the topic (a producer's request may have started its
 * auto-creation: ask again), SEGD_ERR_KAFKA on any other failure. rk is
 * borrowed (any client type); blocks for at most timeout_ms. */
segd_err_t segd_kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms,
                                 int32_t *count, char *errstr, size_t errstr_size);

/* As segd_kmeta_partitions, asking again every 200 ms while the topic is
 * unknown or has no partitions yet, until wait_ms passed: a topic being
 * auto-created answers "unknown" first. */
segd_err_t segd_kmeta_partitions_wait(rd_kafka_t *rk, const char *topic, int wait_ms,
                                      int32_t *count, char *errstr, size_t errstr_size);

#endif
