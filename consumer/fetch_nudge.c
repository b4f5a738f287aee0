/* Waking librdkafka's fetcher after a full queue drained; see fetch_nudge.h. */
#include "consumer/fetch_nudge.h"

#include <stdlib.h>
#include <string.h>

#define FULL_FRACTION 0.9      /* "full": within 10 % of a limit (the last fetch
                                * may have stopped it just short) */
#define NUDGE_AT_DIVISOR 4     /* nudge once down to a quarter of full */
#define MEAN_WEIGHT 0.01
/* how often the queue is looked at: often enough that a full queue is seen
 * before it drains, seldom enough to cost nothing per message */
#define LOOK_EVERY 64

static int64_t conf_int(rd_kafka_t *rk, const char *key, int64_t dflt)
{
    char v[32];
    size_t len = sizeof(v);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), key, v, &len) != RD_KAFKA_CONF_OK)
        return dflt;
    return strtoll(v, NULL, 10);
}

void segd_fetch_nudge_reset(segd_fetch_nudge_t *n) { memset(n, 0, sizeof(*n)); }

static void start(segd_fetch_nudge_t *n, rd_kafka_t *rk)
{
    segd_fetch_nudge_reset(n);
    n->rk = rk;
    n->min_messages = conf_int(rk, "queued.min.messages", 100000);
    n->max_bytes = conf_int(rk, "queued.max.messages.kbytes", 65536) * 1024;
}

/* the queue's length at which one of librdkafka's two limits stops the fetch */
static int64_t full_length(const segd_fetch_nudge_t *n)
{
    int64_t full = n->min_messages;
    if (n->mean_bytes >= 1 && (double)n->max_bytes / n->mean_bytes < (double)full)
        full = (int64_t)((double)n->max_bytes / n->mean_bytes);
    return full > 0 ? full : 1;
}

/* One ListOffsets per broker leading an assigned partition: librdkafka
 * groups the partitions by leader and queues each request on its broker's
 * thread, which wakes it. rd_kafka_offsets_for_times keeps to its timeout
 * (rd_kafka_query_watermark_offsets does not in 2.0.2: it waits for the
 * answer, librdkafka issue 2588), and the answer is not needed. Returns
 * whether anything was sent. */
static int wake(rd_kafka_t *rk)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(rk, &a) || !a)
        return 0;
    int sent = a->cnt > 0;
    for (int i = 0; i < a->cnt; i++)
        a->elems[i].offset = RD_KAFKA_OFFSET_END; /* the latest: any would do */
    if (sent)
        rd_kafka_offsets_for_times(rk, a, SEGD_FETCH_NUDGE_TIMEOUT_MS);
    rd_kafka_topic_partition_list_destroy(a);
    return sent;
}

int segd_fetch_nudge_seen(segd_fetch_nudge_t *n, rd_kafka_t *rk, size_t payload_bytes)
{
    if (n->rk != rk)
        start(n, rk);
    n->mean_bytes = n->mean_bytes > 0
                        ? n->mean_bytes + MEAN_WEIGHT * ((double)payload_bytes - n->mean_bytes)
                        : (double)payload_bytes;
    if (n->seen++ % LOOK_EVERY)
        return 0;
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    if (!q)
        return 0;
    int64_t len = (int64_t)rd_kafka_queue_length(q);
    rd_kafka_queue_destroy(q);
    if (len > n->peak)
        n->peak = len;
    int64_t full = full_length(n);
    if ((double)n->peak < FULL_FRACTION * (double)full || len > full / NUDGE_AT_DIVISOR)
        return 0;
    n->peak = len; /* the next nudge waits for the queue to fill again */
    return wake(rk);
}
