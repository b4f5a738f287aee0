/* What the pipeline knows of each partition, below every other part of it:
 * the input topics' partition counts (the parts table), the assigned
 * partitions that wait paused for their starting offset (the unread table),
 * the seek that puts a message back in front of its partition, and the
 * reads of the assignment. The batch, the restore, the metrics and the
 * rebalance callback use it; it calls none of them. Runs on the pipeline's
 * thread; segd_pipeline_assigned and segd_pipeline_assignment are
 * thread-safe reads of the assignment. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "transport/kmeta.h"

#define METADATA_TIMEOUT_MS 5000
#define SEEK_TIMEOUT_MS 5000

topic_parts_t *segd_pipeline_parts_find(segd_pipeline_t *p, const char *topic)
{
    for (size_t i = 0; i < p->nparts; i++)
        if (!strcmp(p->parts[i].topic, topic))
            return &p->parts[i];
    return NULL;
}

/* Asks the brokers for the topic's partition count. When they cannot say, it
 * returns 0, logs that once, and the event is applied unchecked for misrouting.
 * After a failure the brokers are asked again only 10 s later, because a request
 * per message would stall ingest for the metadata timeout each time. */
int32_t segd_pipeline_parts_refresh(segd_pipeline_t *p, const char *topic)
{
    char err[256];
    int32_t count = 0;
    if (segd_mono_ms() < p->metadata_next_ms)
        return 0;
    if (segd_kmeta_partitions(p->consumer, topic, METADATA_TIMEOUT_MS, &count, err,
                              sizeof(err)) != SEGD_OK) {
        if (!p->metadata_logged++)
            segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                     "%s (misrouted events not counted meanwhile)", err);
        p->metadata_next_ms = segd_mono_ms() + 10000;
        return 0;
    }
    topic_parts_t *t = segd_pipeline_parts_find(p, topic);
    if (!t && p->nparts < SEGD_MAX_TOPICS) {
        t = &p->parts[p->nparts++];
        snprintf(t->topic, sizeof(t->topic), "%s", topic);
    }
    if (t)
        t->count = count;
    return count;
}

segd_err_t segd_pipeline_partitions(segd_pipeline_t *p, const char *topic, int32_t *count,
                                    char *errstr, size_t n)
{
    segd_err_t err = segd_kmeta_partitions(p->consumer, topic, METADATA_TIMEOUT_MS, count,
                                           errstr, n);
    topic_parts_t *t = err ? NULL : segd_pipeline_parts_find(p, topic);
    if (!err && !t && p->nparts < SEGD_MAX_TOPICS) {
        t = &p->parts[p->nparts++];
        snprintf(t->topic, sizeof(t->topic), "%s", topic);
    }
    if (t)
        t->count = *count;
    return err;
}

rd_kafka_topic_partition_list_t *segd_pipeline_one_partition(const char *topic,
                                                             int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    return l;
}

int64_t segd_pipeline_reset_offset(const segd_pipeline_t *p)
{
    return strcmp(p->cfg->offset_reset, "latest") ? RD_KAFKA_OFFSET_BEGINNING
                                                  : RD_KAFKA_OFFSET_END;
}

int segd_pipeline_unread_has(const segd_pipeline_t *p, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].partition == partition && !strcmp(p->unread[i].topic, topic))
            return 1;
    return 0;
}

/* Returns the entry, or NULL when the table is full (more than
 * MAX_POSITIONS unreadable partitions: unreachable with sane counts). */
unread_t *segd_pipeline_unread_note(segd_pipeline_t *p, const char *topic, int32_t partition,
                                    int64_t fallback)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].partition == partition && !strcmp(p->unread[i].topic, topic))
            return &p->unread[i];
    if (p->nunread == MAX_POSITIONS)
        return NULL;
    unread_t *u = &p->unread[p->nunread++];
    snprintf(u->topic, sizeof(u->topic), "%s", topic);
    u->partition = partition;
    u->purging = 0;
    u->restoring = 0;
    u->logged = 0;
    u->fallback = fallback;
    return u;
}

void segd_pipeline_unread_forget(segd_pipeline_t *p,
                                 const rd_kafka_topic_partition_list_t *parts)
{
    for (size_t i = 0; i < p->nunread;) {
        unread_t *u = &p->unread[i];
        if (!rd_kafka_topic_partition_list_find(parts, u->topic, u->partition)) {
            i++;
            continue;
        }
        if (u->restoring && p->hooks.restore_cancel) /* not ours any more */
            p->hooks.restore_cancel(p->hooks.restore_ctx, u->topic, u->partition);
        *u = p->unread[--p->nunread];
    }
}

/* Seeks to offset; 0 when librdkafka refused (e.g. the fetcher is not
 * started yet). */
int segd_pipeline_seek(segd_pipeline_t *p, const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = segd_pipeline_one_partition(topic, partition, offset);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(p->consumer, l, SEEK_TIMEOUT_MS);
    int ok = !e && !l->elems[0].err;
    if (e)
        rd_kafka_error_destroy(e);
    rd_kafka_topic_partition_list_destroy(l);
    return ok;
}

/* No polled message is ever dropped without being applied or its partition
 * being put back in front of it: librdkafka's position is already past
 * every message it returned, and the next batch stores offsets past them.
 * Makes m the next message of its partition again. If librdkafka refuses
 * the seek, the partition waits paused and restarts from its stored offset
 * (at worst re-applying part of the batch, which is harmless, DESIGN §3). */
void segd_pipeline_rewind(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    if (segd_pipeline_seek(p, topic, m->partition, m->offset))
        return;
    segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
             "cannot rewind %s [%" PRId32 "] to %" PRId64 "; it restarts from its stored offset",
             topic, m->partition, m->offset);
    rd_kafka_topic_partition_list_t *l = segd_pipeline_one_partition(topic, m->partition, 0);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    /* without a stored offset yet, m is where it must start: a reset to
     * latest would skip it and everything after it */
    segd_pipeline_unread_note(p, topic, m->partition, m->offset);
}

int segd_pipeline_assigned_own(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (!p->consumer || rd_kafka_assignment(p->consumer, &parts))
        return -1;
    int n = parts->cnt;
    rd_kafka_topic_partition_list_destroy(parts);
    return n;
}

/* Other threads hold consumer_mu while they use the consumer: a rebuild
 * (pipeline_rebuild.c) destroys the old one once it has replaced it. */
int segd_pipeline_assigned(segd_pipeline_t *p)
{
    pthread_mutex_lock(&p->consumer_mu);
    int n = segd_pipeline_assigned_own(p);
    pthread_mutex_unlock(&p->consumer_mu);
    return n;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* segd_pipeline_assignment with consumer_mu held. */
static segd_err_t assignment_of(rd_kafka_t *rk, const char *topic, int32_t **parts,
                                size_t *n_parts, int32_t *partition_count, char *errstr,
                                size_t n)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    *parts = NULL;
    *n_parts = 0;
    if (!rk || rd_kafka_assignment(rk, &l))
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "no assignment to read");
    segd_err_t err = SEGD_OK;
    *parts = malloc(((size_t)l->cnt + 1) * sizeof(**parts));
    if (!*parts)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    for (int i = 0; !err && i < l->cnt; i++)
        if (!strcmp(l->elems[i].topic, topic))
            (*parts)[(*n_parts)++] = l->elems[i].partition;
    rd_kafka_topic_partition_list_destroy(l);
    if (!err)
        qsort(*parts, *n_parts, sizeof(**parts), cmp_i32);
    if (!err && *n_parts) /* a broker round trip only when there is something to export */
        err = segd_kmeta_partitions(rk, topic, 10000, partition_count, errstr, n);
    if (err || !*n_parts) {
        free(*parts);
        *parts = NULL;
    }
    return err;
}

/* The lock is held across the metadata round trip (up to 10 s when no
 * broker answers): a rebuild or close waits for it rather than destroy the
 * consumer under this thread. The pipeline's own steps never take it. */
segd_err_t segd_pipeline_assignment(segd_pipeline_t *p, const char *topic, int32_t **parts,
                                    size_t *n_parts, int32_t *partition_count,
                                    char *errstr, size_t n)
{
    pthread_mutex_lock(&p->consumer_mu);
    segd_err_t err = assignment_of(p->consumer, topic, parts, n_parts, partition_count,
                                   errstr, n);
    pthread_mutex_unlock(&p->consumer_mu);
    return err;
}
