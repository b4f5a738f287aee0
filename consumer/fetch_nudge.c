/* Waking librdkafka's fetcher after a full queue drained; see fetch_nudge.h. */
#include "consumer/fetch_nudge.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

#define LEADERS_TTL_MS 30000   /* a leader that moved costs one missed wake-up */
#define METADATA_TIMEOUT_MS 1000
#define FULL_FRACTION 0.9      /* "full": within 10 % of a limit (the last fetch
                                * may have stopped it just short) */
#define NUDGE_AT_DIVISOR 4     /* nudge once down to a quarter of full */
#define MEAN_WEIGHT 0.01

static int64_t conf_int(rd_kafka_t *rk, const char *key, int64_t dflt)
{
    char v[32];
    size_t len = sizeof(v);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), key, v, &len) != RD_KAFKA_CONF_OK)
        return dflt;
    return strtoll(v, NULL, 10);
}

void segd_fetch_nudge_forget_leaders(segd_fetch_nudge_t *n)
{
    for (size_t i = 0; i < n->n_leaders; i++)
        free(n->topic[i]);
    n->n_leaders = 0;
    n->leaders_at_ms = 0;
}

void segd_fetch_nudge_free(segd_fetch_nudge_t *n) { segd_fetch_nudge_forget_leaders(n); }

static void start(segd_fetch_nudge_t *n, rd_kafka_t *rk)
{
    segd_fetch_nudge_forget_leaders(n);
    uint64_t nudges = n->nudges;
    memset(n, 0, sizeof(*n));
    n->nudges = nudges;
    n->rk = rk;
    n->min_messages = conf_int(rk, "queued.min.messages", 100000);
    n->max_bytes = conf_int(rk, "queued.max.messages.kbytes", 65536) * 1024;
}

void segd_fetch_nudge_note(segd_fetch_nudge_t *n, size_t payload_bytes)
{
    n->mean_bytes = n->mean_bytes > 0
                        ? n->mean_bytes + MEAN_WEIGHT * ((double)payload_bytes - n->mean_bytes)
                        : (double)payload_bytes;
}

/* the queue's length at which one of librdkafka's two limits stops the fetch */
static int64_t full_length(const segd_fetch_nudge_t *n)
{
    int64_t full = n->min_messages;
    if (n->mean_bytes >= 1 && (double)n->max_bytes / n->mean_bytes < (double)full)
        full = (int64_t)((double)n->max_bytes / n->mean_bytes);
    return full > 0 ? full : 1;
}

static int has_leader(const segd_fetch_nudge_t *n, const int32_t *ids, int32_t id)
{
    for (size_t i = 0; i < n->n_leaders; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

static int32_t leader_of(const rd_kafka_metadata_t *md, const char *topic, int32_t partition)
{
    for (int t = 0; t < md->topic_cnt; t++) {
        if (strcmp(md->topics[t].topic, topic))
            continue;
        for (int i = 0; i < md->topics[t].partition_cnt; i++)
            if (md->topics[t].partitions[i].id == partition)
                return md->topics[t].partitions[i].leader;
    }
    return -1;
}

/* one assigned partition per broker that leads any: the brokers to wake */
static void find_leaders(segd_fetch_nudge_t *n)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    const rd_kafka_metadata_t *md = NULL;
    int32_t ids[SEGD_FETCH_NUDGE_LEADERS_MAX];
    segd_fetch_nudge_forget_leaders(n);
    n->leaders_at_ms = segd_mono_ms();
    if (rd_kafka_assignment(n->rk, &a) || !a->cnt ||
        rd_kafka_metadata(n->rk, 0, NULL, &md, METADATA_TIMEOUT_MS)) {
        if (a)
            rd_kafka_topic_partition_list_destroy(a);
        return; /* looked up again after LEADERS_TTL_MS */
    }
    for (int i = 0; i < a->cnt && n->n_leaders < SEGD_FETCH_NUDGE_LEADERS_MAX; i++) {
        int32_t id = leader_of(md, a->elems[i].topic, a->elems[i].partition);
        if (id < 0 || has_leader(n, ids, id) || !(n->topic[n->n_leaders] = strdup(a->elems[i].topic)))
            continue;
        ids[n->n_leaders] = id;
        n->partition[n->n_leaders++] = a->elems[i].partition;
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_partition_list_destroy(a);
}

static void wake(segd_fetch_nudge_t *n)
{
    if (!n->n_leaders || segd_mono_ms() - n->leaders_at_ms > LEADERS_TTL_MS)
        find_leaders(n);
    for (size_t i = 0; i < n->n_leaders; i++) {
        int64_t lo, hi; /* unused: the request is the point */
        rd_kafka_query_watermark_offsets(n->rk, n->topic[i], n->partition[i], &lo, &hi,
                                         SEGD_FETCH_NUDGE_TIMEOUT_MS);
    }
    n->nudges++;
}

int segd_fetch_nudge_check(segd_fetch_nudge_t *n, rd_kafka_t *rk)
{
    if (n->rk != rk)
        start(n, rk);
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
    wake(n);
    n->peak = len;
    return 1;
}
