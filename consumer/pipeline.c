/* Kafka -> store ingest; see pipeline.h. One thread: librdkafka's rebalance
 * callback runs inside consumer_poll on this thread, so it may write the
 * pending batch before partitions leave. */
#define _GNU_SOURCE
#include "consumer/pipeline.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/apply.h"
#include "consumer/dlq.h"
#include "consumer/links.h"
#include "consumer/sweep.h"
#include "consumer/lag.h"
#include "consumer/static_member.h"
#include "core/partition.h"
#include "transport/kconf.h"
#include "transport/kmeta.h"
#include "base/clock.h"

#define MAX_POSITIONS 1024
#define SEEK_TIMEOUT_MS 5000
/* librdkafka 2.0.2's cooperative-sticky assignor aborts in rd_kafka_destroy
 * when a member that joined stops before its first assignment (upstream
 * #4312, fixed in 2.3.0): close waits up to this long for it. */
#define FIRST_ASSIGNMENT_WAIT_MS 30000
#define METADATA_TIMEOUT_MS 5000
#define LAG_REFRESH_MS 250 /* the lag table and gauge, at most this often */
/* A Kafka commit that failed is sent again no sooner than this after the
 * failure: a group rebalancing answers REBALANCE_IN_PROGRESS until it
 * settles, and a resend at every step would only be refused again. */
#define COMMIT_RETRY_MS 500
#define CLUSTER_ID_WAIT_MS 3000 /* is it librdkafka's mock? (mock_brokers) */
#define MOCK_SESSION_TIMEOUT_MS "6000" /* the consumer's default there */
#define TOPIC_WAIT_MS 10000 /* a topic being auto-created answers "unknown" first */
/* A member with no assignment this long after it subscribed says why it
 * may wait (log_unassigned): a normal join takes a few seconds, the group's
 * initial rebalance delay (3 s on Kafka) included. */
#define UNASSIGNED_NOTE_MS 8000

typedef struct position {
    char topic[256];
    int32_t partition;
    int64_t next;
    uint64_t messages, events, segments; /* of this batch, for the metrics */
} position_t;

/* The families the pipeline reports into (segd_pipeline_set_metrics); all
 * NULL without a registry, which makes every update a no-op. */
typedef struct pipeline_metrics {
    segd_metric_t *consumed, *events, *segments; /* per topic, partition */
    segd_metric_t *dlq, *misrouted, *batches, *fault_waits;
    segd_metric_t *batch_messages, *apply_seconds, *lag, *assigned;
    segd_metric_t *swept_users, *swept_examined, *swept_partitions, *sweep_off;
    segd_metric_t *link_events, *member_changes; /* identity.enable (DESIGN §10) */
} pipeline_metrics_t;

/* An input topic's partition count from the brokers' metadata: the P of
 * segd_partition_of for the misrouted check. */
typedef struct topic_parts {
    char topic[256];
    int32_t count;
} topic_parts_t;

/* An assigned partition whose stored offset could not be read: it stays
 * paused until a read succeeds (retry_unread). */
typedef struct unread {
    char topic[256];
    int32_t partition;
    int purging;      /* returned while the sweep deletes its users: waits for it */
    int restoring;    /* handed to the restore hook, which has not finished */
    int logged;       /* the read error was reported */
    int64_t fallback; /* where to start without a stored offset (a failed rewind's
                         message); -1 = input.offset.reset */
} unread_t;

struct segd_pipeline {
    segd_links_t *links; /* identity.enable: the links topic, applied in this thread */
    const segd_config_t *cfg;
    segd_store_t *store;
    volatile sig_atomic_t *stop;
    rd_kafka_t *consumer;
    segd_dlq_t *dlq;
    segd_pipeline_hooks_t hooks; /* the change publisher, through its owner */
    segd_sweep_t *sweep;         /* NULL when sweep.after.s = 0 */
    int64_t sweep_logged_ms;     /* a failed sweep step was reported then */
    segd_ingest_t *ingest;
    segd_applier_t ap;
    position_t pos[MAX_POSITIONS];
    size_t npos;
    unread_t unread[MAX_POSITIONS];
    size_t nunread;
    int held;       /* back-pressure: every assigned partition is paused */
    int rebalanced; /* the group has called the rebalance callback */
    segd_pipeline_stats_t st;
    segd_backoff_t bo; /* shared with ingest and dlq: one fault report at a time */
    int64_t gc_next_ms;    /* monotonic time of the next GC watermark advance */
    int64_t flush_next_ms; /* and of the next forced flush of the profiles */
    topic_parts_t parts[SEGD_MAX_TOPICS];
    size_t nparts;
    int64_t misrouted_stored;  /* the store's counter as last written */
    int64_t misrouted_pending; /* counted in the batch not yet written */
    int64_t unchecked_stored, unchecked_pending; /* the same, of events not checked */
    int metadata_logged;       /* a failed metadata request was reported */
    int64_t metadata_next_ms;  /* no metadata request before (after one that failed
                                  or left a message's partition unexplained) */
    segd_lag_t *lag;           /* per-partition lag, read by other threads */
    int64_t lag_next_ms;       /* monotonic time of the next lag refresh */
    int commit_failed;         /* a Kafka commit was refused: send the store's again */
    int commit_logged;         /* the refusal was logged; reset by an accepted commit */
    int64_t commit_retry_ms;   /* monotonic time of that next send */
    uint64_t commits_failed;   /* for the log: refusals seen, resends made */
    uint64_t commits_resent;
    int64_t session_timeout_ms; /* the consumer's, for the log of a long wait */
    int unassigned_logged;      /* that wait was explained */
    pipeline_metrics_t mx;
};

#define LOG(p) ((p)->cfg->log)

/* librdkafka's lines, with the pipeline as the client's opaque. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    const segd_pipeline_t *p = rd_kafka_opaque(rk);
    segd_kconf_log(p ? LOG(p) : NULL, rk, level, fac, buf);
}

/* Exponential backoff for fault waits; logs the fault once per change. */
static int64_t backoff(segd_pipeline_t *p, int64_t wait_ms, const char *fault)
{
    return segd_backoff_wait(&p->bo, wait_ms, p->cfg->retry_max_ms, fault);
}

static void fault_cleared(segd_pipeline_t *p)
{
    segd_backoff_cleared(&p->bo);
}

/* ---------- batch state ---------- */

/* events is 0 for a dead letter, 1 for an applied event of segments. */
static void note_position(segd_pipeline_t *p, const char *topic, int32_t partition,
                          int64_t next, uint64_t events, uint64_t segments)
{
    position_t *q = NULL;
    for (size_t i = 0; !q && i < p->npos; i++)
        if (p->pos[i].partition == partition && !strcmp(p->pos[i].topic, topic))
            q = &p->pos[i];
    if (!q && p->npos == MAX_POSITIONS)
        return; /* unreachable with sane partition counts; the offset is re-read */
    if (!q) {
        q = &p->pos[p->npos++];
        memset(q, 0, sizeof(*q));
        snprintf(q->topic, sizeof(q->topic), "%s", topic);
        q->partition = partition;
        q->next = next;
    }
    if (next > q->next)
        q->next = next;
    q->messages++;
    q->events += events;
    q->segments += segments;
}

/* ---------- partitions and misrouted events ---------- */

static topic_parts_t *find_parts(segd_pipeline_t *p, const char *topic)
{
    for (size_t i = 0; i < p->nparts; i++)
        if (!strcmp(p->parts[i].topic, topic))
            return &p->parts[i];
    return NULL;
}

/* Asks the brokers for topic's partition count; 0 when they cannot say
 * (logged once): the event is then applied uncounted. After a failure the
 * brokers are asked again only 10 s later: a request per message would
 * stall ingest for the metadata timeout each time. */
static int32_t refresh_parts(segd_pipeline_t *p, const char *topic)
{
    char err[256];
    int32_t count = 0;
    if (segd_mono_ms() < p->metadata_next_ms)
        return 0;
    if (segd_kmeta_partitions(p->consumer, topic, METADATA_TIMEOUT_MS, &count, err,
                              sizeof(err)) != SEGD_OK) {
        if (!p->metadata_logged++)
            segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
                     "%s (misrouted events not counted meanwhile)", err);
        p->metadata_next_ms = segd_mono_ms() + 10000;
        return 0;
    }
    topic_parts_t *t = find_parts(p, topic);
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
    topic_parts_t *t = err ? NULL : find_parts(p, topic);
    if (!err && !t && p->nparts < SEGD_MAX_TOPICS) {
        t = &p->parts[p->nparts++];
        snprintf(t->topic, sizeof(t->topic), "%s", topic);
    }
    if (t)
        t->count = *count;
    return err;
}

/* Whether the producer put this user where input.partitioner says: a
 * partition added to the topic since the count was read is asked for again
 * (the message's own partition proves the count is stale). */
static int misrouted(segd_pipeline_t *p, const rd_kafka_message_t *m, const segd_event_t *ev)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    topic_parts_t *t = find_parts(p, topic);
    int32_t count = t && m->partition < t->count ? t->count : refresh_parts(p, topic);
    if (count > 0 && m->partition >= count) /* metadata behind the topic's growth */
        p->metadata_next_ms = segd_mono_ms() + 10000;
    if (count <= 0 || m->partition >= count) {
        p->unchecked_pending++;
        return 0;
    }
    return segd_partition_of(p->cfg->partitioner, ev->user_id, ev->user_id_len, count) !=
           m->partition;
}

/* The batch's misrouted total and the partition counts segd get places
 * users with, in the batch's own WriteBatch. */
static void record_counts(segd_pipeline_t *p)
{
    if (p->misrouted_pending)
        segd_batch_set_counter(p->ap.batch, SEGD_COUNTER_MISROUTED,
                               p->misrouted_stored + p->misrouted_pending);
    if (p->unchecked_pending)
        segd_batch_set_counter(p->ap.batch, SEGD_COUNTER_UNCHECKED,
                               p->unchecked_stored + p->unchecked_pending);
    for (size_t i = 0; i < p->nparts; i++)
        if (p->parts[i].count > 0)
            segd_batch_set_partition_count(p->ap.batch, p->parts[i].topic, p->parts[i].count);
}

/* A written batch's figures into the registry: per partition what it
 * consumed and applied, its size and write time, and the running totals. */
static void report_batch(segd_pipeline_t *p, double apply_s)
{
    char part[16];
    const char *v[2] = {NULL, part};
    uint64_t messages = 0;
    for (size_t i = 0; i < p->npos; i++) {
        const position_t *q = &p->pos[i];
        snprintf(part, sizeof(part), "%" PRId32, q->partition);
        v[0] = q->topic;
        segd_metric_add(p->mx.consumed, v, (double)q->messages);
        segd_metric_add(p->mx.events, v, (double)q->events);
        segd_metric_add(p->mx.segments, v, (double)q->segments);
        messages += q->messages;
    }
    segd_metric_observe(p->mx.batch_messages, NULL, (double)messages);
    segd_metric_observe(p->mx.apply_seconds, NULL, apply_s);
    segd_metric_set(p->mx.batches, NULL, (double)(p->st.batches + 1));
    segd_metric_set(p->mx.misrouted, NULL, (double)p->st.misrouted);
    for (int r = 0; r < SEGD_DLQ_REASONS; r++)
        if (p->st.dlq[r])
            segd_metric_set(p->mx.dlq, (const char *[]){segd_dlq_reason_name(r)},
                            (double)p->st.dlq[r]);
}

/* The result of an asynchronous Kafka commit (delivered by consumer_poll
 * on this thread). The store holds the offsets that matter; the group's
 * committed offsets are for lag monitors, so a refused commit (the
 * generation changed under a rebalance: ILLEGAL_GENERATION,
 * REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID) is not an error for ingest, but
 * left alone it keeps the group's committed lag stale until the next batch
 * of that partition, which on a quiet partition may be never. So it is
 * noted and commit_resend sends the store's offsets again. */
static void commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offs, void *opaque)
{
    (void)rk;
    segd_pipeline_t *p = opaque;
    rd_kafka_resp_err_t first = err;
    for (int i = 0; !first && offs && i < offs->cnt; i++)
        first = offs->elems[i].err;
    if (!first || first == RD_KAFKA_RESP_ERR__NO_OFFSET) {
        if (!first && p->commit_logged) {
            p->commit_logged = 0;
            segd_log(LOG(p), SEGD_LOG_INFO, "pipeline", "offset commit accepted again");
        }
        return;
    }
    if (!p->commit_logged) /* once until a commit is accepted: a rebalance may refuse many */
        segd_log(LOG(p), SEGD_LOG_INFO, "pipeline",
                 "offset commit refused (%s): sending the stored offsets again once the "
                 "group settles", rd_kafka_err2str(first));
    p->commit_logged = 1;
    p->commit_failed = 1;
    p->commits_failed++;
    p->commit_retry_ms = segd_mono_ms() + COMMIT_RETRY_MS;
}

static int is_unread(const segd_pipeline_t *p, const char *topic, int32_t partition);
static int joined(segd_pipeline_t *p);

/* Sends the store's offsets of every assigned partition to the group again
 * after a refused commit: the assignment as it is now, so a partition that
 * moved away is left to its new owner. */
static void commit_resend(segd_pipeline_t *p)
{
    char err[256];
    if (!p->commit_failed || segd_mono_ms() < p->commit_retry_ms)
        return;
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new(parts->cnt);
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t next;
        if (!is_unread(p, tp->topic, tp->partition) &&
            segd_store_offset_get(p->store, tp->topic, tp->partition, &next, err,
                                  sizeof(err)) == SEGD_OK)
            rd_kafka_topic_partition_list_add(offs, tp->topic, tp->partition)->offset = next;
    }
    /* nothing to send (between a revoke and the next assignment): still
     * failed, tried again at the assignment, which resets commit_retry_ms */
    p->commit_retry_ms = segd_mono_ms() + COMMIT_RETRY_MS;
    if (offs->cnt) {
        p->commit_failed = 0;
        p->commits_resent++;
        rd_kafka_commit(p->consumer, offs, 1); /* a refusal comes back to commit_cb */
        segd_log_kv(LOG(p), SEGD_LOG_DEBUG, "pipeline", "offsets committed again",
                    "partitions=%d refused=%" PRIu64 " resent=%" PRIu64, offs->cnt,
                    p->commits_failed, p->commits_resent);
    }
    rd_kafka_topic_partition_list_destroy(offs);
    rd_kafka_topic_partition_list_destroy(parts);
}

/* Dead letters first, then data + offsets in one WriteBatch, then the Kafka
 * commit. A failure leaves the batch intact for the next attempt. */
static segd_err_t flush_batch(segd_pipeline_t *p, char *errstr, size_t n)
{
    if (!p->npos)
        return SEGD_OK;
    double t0 = segd_mono_s();
    segd_err_t err = segd_dlq_deliver(p->dlq, errstr, n);
    p->st.upkeep_s += segd_mono_s() - t0; /* the dead letters, acknowledged */
    if (err)
        return err;
    for (size_t i = 0; i < p->npos; i++)
        segd_batch_set_offset(p->ap.batch, p->pos[i].topic, p->pos[i].partition,
                              p->pos[i].next);
    record_counts(p);
    int64_t wait = 100;
    double tw = segd_mono_s();
    while ((err = segd_applier_flush(&p->ap, errstr, n)) != SEGD_OK) {
        if (*p->stop || err == SEGD_ERR_ABORTED) /* a stopped store needs a restart */
            return err;
        wait = backoff(p, wait, errstr);
    }
    double tc = segd_mono_s();
    p->st.write_s += tc - tw;
    rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new((int)p->npos);
    for (size_t i = 0; i < p->npos; i++)
        rd_kafka_topic_partition_list_add(offs, p->pos[i].topic, p->pos[i].partition)
            ->offset = p->pos[i].next;
    rd_kafka_commit(p->consumer, offs, 1);
    rd_kafka_topic_partition_list_destroy(offs);
    if (p->hooks.committed)
        p->hooks.committed(p->hooks.ctx);
    p->st.commit_s += segd_mono_s() - tc;
    if (p->mx.consumed)
        report_batch(p, segd_mono_s() - t0);
    p->npos = 0;
    p->misrouted_stored += p->misrouted_pending;
    p->misrouted_pending = 0;
    p->unchecked_stored += p->unchecked_pending;
    p->unchecked_pending = 0;
    segd_dlq_clear(p->dlq);
    p->st.batches++;
    /* per batch, never per message; at debug only (tests wait on it) */
    segd_log_kv(LOG(p), SEGD_LOG_DEBUG, "pipeline", "batch written",
                "batch=%" PRIu64 " consumed=%" PRIu64 " events=%" PRIu64 " segments=%" PRIu64,
                p->st.batches, p->st.messages, p->st.events, p->st.segments);
    fault_cleared(p);
    return SEGD_OK;
}

/* ---------- partition positions ----------
 * No polled message is ever dropped without being applied or its partition
 * being put back in front of it: librdkafka's position is already past
 * every message it returned, and the next batch stores offsets past them. */

static rd_kafka_topic_partition_list_t *one_partition(const char *topic, int32_t partition,
                                                      int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    return l;
}

static int64_t reset_offset(const segd_pipeline_t *p)
{
    return strcmp(p->cfg->offset_reset, "latest") ? RD_KAFKA_OFFSET_BEGINNING
                                                  : RD_KAFKA_OFFSET_END;
}

static int is_unread(const segd_pipeline_t *p, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].partition == partition && !strcmp(p->unread[i].topic, topic))
            return 1;
    return 0;
}

/* Returns the entry, or NULL when the table is full (more than
 * MAX_POSITIONS unreadable partitions: unreachable with sane counts). */
static unread_t *note_unread(segd_pipeline_t *p, const char *topic, int32_t partition,
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

static void forget_unread(segd_pipeline_t *p, const rd_kafka_topic_partition_list_t *parts)
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
static int seek_to(segd_pipeline_t *p, const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = one_partition(topic, partition, offset);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(p->consumer, l, SEEK_TIMEOUT_MS);
    int ok = !e && !l->elems[0].err;
    if (e)
        rd_kafka_error_destroy(e);
    rd_kafka_topic_partition_list_destroy(l);
    return ok;
}

/* Makes m the next message of its partition again. If librdkafka refuses
 * the seek, the partition waits paused and restarts from its stored offset
 * (at worst re-applying part of the batch, which is harmless, DESIGN §3). */
static void rewind_to(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    if (seek_to(p, topic, m->partition, m->offset))
        return;
    segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
             "cannot rewind %s [%" PRId32 "] to %" PRId64 "; it restarts from its stored offset",
             topic, m->partition, m->offset);
    rd_kafka_topic_partition_list_t *l = one_partition(topic, m->partition, 0);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    /* without a stored offset yet, m is where it must start: a reset to
     * latest would skip it and everything after it */
    note_unread(p, topic, m->partition, m->offset);
}

/* Partitions whose stored offset could not be read were assigned paused;
 * each step reads again, seeks and resumes them. Only "no offset stored"
 * falls back to input.offset.reset: a read error would skip a backlog. */
/* Whether a restoring partition is still restoring; once its restore has
 * finished it goes on as an unread partition: its offset is in the store
 * (restored) or absent (replay from input.offset.reset). */
static int still_restoring(segd_pipeline_t *p, unread_t *u)
{
    if (!u->restoring)
        return 0;
    int state = p->hooks.restore_state(p->hooks.restore_ctx, u->topic, u->partition);
    if (state == SEGD_PIPELINE_RESTORING)
        return 1;
    u->restoring = 0;
    return 0;
}

static int hand_to_restore(segd_pipeline_t *p, unread_t *u);

/* Whether a half-swept partition still waits for the sweep; once it is
 * done the partition goes to the restore hook, if any. */
static int still_purging(segd_pipeline_t *p, unread_t *u)
{
    if (!u->purging)
        return 0;
    if (segd_sweep_purging(p->sweep, u->topic, u->partition))
        return 1;
    u->purging = 0;
    return p->hooks.restore_begin && hand_to_restore(p, u);
}

static void retry_unread(segd_pipeline_t *p)
{
    for (size_t i = 0; i < p->nunread;) {
        unread_t *u = &p->unread[i];
        char err[256];
        int64_t next;
        if (still_purging(p, u) || still_restoring(p, u)) {
            i++;
            continue;
        }
        segd_err_t e =
            segd_store_offset_get(p->store, u->topic, u->partition, &next, err, sizeof(err));
        if (e == SEGD_ERR_NOTFOUND) {
            next = u->fallback >= 0 ? u->fallback : reset_offset(p);
            e = SEGD_OK;
        }
        if (e || !seek_to(p, u->topic, u->partition, next)) {
            if (e && !u->logged)
                segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
                         "waiting: %s [%" PRId32 "]: stored offset unreadable: "
                         "%s (partition paused, retrying)", u->topic, u->partition, err);
            u->logged |= e != SEGD_OK;
            i++;
            continue;
        }
        if (u->logged)
            segd_log(LOG(p), SEGD_LOG_INFO, "pipeline", "resumed %s [%" PRId32 "] at its stored offset",
                     u->topic, u->partition);
        segd_lag_start(p->lag, u->topic, u->partition, next);
        if (!p->held) {
            rd_kafka_topic_partition_list_t *l = one_partition(u->topic, u->partition, next);
            rd_kafka_resume_partitions(p->consumer, l);
            rd_kafka_topic_partition_list_destroy(l);
        }
        *u = p->unread[--p->nunread];
    }
}

/* New partitions start paused while ingest is held or their offset is
 * unknown; the others are resumed explicitly, since librdkafka keeps an
 * application's pause across unassign and reassign. */
static void pause_or_resume(segd_pipeline_t *p, const rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *pause = rd_kafka_topic_partition_list_new(parts->cnt);
    rd_kafka_topic_partition_list_t *resume = rd_kafka_topic_partition_list_new(parts->cnt);
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int hold = p->held || is_unread(p, tp->topic, tp->partition);
        rd_kafka_topic_partition_list_add(hold ? pause : resume, tp->topic, tp->partition);
    }
    if (pause->cnt)
        rd_kafka_pause_partitions(p->consumer, pause);
    if (resume->cnt)
        rd_kafka_resume_partitions(p->consumer, resume);
    rd_kafka_topic_partition_list_destroy(pause);
    rd_kafka_topic_partition_list_destroy(resume);
}

/* ---------- messages ---------- */

/* Returns -1 when a stop interrupted a fault wait and -2 when memory ran out;
 * in both cases the message stays unapplied and its offset unwritten. */
static int handle_message(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    char why[256];
    int reason = 0;
    const segd_event_t *ev = NULL;
    if (!p->st.messages++)
        p->st.first_message_s = segd_mono_s();
    double t0 = segd_mono_s();
    int ok = segd_ingest_check(p->ingest, rd_kafka_topic_name(m->rkt), m->partition, m->key, m->key_len, m->payload, m->len, &ev,
                               &reason, why, sizeof(why));
    double t1 = segd_mono_s();
    p->st.check_s += t1 - t0;
    if (ok < 0)
        return -1;
    if (ok) {
        rd_kafka_timestamp_type_t tstype;
        int64_t ts = rd_kafka_message_timestamp(m, &tstype);
        if (segd_applier_add_from(&p->ap, ev, rd_kafka_topic_name(m->rkt), m->partition,
                                  m->offset, ts > 0 ? ts : 0) != SEGD_OK)
            return -2;
        p->st.build_s += segd_mono_s() - t1;
        p->st.events++;
        p->st.segments += ev->n_segments;
        /* a control event goes to every partition on purpose */
        if (!segd_event_is_control(ev) && misrouted(p, m, ev)) {
            p->st.misrouted++;
            p->misrouted_pending++;
        }
    } else {
        /* an empty key or value goes out as none, as it always has */
        if (segd_dlq_add(p->dlq, rd_kafka_topic_name(m->rkt), m->partition, m->offset,
                         m->key_len ? m->key : NULL, m->key_len, m->len ? m->payload : NULL,
                         m->len, segd_dlq_reason_name(reason), why) != SEGD_OK)
            return -2;
        p->st.dlq[reason]++;
    }
    note_position(p, rd_kafka_topic_name(m->rkt), m->partition, m->offset + 1, ok ? 1 : 0,
                  ok ? ev->n_segments : 0);
    return 0;
}


/* Ingest waits while the change stream is too far behind: an unbounded
 * outbox would turn a broker outage into a disk-full outage. */
static int publisher_behind(segd_pipeline_t *p)
{
    return p->hooks.backlog(p->hooks.ctx) > (uint64_t)p->cfg->changes_max_outbox;
}

/* A message polled while ingest is held goes back: its partition is paused
 * and put in front of it again. */
static void hold_message(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    rd_kafka_topic_partition_list_t *l =
        one_partition(rd_kafka_topic_name(m->rkt), m->partition, m->offset);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    rewind_to(p, m);
}

/* Partitions polled again after a hold: the assignment as it is now (a
 * rebalance may have run inside the hold), less those still unread. */
static void resume_assignment(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    pause_or_resume(p, parts);
    rd_kafka_topic_partition_list_destroy(parts);
}

static void wait_for_publisher(segd_pipeline_t *p)
{
    if (!p->hooks.backlog || p->cfg->changes_max_outbox <= 0 || !publisher_behind(p))
        return;
    /* paused partitions deliver nothing, and polling keeps the membership;
     * partitions assigned meanwhile start paused (rebalance_cb) */
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    p->held = 1;
    rd_kafka_pause_partitions(p->consumer, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    int64_t wait = 100;
    while (!*p->stop && publisher_behind(p)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, 0);
        if (m && !m->err)
            hold_message(p, m);
        if (m)
            rd_kafka_message_destroy(m);
        wait = backoff(p, wait, "change stream behind: outbox over changes.max.outbox");
    }
    fault_cleared(p);
    p->held = 0;
    resume_assignment(p);
}

/* Whether every assigned partition has been read to within a few batches of
 * the end offset librdkafka last saw (cached, no broker round trip): under
 * steady load the position never sits exactly at the end. */
static int caught_up(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return 0;
    int64_t slack = 10 * p->cfg->batch_max_messages;
    int ok = parts->cnt > 0 && !rd_kafka_position(p->consumer, parts);
    for (int i = 0; ok && i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t lo, hi;
        ok = !rd_kafka_get_watermark_offsets(p->consumer, tp->topic, tp->partition, &lo, &hi) &&
             hi >= 0 && (tp->offset >= 0 ? hi - tp->offset <= slack : hi == lo);
    }
    rd_kafka_topic_partition_list_destroy(parts);
    return ok;
}

/* Moves the GC watermark at most every 10 s, and only here: between the
 * time check of an event and the write of its batch W stays put. A fresh
 * store starts W's phase only once caught up, so replaying the input's
 * history into it is not refused (DESIGN §3, §7). A failure leaves W where
 * it was, which is always safe. */
static void advance_gc(segd_pipeline_t *p)
{
    char err[256];
    if (segd_mono_ms() < p->gc_next_ms)
        return;
    p->gc_next_ms = segd_mono_ms() + 10000;
    int flags = segd_policy_ts_floor(segd_store_policy(p->store)) == 0 && caught_up(p)
                    ? SEGD_GC_CAUGHT_UP
                    : 0;
    if (segd_store_gc_advance(p->store, flags, err, sizeof(err)) != SEGD_OK)
        segd_log(LOG(p), SEGD_LOG_WARN, "store", "GC watermark not advanced: %s", err);
    /* RocksDB only looks for files due for periodic compaction after a flush
     * or compaction: on a quiet store an operand would stay in the memtable,
     * unmerged, for ever. An hourly flush keeps the grace bound (§3.1). */
    if (segd_mono_ms() >= p->flush_next_ms) {
        p->flush_next_ms = segd_mono_ms() + 3600 * 1000;
        if (segd_store_flush(p->store, err, sizeof(err)) != SEGD_OK)
            segd_log(LOG(p), SEGD_LOG_WARN, "store", "flush: %s", err);
    }
}

/* The revocation sweep's share of this step (consumer/sweep.h): here, on
 * the thread whose rebalance callback changes the assignment. */
static void sweep_step(segd_pipeline_t *p)
{
    char err[256];
    if (!p->sweep || !segd_sweep_active(p->sweep))
        return;
    for (size_t i = 0; i < p->cfg->n_topics; i++) {
        const char *topic = p->cfg->topics[i];
        topic_parts_t *t = find_parts(p, topic);
        int32_t count = t && t->count > 0 ? t->count : refresh_parts(p, topic);
        if (count > 0 && segd_sweep_topic(p->sweep, topic, count, segd_mono_ms()))
            return; /* out of memory: no sweep this time */
    }
    if (segd_sweep_step(p->sweep, segd_mono_ms(), err, sizeof(err)) != SEGD_OK &&
        segd_mono_ms() - p->sweep_logged_ms >= 10000) {
        p->sweep_logged_ms = segd_mono_ms();
        segd_log(LOG(p), SEGD_LOG_WARN, "sweep", "%s (retrying)", err);
    }
}

static int paused_for_offset(void *ctx, const char *topic, int32_t partition)
{
    return is_unread(ctx, topic, partition);
}

/* The lag table (for /readyz) and gauge, from librdkafka's cached
 * watermarks: no broker round trip on this thread. */
static void refresh_lag(segd_pipeline_t *p)
{
    if (segd_mono_ms() < p->lag_next_ms)
        return;
    p->lag_next_ms = segd_mono_ms() + LAG_REFRESH_MS;
    segd_lag_refresh(p->lag, p->consumer, paused_for_offset, p, p->mx.lag);
    segd_metric_set(p->mx.fault_waits, NULL, (double)p->bo.retries);
    segd_metric_set(p->mx.assigned, NULL, (double)segd_pipeline_assigned(p));
    if (p->sweep && p->mx.swept_users) {
        segd_sweep_stats_t st;
        segd_sweep_get_stats(p->sweep, &st);
        segd_metric_set(p->mx.swept_users, NULL, (double)st.users_deleted);
        segd_metric_set(p->mx.swept_examined, NULL, (double)st.records_examined);
        segd_metric_set(p->mx.swept_partitions, NULL, (double)st.partitions_swept);
        segd_metric_set(p->mx.sweep_off, NULL, st.disabled ? 1.0 : 0.0);
    }
}

/* The links step's figures into the registry (its stats are the source). */
static void count_links(segd_pipeline_t *p, const segd_links_stats_t *b,
                        const segd_links_stats_t *a)
{
    uint64_t other_dlq = (a->dlq - a->supernode) - (b->dlq - b->supernode);
    segd_metric_add(p->mx.link_events, (const char *[]){"applied"},
                    (double)(a->applied - b->applied));
    segd_metric_add(p->mx.link_events, (const char *[]){"supernode"},
                    (double)(a->supernode - b->supernode));
    segd_metric_add(p->mx.link_events, (const char *[]){"dead_lettered"}, (double)other_dlq);
    segd_metric_add(p->mx.member_changes, NULL, (double)(a->member_changes - b->member_changes));
}

/* /readyz says "unassigned" while the group has given this member nothing;
 * the log says why that can last: the coordinator hands out partitions only
 * once every member it knows has rejoined or timed out, and a member that
 * stopped without leaving (killed, or a static member's earlier run on
 * brokers without static membership) is waited for up to its session
 * timeout. Once per run. */
static void log_unassigned(segd_pipeline_t *p)
{
    if (p->rebalanced || p->unassigned_logged ||
        segd_mono_s() - p->st.created_s < UNASSIGNED_NOTE_MS / 1000.0)
        return;
    p->unassigned_logged = 1;
    segd_log(LOG(p), SEGD_LOG_INFO, "pipeline",
             "waiting for the group's assignment (%.1f s so far, %s): the coordinator "
             "assigns once every member it knows has rejoined or timed out, and a member "
             "that stopped without leaving the group (killed) is waited for up to its "
             "session timeout (this member's session.timeout.ms is %" PRId64 " ms)",
             segd_mono_s() - p->st.created_s, joined(p) ? "joined" : "not joined yet",
             p->session_timeout_ms);
}

/* The consumer's fatal error as the step's error, in librdkafka's words. */
static segd_err_t fatal_error(segd_pipeline_t *p, char *errstr, size_t n)
{
    char why[512] = "";
    rd_kafka_resp_err_t e = rd_kafka_fatal_error(p->consumer, why, sizeof(why));
    return segd_errf(SEGD_ERR_KAFKA, errstr, n,
                     "consumer: fatal error (%s): %s; the consumer cannot go on, so segd "
                     "stops here; a restart joins the group anew from the store's offsets",
                     rd_kafka_err2name(e), why[0] ? why : "no reason given");
}

segd_err_t segd_pipeline_step(segd_pipeline_t *p, char *errstr, size_t n)
{
    double t0 = segd_mono_s();
    log_unassigned(p);
    advance_gc(p);
    retry_unread(p);
    sweep_step(p);
    double t1 = segd_mono_s();
    wait_for_publisher(p);
    p->st.upkeep_s += t1 - t0;
    p->st.hold_s += segd_mono_s() - t1;
    if (p->links) {
        segd_links_stats_t before, after;
        segd_links_get_stats(p->links, &before);
        segd_err_t lerr = segd_links_step(p->links, 0, errstr, n);
        if (lerr)
            return lerr;
        segd_links_get_stats(p->links, &after);
        count_links(p, &before, &after);
        if (after.member_changes != before.member_changes && p->hooks.committed)
            p->hooks.committed(p->hooks.ctx); /* the outbox has MemberEvents to publish */
    }
    int64_t deadline = segd_mono_ms() + p->cfg->batch_max_ms;
    int64_t taken = 0;
    int rc = 0, fatal = 0;
    while (taken < p->cfg->batch_max_messages && !*p->stop) {
        int64_t left = deadline - segd_mono_ms();
        if (left <= 0)
            break;
        double tp = segd_mono_s();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, (int)left);
        p->st.poll_s += segd_mono_s() - tp;
        if (!m)
            continue;
        if (m->err) {
            /* A fatal error (a static member fenced by another with the same
             * group.instance.id) leaves a consumer that never fetches again:
             * polling on would hang the daemon at its last offset. What was
             * taken so far is applied below; then the step fails, so that
             * segd run exits and a restart joins the group anew. */
            fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && !fatal)
                segd_log(LOG(p), SEGD_LOG_WARN, "pipeline", "consumer: %s",
                         rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            if (fatal)
                break;
            continue;
        }
        if (is_unread(p, rd_kafka_topic_name(m->rkt), m->partition)) {
            rd_kafka_message_destroy(m); /* it restarts from its stored offset */
            continue;
        }
        rc = handle_message(p, m);
        if (rc < 0) /* unapplied: the next poll must return it again */
            rewind_to(p, m);
        rd_kafka_message_destroy(m);
        if (rc < 0)
            break;
        taken++;
    }
    segd_err_t err = flush_batch(p, errstr, n);
    /* also after a failed flush: the error event came once, the state stays */
    if (!err && (fatal || rd_kafka_fatal_error(p->consumer, NULL, 0)))
        return fatal_error(p, errstr, n);
    if (!err)
        commit_resend(p);
    double tl = segd_mono_s();
    refresh_lag(p);
    p->st.upkeep_s += segd_mono_s() - tl;
    /* out of memory: stop before the unapplied message, which comes again */
    if (!err && rc == -2)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return err;
}

/* ---------- assignment ---------- */

/* Hands the partition to the restore hook; 1 when taken (it then waits
 * paused, as an unread partition, until the restore finished). */
static int hand_to_restore(segd_pipeline_t *p, unread_t *u)
{
    char err[256];
    topic_parts_t *t = find_parts(p, u->topic);
    int32_t count = t ? t->count : 0;
    /* a unit routes users by the partition count it was made with */
    if (count <= 0 && segd_pipeline_partitions(p, u->topic, &count, err, sizeof(err))) {
        segd_log(LOG(p), SEGD_LOG_WARN, "pipeline", "%s [%" PRId32 "]: no restore (%s): replaying it",
                 u->topic, u->partition, err);
        return 0;
    }
    if (p->hooks.restore_begin(p->hooks.restore_ctx, u->topic, u->partition, count))
        return 0;
    u->restoring = 1;
    u->logged = 1;
    segd_log(LOG(p), SEGD_LOG_INFO, "pipeline",
             "%s [%" PRId32 "] has no stored offset: restoring it from a snapshot unit "
             "(partition paused)", u->topic, u->partition);
    return 1;
}

/* A partition without a stored offset waits, paused, for the sweep to
 * finish deleting its users if it was half swept (consumer/sweep.h), then
 * for the restore hook, if any. Returns 1 when it waits. */
static int start_restore(segd_pipeline_t *p, const rd_kafka_topic_partition_t *tp)
{
    int purging = segd_sweep_purging(p->sweep, tp->topic, tp->partition);
    if ((!p->hooks.restore_begin && !purging) || is_unread(p, tp->topic, tp->partition))
        return 0;
    unread_t *u = note_unread(p, tp->topic, tp->partition, -1);
    if (!u) {
        if (purging) /* it starts unpaused: the sweep must not touch it now */
            segd_sweep_disable(p->sweep, "more paused partitions than it can track");
        return 0;
    }
    if (purging) {
        u->purging = 1;
        u->logged = 1;
        segd_log(LOG(p), SEGD_LOG_INFO, "pipeline",
                 "%s [%" PRId32 "] came back while the sweep was deleting its users: the rest "
                 "go first (partition paused)", tp->topic, tp->partition);
        return 1;
    }
    if (!hand_to_restore(p, u)) {
        p->nunread--; /* the entry just added is the last one */
        return 0;
    }
    return 1;
}

/* Where a partition assigned paused "starts" until its seek. A concrete
 * offset, never a logical one: librdkafka (2.0.2) answers a seek made while
 * the lookup of a logical offset is in flight by taking the late, outdated
 * lookup reply as a reason to query again, and then fetches from the
 * logical offset, not the seek's. With END, a restored partition resumed
 * at its unit's offset skipped what came between that offset and the end
 * (found by tests/fleet.py). Nothing is fetched here before the seek. */
#define PAUSED_START 0

/* Starting offsets come from the store, in the assign call itself. Only
 * "no offset stored" means input.offset.reset; a partition whose offset
 * cannot be read starts paused and is retried (retry_unread). */
static void set_start_offsets(segd_pipeline_t *p, rd_kafka_topic_partition_list_t *parts)
{
    char err[256];
    for (int i = 0; i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t next;
        segd_sweep_owned(p->sweep, tp->topic, tp->partition, 1, segd_mono_ms());
        /* half swept: whatever offset it has (offsets set --force) waits too */
        segd_err_t e = segd_sweep_purging(p->sweep, tp->topic, tp->partition)
                           ? SEGD_ERR_NOTFOUND
                           : segd_store_offset_get(p->store, tp->topic, tp->partition, &next,
                                                   err, sizeof(err));
        if (e == SEGD_OK) {
            tp->offset = next;
        } else if (e == SEGD_ERR_NOTFOUND && start_restore(p, tp)) {
            tp->offset = PAUSED_START; /* paused; seeked before it resumes */
        } else if (e == SEGD_ERR_NOTFOUND) {
            tp->offset = reset_offset(p);
        } else {
            segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
                     "waiting: %s [%" PRId32 "]: stored offset unreadable: %s "
                     "(partition paused, retrying)", tp->topic, tp->partition, err);
            unread_t *u = note_unread(p, tp->topic, tp->partition, -1);
            if (u)
                u->logged = 1;
            /* never fetched: seeked before resuming; with no room to track it
             * (over MAX_POSITIONS partitions) it stays at its stored offset's
             * fallback, never at the end */
            tp->offset = u ? PAUSED_START : RD_KAFKA_OFFSET_STORED;
        }
        segd_lag_start(p->lag, tp->topic, tp->partition, tp->offset);
    }
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    segd_pipeline_t *p = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    rd_kafka_error_t *e = NULL;
    char msg[256];
    p->rebalanced = 1;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        const char *proto = coop ? "cooperative" : "eager";
        if (!p->st.assigned_s) { /* the group join, timed once */
            p->st.assigned_s = segd_mono_s();
            segd_log_kv(LOG(p), SEGD_LOG_INFO, "pipeline", "partitions assigned",
                        "count=%d protocol=%s join_s=%.3f", parts->cnt, proto,
                        p->st.assigned_s - p->st.created_s);
        } else {
            segd_log_kv(LOG(p), SEGD_LOG_INFO, "pipeline", "partitions assigned",
                        "count=%d protocol=%s", parts->cnt, proto);
        }
        segd_lag_assigned(p->lag);
        /* The store's offsets of every assigned partition go to the group at
         * once, to the new generation: a refused commit is sent again, and a
         * partition whose stored offset is already at its end (a restart
         * after a SIGKILL that came between write and commit) would
         * otherwise never be committed, since commits follow batches. */
        p->commit_failed = 1;
        p->commit_retry_ms = 0;
        p->lag_next_ms = 0; /* the new partitions' lag at the end of this step */
        set_start_offsets(p, parts);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        pause_or_resume(p, parts);
    } else {
        segd_log_kv(LOG(p), SEGD_LOG_INFO, "pipeline", "partitions revoked", "count=%d",
                    parts->cnt);
        /* write what was read from these partitions while they are ours */
        if (flush_batch(p, msg, sizeof(msg)) != SEGD_OK)
            segd_log(LOG(p), SEGD_LOG_ERROR, "pipeline", "batch not written before revoke: %s", msg);
        forget_unread(p, parts);
        rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (coop)
            e = rd_kafka_incremental_unassign(rk, parts);
        else
            kerr = rd_kafka_assign(rk, NULL);
        /* still assigned after a failed unassign: not revoked for the sweep */
        for (int i = 0; !e && !kerr && i < parts->cnt; i++)
            segd_sweep_owned(p->sweep, parts->elems[i].topic, parts->elems[i].partition, 0,
                             segd_mono_ms());
    }
    if (e) {
        segd_log(LOG(p), SEGD_LOG_ERROR, "pipeline", "rebalance: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

/* ---------- construction ---------- */

/* Static membership (KIP-345): a restarted member with the same
 * group.instance.id takes its old place at once instead of waiting for the
 * group to time the old one out. The id is the store's (one store, one
 * member) with its input topics' digest (static_member.h: other topics, a
 * new member); group.instance.id overrides it, and an empty value turns
 * static membership off. */
static segd_err_t instance_id(segd_pipeline_t *p, char *out, size_t size, char *errstr,
                              size_t n)
{
    if (p->cfg->group_instance_id) {
        snprintf(out, size, "%s", p->cfg->group_instance_id);
        return SEGD_OK;
    }
    char store_id[128];
    segd_err_t err = segd_store_instance_id(p->store, store_id, sizeof(store_id), errstr, n);
    return err ? err
               : segd_static_member_id(store_id, p->cfg->topics, p->cfg->n_topics, out, size,
                                       errstr, n);
}

/* memory.limit.mb's fetch share as librdkafka settings (the operator's
 * kafka.* settings, applied after, win); librdkafka refuses a fetch.max.bytes
 * below message.max.bytes, so an operator's larger message.max.bytes raises it. */
static void fetch_sizes(const segd_config_t *cfg, char queued[24], char fetch[24],
                        char partition[24])
{
    int64_t fetch_max = cfg->memory.fetch_max_bytes;
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (!strcmp(cfg->kafka[i].key, "message.max.bytes")) {
            long long v = strtoll(cfg->kafka[i].value, NULL, 10);
            if (v > fetch_max)
                fetch_max = v;
        }
    snprintf(queued, 24, "%" PRId64, cfg->memory.fetch_queue_kb);
    snprintf(fetch, 24, "%" PRId64, fetch_max);
    snprintf(partition, 24, "%" PRId64, cfg->memory.partition_fetch_bytes);
}

/* The group consumer, a static member when static_id is not empty, with a
 * short session timeout on librdkafka's mock (mock_brokers). Its names
 * (client_id, static_id) and session timeout are defaults: the operator's
 * kafka.* settings, applied after, win. */
static segd_err_t new_consumer(segd_pipeline_t *p, const char *client_id,
                               const char *static_id, int mock, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    char queued[24], fetch[24], partition[24], timeout[24];
    fetch_sizes(cfg, queued, fetch, partition);
    const char *const defaults[] = {
        "bootstrap.servers", cfg->brokers, "enable.auto.commit", "false",
        "enable.auto.offset.store", "false", "partition.assignment.strategy",
        "cooperative-sticky", "enable.partition.eof", "false", "group.id", cfg->group,
        "auto.offset.reset", cfg->offset_reset, "queued.max.messages.kbytes", queued,
        "fetch.max.bytes", fetch, "max.partition.fetch.bytes", partition,
        "client.id", client_id,
        /* the mock holds every rebalance for session.timeout.ms less 1 s */
        "session.timeout.ms", mock ? MOCK_SESSION_TIMEOUT_MS : "45000",
        static_id[0] ? "group.instance.id" : NULL, static_id, NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "consumer", defaults, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++) /* the operator's settings win */
        err = segd_kconf_set(conf, "consumer", cfg->kafka[i].key, cfg->kafka[i].value, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    size_t len = sizeof(timeout);
    p->session_timeout_ms = rd_kafka_conf_get(conf, "session.timeout.ms", timeout, &len) ==
                                    RD_KAFKA_CONF_OK
                                ? strtoll(timeout, NULL, 10)
                                : 0;
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, p);
    p->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf));
    if (!p->consumer) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "consumer: %s", errbuf);
    }
    rd_kafka_poll_set_consumer(p->consumer);
    return SEGD_OK;
}

/* librdkafka's mock cluster (`segd dev-broker`, and the brokers of tests)
 * names itself "mockCluster<hex>". In 2.0.2 it ignores group.instance.id
 * (a static member that stops does not leave; its restart is a new member
 * to the mock, and the old one stays until its session times out), and it
 * holds every rebalance of a group that has members for session.timeout.ms
 * less 1 s (rd_kafka_mock_cgrp_rebalance), a restart included: with the
 * default 45 s, 44 s of /readyz "unassigned". Brokers that do not answer
 * within the wait are taken for real ones. */
static int mock_brokers(rd_kafka_t *rk)
{
    char *id = rd_kafka_clusterid(rk, CLUSTER_ID_WAIT_MS);
    int mock = id && !strncmp(id, "mockCluster", strlen("mockCluster"));
    if (id)
        rd_kafka_mem_free(rk, id);
    return mock;
}

static segd_err_t make_consumer(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    char member[256], client_id[256];
    segd_err_t err = instance_id(p, member, sizeof(member), errstr, n);
    /* the name `segd owner` gives the member: its store's instance id (DESIGN
     * §7), static membership or not */
    char why[256];
    if (err || segd_store_instance_id(p->store, client_id, sizeof(client_id), why, sizeof(why)))
        snprintf(client_id, sizeof(client_id), "segd");
    if (!err)
        err = new_consumer(p, client_id, member, 0, errstr, n);
    if (!err && mock_brokers(p->consumer)) {
        rd_kafka_destroy(p->consumer); /* never subscribed: nothing to leave */
        p->consumer = NULL;
        member[0] = 0;
        err = new_consumer(p, client_id, member, 1, errstr, n);
        if (!err)
            segd_log(LOG(p), SEGD_LOG_INFO, "pipeline",
                     "the brokers are librdkafka's mock cluster (segd dev-broker): it "
                     "ignores group.instance.id, so static membership is off and this member "
                     "leaves the group when it stops, and it holds every rebalance for "
                     "session.timeout.ms less 1 s, so session.timeout.ms is %" PRId64
                     " ms (default " MOCK_SESSION_TIMEOUT_MS " here, 45000 on Kafka): a join "
                     "or restart waits that long", p->session_timeout_ms);
    }
    if (err)
        return err;
    char client[256];
    size_t client_len = sizeof(client);
    if (rd_kafka_conf_get(rd_kafka_conf(p->consumer), "client.id", client, &client_len) !=
        RD_KAFKA_CONF_OK)
        snprintf(client, sizeof(client), "?");
    /* the names `segd owner` and the brokers' group tools show for this member */
    segd_log_kv(LOG(p), SEGD_LOG_INFO, "pipeline", "group member",
                "group=%s client_id=%s group_instance_id=%s session_timeout_ms=%" PRId64,
                cfg->group, client, member[0] ? member : "(none)", p->session_timeout_ms);
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int)cfg->n_topics);
    for (size_t i = 0; i < cfg->n_topics; i++)
        rd_kafka_topic_partition_list_add(topics, cfg->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t kerr = rd_kafka_subscribe(p->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "subscribe: %s", rd_kafka_err2str(kerr))
                : SEGD_OK;
}

void segd_pipeline_set_hooks(segd_pipeline_t *p, const segd_pipeline_hooks_t *h)
{
    p->hooks = *h;
}

static int restoring(void *ctx, const char *topic, int32_t partition)
{
    segd_pipeline_t *p = ctx;
    return p->hooks.restore_state &&
           p->hooks.restore_state(p->hooks.restore_ctx, topic, partition) ==
               SEGD_PIPELINE_RESTORING;
}

/* Always made, so that marks a run left are finished even with
 * sweep.after.s = 0. New sweeps need restore.from: a swept partition
 * that comes back has no offset, and a replay of its history would be
 * refused as too_late once the store's GC watermark has started. And one
 * input topic: a record joins a user's data of every topic, which a unit
 * of one topic's partition cannot split (DESIGN §7). */
static segd_err_t new_sweep(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    int on = cfg->restore_from && cfg->n_topics == 1;
    segd_sweep_opts_t so = {.after_ms = on ? cfg->sweep_after_s * 1000 : 0,
                            .records_per_s = cfg->sweep_records_per_s,
                            .partitioner = cfg->partitioner,
                            .n_topics = cfg->n_topics,
                            .restoring = restoring,
                            .restoring_ctx = p,
                            .log = cfg->log};
    return segd_sweep_new(&p->sweep, p->store, &so, segd_mono_ms(), errstr, n);
}

static const double batch_bounds[] = {1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000};

void segd_pipeline_set_metrics(segd_pipeline_t *p, segd_metrics_t *m)
{
    pipeline_metrics_t *x = &p->mx;
    x->consumed = segd_metrics_counter(m, "segd_consumed_messages_total",
        "Input messages consumed (good and dead-lettered), counted when their batch is written.",
        "topic,partition");
    x->events = segd_metrics_counter(m, "segd_applied_events_total",
        "Events applied to the store.", "topic,partition");
    x->segments = segd_metrics_counter(m, "segd_applied_segments_total",
        "Segment updates applied to the store.", "topic,partition");
    x->dlq = segd_metrics_counter(m, "segd_dlq_messages_total",
        "Messages sent to the dead-letter topic, by reason.", "reason");
    x->misrouted = segd_metrics_counter(m, "segd_misrouted_events_total",
        "Applied events found in another partition than input.partitioner gives.", NULL);
    x->batches = segd_metrics_counter(m, "segd_batches_total", "Batches written.", NULL);
    x->fault_waits = segd_metrics_counter(m, "segd_fault_waits_total",
        "Waits on a store, registry or broker fault, or on the change stream.", NULL);
    x->batch_messages = segd_metrics_histogram(m, "segd_batch_messages",
        "Messages per written batch.", NULL, batch_bounds,
        sizeof(batch_bounds) / sizeof(batch_bounds[0]));
    x->apply_seconds = segd_metrics_histogram(m, "segd_batch_apply_seconds",
        "Time to write a batch (merges, offsets, outbox entry) to the store, fault waits "
        "included.", NULL, segd_metric_latency_buckets, segd_metric_latency_nbuckets);
    x->lag = segd_metrics_gauge(m, "segd_consumer_lag_messages",
        "High watermark less the next offset to apply, per assigned partition.",
        "topic,partition");
    x->assigned = segd_metrics_gauge(m, "segd_assigned_partitions",
        "Input partitions assigned to this member.", NULL);
    x->swept_users = segd_metrics_counter(m, "segd_sweep_users_deleted_total",
        "Users of partitions revoked for sweep.after.s deleted by the revocation sweep.", NULL);
    x->swept_examined = segd_metrics_counter(m, "segd_sweep_records_examined_total",
        "Records the revocation sweep examined.", NULL);
    x->swept_partitions = segd_metrics_counter(m, "segd_sweep_partitions_total",
        "Partitions whose sweep pass ended (users and offset gone).", NULL);
    x->link_events = segd_metrics_counter(m, "segd_identity_link_events_total",
        "Link events taken from the links topic, by result: applied, supernode (refused by "
        "the guard) or dead_lettered (malformed or invalid).", "result");
    x->member_changes = segd_metrics_counter(m, "segd_identity_member_changes_total",
        "Identity membership changes written to the outbox (MemberEvents to publish).", NULL);
    x->sweep_off = segd_metrics_gauge(m, "segd_sweep_disabled",
        "1 when this store refuses to sweep (misrouted or unchecked events, or a partition "
        "it could not track).", NULL);
}

segd_err_t segd_pipeline_lags(segd_pipeline_t *p, segd_partition_lag_t **out, size_t *n,
                              int *assigned, int64_t *age_ms)
{
    *age_ms = segd_lag_age_ms(p->lag);
    return segd_lag_get(p->lag, out, n, assigned);
}

/* Every topic segd run reads or dead-letters to must exist before the
 * group is joined (DESIGN §7.2). Asked through the dead-letter producer,
 * whose metadata requests let brokers that auto-create topics (the dev
 * broker) create them; where brokers do not (production Kafka), a missing
 * topic stops segd run at start, named, with nothing consumed. Brokers
 * that do not answer are not a reason to refuse: ingest waits for them. */
static segd_err_t check_topics(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    rd_kafka_t *rk = segd_dlq_producer(p->dlq);
    char why[512];
    int32_t count;
    for (size_t i = 0; rk && i <= cfg->n_topics; i++) {
        const char *topic = i < cfg->n_topics ? cfg->topics[i] : cfg->dlq_topic;
        if (!topic || !*topic)
            continue;
        segd_err_t err = segd_kmeta_partitions_wait(rk, topic, TOPIC_WAIT_MS, &count, why,
                                                    sizeof(why));
        if (err == SEGD_ERR_NOTFOUND)
            return segd_errf(err, errstr, n, "%s topic %s%s does not exist and the brokers "
                             "did not create it (automatic topic creation off): create it "
                             "before starting segd run", i < cfg->n_topics ? "input" : "dead-letter",
                             topic, i < cfg->n_topics ? "" : " (dlq.topic)");
        if (err) { /* unreachable: the consumer and the DLQ's deliveries wait for them */
            segd_log(LOG(p), SEGD_LOG_WARN, "pipeline", "topics not checked at start: %s", why);
            return SEGD_OK;
        }
    }
    return SEGD_OK;
}

segd_err_t segd_pipeline_new(segd_pipeline_t **out, const segd_config_t *cfg,
                             segd_store_t *store, volatile sig_atomic_t *stop, char *errstr,
                             size_t n)
{
    segd_pipeline_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->cfg = cfg;
    p->store = store;
    p->stop = stop;
    p->bo.log = cfg->log;
    p->st.created_s = segd_mono_s();
    p->lag = segd_lag_new();
    segd_err_t err = p->lag ? segd_applier_init(&p->ap, store) : SEGD_ERR_NOMEM;
    if (!err)
        err = segd_ingest_new(&p->ingest, cfg, store, stop, &p->bo, errstr, n);
    if (!err)
        err = segd_dlq_new_topic(&p->dlq, cfg, stop, &p->bo, errstr, n);
    if (!err)
        err = segd_store_counter_get(store, SEGD_COUNTER_MISROUTED, &p->misrouted_stored, errstr, n);
    if (!err)
        err = segd_store_counter_get(store, SEGD_COUNTER_UNCHECKED, &p->unchecked_stored, errstr,
                                     n);
    if (!err)
        err = new_sweep(p, errstr, n);
    if (!err && cfg->changes_enable) /* every batch records its changes (DESIGN §5) */
        segd_applier_enable_outbox(&p->ap);
    if (!err)
        err = check_topics(p, errstr, n);
    if (!err)
        err = make_consumer(p, errstr, n);
    if (!err && cfg->identity_enable)
        err = segd_links_new(&p->links, cfg, store, stop, &p->bo, errstr, n);
    if (err) {
        segd_pipeline_destroy(p);
        return err;
    }
    *out = p;
    return SEGD_OK;
}

segd_err_t segd_pipeline_run(segd_pipeline_t *p, char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    while (!*p->stop && !err)
        err = segd_pipeline_step(p, errstr, n);
    return err;
}

void segd_pipeline_get_stats(const segd_pipeline_t *p, segd_pipeline_stats_t *st)
{
    *st = p->st;
    st->retries = p->bo.retries;
    if (p->sweep)
        segd_sweep_get_stats(p->sweep, &st->sweep);
}

int segd_pipeline_assigned(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (!p->consumer || rd_kafka_assignment(p->consumer, &parts))
        return -1;
    int n = parts->cnt;
    rd_kafka_topic_partition_list_destroy(parts);
    return n;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

segd_err_t segd_pipeline_assignment(segd_pipeline_t *p, const char *topic, int32_t **parts,
                                    size_t *n_parts, int32_t *partition_count,
                                    char *errstr, size_t n)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    *parts = NULL;
    *n_parts = 0;
    if (!p->consumer || rd_kafka_assignment(p->consumer, &l))
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
        err = segd_kmeta_partitions(p->consumer, topic, 10000, partition_count, errstr, n);
    if (err || !*n_parts) {
        free(*parts);
        *parts = NULL;
    }
    return err;
}

static int joined(segd_pipeline_t *p)
{
    char *member = rd_kafka_memberid(p->consumer);
    int yes = member && *member;
    if (member)
        rd_kafka_mem_free(p->consumer, member);
    return yes;
}

/* The workaround for upstream #4312 (see FIRST_ASSIGNMENT_WAIT_MS): a
 * member that has joined (has a member id) but has had no rebalance
 * callback polls, bounded, until the group assigns it something. Nothing
 * polled here is applied or stored: the partitions are read again later.
 * Returns 1 when the member is still joined and unassigned: destroying
 * the consumer would then abort the process. */
static int await_first_assignment(segd_pipeline_t *p)
{
    int64_t deadline = segd_mono_ms() + FIRST_ASSIGNMENT_WAIT_MS;
    while (!p->rebalanced && joined(p) && segd_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, 100);
        if (m)
            rd_kafka_message_destroy(m);
    }
    return !p->rebalanced && joined(p);
}

/* Closing a consumer that had a fatal error: the taken batch is written,
 * and the handle is left to process exit like a never-assigned one. */
static void close_fatal(segd_pipeline_t *p)
{
    char err[256];
    if (flush_batch(p, err, sizeof(err)) != SEGD_OK)
        segd_log(LOG(p), SEGD_LOG_ERROR, "pipeline", "last batch not written: %s", err);
    segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
             "closing after a fatal consumer error: the consumer handle is left to "
             "process exit (librdkafka 2.0.2 would never finish destroying it)");
    rd_kafka_set_log_level(p->consumer, -1);
    p->consumer = NULL;
    if (p->dlq)
        segd_dlq_close(p->dlq);
}

void segd_pipeline_close(segd_pipeline_t *p)
{
    char err[256];
    if (p->consumer) {
        /* after a fatal error (a fenced static member) librdkafka 2.0.2's
         * close and destroy never return (its main thread spins): the group
         * has already dropped this member, so there is nothing to leave */
        if (rd_kafka_fatal_error(p->consumer, NULL, 0))
            return close_fatal(p);
        int unassigned = await_first_assignment(p);
        rd_kafka_consumer_close(p->consumer); /* revokes: the batch is written */
        if (flush_batch(p, err, sizeof(err)) != SEGD_OK)
            segd_log(LOG(p), SEGD_LOG_ERROR, "pipeline", "last batch not written: %s", err);
        if (unassigned) { /* the last resort: a leak instead of an abort */
            segd_log(LOG(p), SEGD_LOG_WARN, "pipeline",
                     "closing before the group's first assignment: the consumer "
                     "handle is left to process exit (librdkafka 2.0.2 would abort)");
            /* its threads live on, and their log_cb would reach p (freed by
             * destroy) and the logger: below every level, nothing is logged */
            rd_kafka_set_log_level(p->consumer, -1);
        } else
            rd_kafka_destroy(p->consumer);
        p->consumer = NULL;
    }
    if (p->dlq)
        segd_dlq_close(p->dlq);
}

void segd_pipeline_destroy(segd_pipeline_t *p)
{
    if (!p)
        return;
    segd_pipeline_close(p);
    segd_links_destroy(p->links);
    segd_dlq_destroy(p->dlq);
    segd_sweep_destroy(p->sweep);
    segd_ingest_destroy(p->ingest);
    segd_applier_free(&p->ap);
    segd_lag_destroy(p->lag);
    free(p);
}

segd_links_t *segd_pipeline_links(segd_pipeline_t *p) { return p->links; }
