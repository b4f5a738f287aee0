/* Kafka -> store ingest; see pipeline.h. One thread: librdkafka's rebalance
 * callback runs inside consumer_poll on this thread, so it may write the
 * pending batch before partitions leave. */
#define _GNU_SOURCE
#include "consumer/pipeline_int.h"

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
#include "core/partition.h"
#include "transport/kconf.h"
#include "transport/kmeta.h"
#include "base/clock.h"

/* librdkafka 2.0.2's cooperative-sticky assignor aborts in rd_kafka_destroy
 * when a member that joined stops before its first assignment (upstream
 * #4312, fixed in 2.3.0): close waits up to this long for it. */
#define FIRST_ASSIGNMENT_WAIT_MS 30000
#define METADATA_TIMEOUT_MS 5000
/* A member with no assignment this long after it subscribed says why it
 * may wait (log_unassigned): a normal join takes a few seconds, the group's
 * initial rebalance delay (3 s on Kafka) included. */
#define UNASSIGNED_NOTE_MS 8000

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

topic_parts_t *segd_pipeline_parts_find(segd_pipeline_t *p, const char *topic)
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
int32_t segd_pipeline_parts_refresh(segd_pipeline_t *p, const char *topic)
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

/* Whether the producer put this user where input.partitioner says: a
 * partition added to the topic since the count was read is asked for again
 * (the message's own partition proves the count is stale). */
static int misrouted(segd_pipeline_t *p, const rd_kafka_message_t *m, const segd_event_t *ev)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    topic_parts_t *t = segd_pipeline_parts_find(p, topic);
    int32_t count = t && m->partition < t->count ? t->count : segd_pipeline_parts_refresh(p, topic);
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

static int joined(segd_pipeline_t *p);

/* Dead letters first, then data + offsets in one WriteBatch, then the Kafka
 * commit. A failure leaves the batch intact for the next attempt. */
segd_err_t segd_pipeline_batch_flush(segd_pipeline_t *p, char *errstr, size_t n)
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
        segd_pipeline_metrics_batch(p, segd_mono_s() - t0);
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
    segd_pipeline_unread_retry(p);
    segd_pipeline_sweep_step(p);
    double t1 = segd_mono_s();
    segd_pipeline_wait_for_publisher(p);
    p->st.upkeep_s += t1 - t0;
    p->st.hold_s += segd_mono_s() - t1;
    if (p->links) {
        segd_links_stats_t before, after;
        segd_links_get_stats(p->links, &before);
        segd_err_t lerr = segd_links_step(p->links, 0, errstr, n);
        if (lerr)
            return lerr;
        segd_links_get_stats(p->links, &after);
        segd_pipeline_metrics_links(p, &before, &after);
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
        if (segd_pipeline_unread_has(p, rd_kafka_topic_name(m->rkt), m->partition)) {
            rd_kafka_message_destroy(m); /* it restarts from its stored offset */
            continue;
        }
        rc = handle_message(p, m);
        if (rc < 0) /* unapplied: the next poll must return it again */
            segd_pipeline_rewind(p, m);
        rd_kafka_message_destroy(m);
        if (rc < 0)
            break;
        taken++;
    }
    segd_err_t err = segd_pipeline_batch_flush(p, errstr, n);
    /* also after a failed flush: the error event came once, the state stays */
    if (!err && (fatal || rd_kafka_fatal_error(p->consumer, NULL, 0)))
        return fatal_error(p, errstr, n);
    if (!err)
        segd_pipeline_commit_resend(p);
    double tl = segd_mono_s();
    segd_pipeline_metrics_lag(p);
    p->st.upkeep_s += segd_mono_s() - tl;
    /* out of memory: stop before the unapplied message, which comes again */
    if (!err && rc == -2)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return err;
}

/* ---------- construction ---------- */

void segd_pipeline_set_hooks(segd_pipeline_t *p, const segd_pipeline_hooks_t *h)
{
    p->hooks = *h;
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
        err = segd_pipeline_sweep_new(p, errstr, n);
    if (!err && cfg->changes_enable) /* every batch records its changes (DESIGN §5) */
        segd_applier_enable_outbox(&p->ap);
    if (!err)
        err = segd_pipeline_check_topics(p, errstr, n);
    if (!err)
        err = segd_pipeline_subscribe(p, errstr, n);
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
    if (segd_pipeline_batch_flush(p, err, sizeof(err)) != SEGD_OK)
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
        if (segd_pipeline_batch_flush(p, err, sizeof(err)) != SEGD_OK)
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
