/* librdkafka's fetch and queue settings of every consumer segd run, segd
 * replay and segd rebuild make, from memory.limit.mb's fetch share
 * (config/memory.h, DESIGN §4.1). A process's main consumer (the ingest
 * group's, a replay's) takes the whole share; a side consumer beside it (the
 * identity links, a rebuild's first-message read) a sixteenth, which the
 * budget's headroom holds. librdkafka's own defaults (100 000 messages,
 * 64 MiB, 50 MB fetches) would be outside the budget at its small end and,
 * in 2.0.2, stall a catch-up for a second whenever the queue is full. */
#ifndef SEGD_FETCH_CONF_H
#define SEGD_FETCH_CONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "base/err.h"
#include "config/config.h"

#define SEGD_FETCH_MAIN 1  /* the process's main consumer */
#define SEGD_FETCH_SIDE 16 /* a consumer beside it */

/* Sets queued.min.messages, queued.max.messages.kbytes, fetch.max.bytes and
 * max.partition.fetch.bytes on conf: cfg->memory's values divided by
 * divisor (within librdkafka's ranges). Call it before the operator's
 * kafka.* settings, which win. librdkafka refuses a fetch.max.bytes below
 * message.max.bytes, so an operator's larger message.max.bytes raises it.
 * who names the client in a refusal. */
segd_err_t segd_fetch_conf_apply(rd_kafka_conf_t *conf, const char *who,
                                 const segd_config_t *cfg, int divisor, char *errstr,
                                 size_t errstr_size);

#endif
