/* librdkafka configuration from key/value lists, shared by every Kafka client
 * segd makes (ingest consumer, dead-letter producer, change publisher, cache
 * tail): a refused setting is SEGD_ERR_CONFIG naming the client and key. */
#ifndef SEGD_KCONF_H
#define SEGD_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "base/err.h"

segd_err_t segd_kconf_set(rd_kafka_conf_t *c, const char *who, const char *key,
                          const char *value, char *errstr, size_t errstr_size);
/* kv: key, value, key, value, ..., NULL; NULL applies nothing. */
segd_err_t segd_kconf_apply(rd_kafka_conf_t *c, const char *who, const char *const *kv,
                            char *errstr, size_t errstr_size);

#endif
