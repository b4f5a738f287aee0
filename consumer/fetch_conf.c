/* The budget's fetch share as librdkafka settings; see fetch_conf.h. */
#include "consumer/fetch_conf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/kconf.h"

/* librdkafka's lower bounds: queued.min.messages >= 1, kbytes >= 1,
 * fetch.max.bytes >= message.max.bytes (1 000 000 by default),
 * max.partition.fetch.bytes >= 1; what a side consumer gets is kept
 * usable: at least a default-sized message per fetch */
#define SIDE_MESSAGES_MIN 1000
#define SIDE_KB_MIN 1024
#define FETCH_MIN 1000000
#define PARTITION_MIN (64 << 10)

static int64_t at_least(int64_t v, int64_t lo) { return v < lo ? lo : v; }

/* the operator's message.max.bytes when it is above fetch_max */
static int64_t fetch_max_for(const segd_config_t *cfg, int64_t fetch_max)
{
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (!strcmp(cfg->kafka[i].key, "message.max.bytes")) {
            long long v = strtoll(cfg->kafka[i].value, NULL, 10);
            if (v > fetch_max)
                fetch_max = v;
        }
    return fetch_max;
}

segd_err_t segd_fetch_conf_apply(rd_kafka_conf_t *conf, const char *who,
                                 const segd_config_t *cfg, int divisor, char *errstr, size_t n)
{
    const segd_memory_split_t *m = &cfg->memory;
    int64_t d = divisor > 1 ? divisor : 1;
    char kb[24], messages[24], fetch[24], partition[24];
    snprintf(kb, sizeof(kb), "%" PRId64, at_least(m->fetch_queue_kb / d, SIDE_KB_MIN));
    snprintf(messages, sizeof(messages), "%" PRId64,
             at_least(m->fetch_queue_messages / d, SIDE_MESSAGES_MIN));
    snprintf(fetch, sizeof(fetch), "%" PRId64,
             fetch_max_for(cfg, at_least(m->fetch_max_bytes / d, FETCH_MIN)));
    snprintf(partition, sizeof(partition), "%" PRId64,
             at_least(m->partition_fetch_bytes / d, PARTITION_MIN));
    const char *const kv[] = {"queued.max.messages.kbytes", kb, "queued.min.messages", messages,
                              "fetch.max.bytes", fetch, "max.partition.fetch.bytes", partition,
                              NULL};
    return segd_kconf_apply(conf, who, kv, errstr, n);
}
