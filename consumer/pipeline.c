/* The pipeline's lifecycle and its step: new (store counters, sweep, dead
 * letters, message checks, the group consumer), one step (upkeep, the hold
 * behind the change stream, the links topic, one batch taken and written,
 * a resend of refused commits, the lag), and close, which writes the last
 * batch and leaves the group. The rest of the pipeline lives in
 * consumer/pipeline_*.c around the state in consumer/pipeline_int.h; see
 * consumer/pipeline.h for the contract. */
#include "consumer/pipeline_int.h"

#include <string.h>

#include <inttypes.h>
#include <stdlib.h>

#include "base/clock.h"
#include "consumer/lag.h"
#include "consumer/sweep.h"
#include "transport/kmeta.h"

/* librdkafka 2.0.2's cooperative-sticky assignor aborts in rd_kafka_destroy
 * when a member that joined stops before its first assignment (upstream
 * #4312, fixed in 2.3.0): close waits up to this long for it. */
#define FIRST_ASSIGNMENT_WAIT_MS 30000
/* A member with no assignment this long after it subscribed says why it
 * may wait (log_unassigned): a normal join takes a few seconds, the group's
 * initial rebalance delay (3 s on Kafka) included. */
#define UNASSIGNED_NOTE_MS 8000

/* W's history phase begins once the store was found caught up at this many
 * upkeeps in a row (10 s apart, so for 20 s at least): a consumer briefly at
 * the end of a topic still being filled with history is not the end of it. */
#define HISTORY_SETTLE_UPKEEPS 3

/* Where the store will read a partition next: the consumer's position, or
 * the store's offset when nothing was consumed from it since the assignment
 * (an idle partition of a rebuilt or restarted store has no position). */
static int64_t next_offset(segd_pipeline_t *p, const rd_kafka_topic_partition_t *tp)
{
    char err[256];
    int64_t stored = -1;
    if (segd_store_offset_get(p->store, tp->topic, tp->partition, &stored, err, sizeof(err)))
        stored = -1;
    return tp->offset > stored ? tp->offset : stored;
}

/* Whether tp's topic was ever written: some assigned partition of it has
 * (rd_kafka_topic_partition_t.opaque marks them in caught_up), or, when this
 * member holds only empty ones, some other partition has, as the brokers
 * say. A broker that cannot answer leaves the topic unwritten, which keeps
 * W's history phase: the safe side. */
static int topic_written(segd_pipeline_t *p, rd_kafka_topic_partition_list_t *parts,
                         const char *topic)
{
    for (int i = 0; i < parts->cnt; i++)
        if (parts->elems[i].opaque && !strcmp(parts->elems[i].topic, topic))
            return 1;
    char err[256];
    int written = 0;
    if (segd_kmeta_topic_written(p->consumer, topic, 500, &written, err, sizeof(err)))
        segd_log(pipeline_log(p), SEGD_LOG_DEBUG, "store",
                 "history phase: cannot tell whether %s was written: %s", topic, err);
    /* marked, so the topic's other partitions in parts ask no broker again */
    for (int i = 0; written && i < parts->cnt; i++)
        if (!strcmp(parts->elems[i].topic, topic))
            parts->elems[i].opaque = &parts->elems[i];
    return written;
}

/* Whether the store has caught up with its input's history: every assigned
 * partition that holds messages read to within a few batches of the end
 * offset librdkafka last saw (cached, no broker round trip; under steady load
 * the position never sits exactly at the end), and every assigned topic
 * written to at some time. Empty partitions of a written topic do not block,
 * nor does a topic that retention emptied or of which this member holds only
 * empty partitions (they have no history left to read; review of issue 29:
 * such a member never began W). A topic never written does: a member on
 * empty topics has no history yet, and took it for caught up (issue 29:
 * history produced later was then refused as too late), and a topic of live
 * traffic beside an empty one meant for the DMP's history load is no end of
 * history either. */
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
        tp->opaque = NULL;
        ok = !rd_kafka_get_watermark_offsets(p->consumer, tp->topic, tp->partition, &lo, &hi) &&
             hi >= 0;
        if (ok && hi > 0)
            tp->opaque = tp; /* written to */
        if (!ok || hi == lo)
            continue;
        int64_t next = next_offset(p, tp);
        /* Nothing consumed from it and no offset stored: with
         * input.offset.reset = latest the store skips its history on
         * purpose, so there is none to wait for (it would block W for good) */
        if (next < 0 && p->cfg->offset_reset && !strcmp(p->cfg->offset_reset, "latest"))
            continue;
        ok = next >= 0 && hi - next <= slack;
    }
    for (int i = 0; ok && i < parts->cnt; i++)
        ok = topic_written(p, parts, parts->elems[i].topic);
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
    /* the batch the writer has was checked under the W of now; W stays
     * while a batch whose write failed is held */
    if (segd_pipeline_batch_settle(p))
        return;
    p->gc_next_ms = segd_mono_ms() + 10000;
    int history = segd_policy_ts_floor(segd_store_policy(p->store)) == 0;
    p->caught_up_streak = history && caught_up(p) ? p->caught_up_streak + 1 : 0;
    int flags = p->caught_up_streak >= HISTORY_SETTLE_UPKEEPS ? SEGD_GC_CAUGHT_UP : 0;
    if (segd_store_gc_advance(p->store, flags, err, sizeof(err)) != SEGD_OK)
        segd_log(pipeline_log(p), SEGD_LOG_WARN, "store", "GC watermark not advanced: %s", err);
    /* RocksDB only looks for files due for periodic compaction after a flush
     * or compaction: on a quiet store an operand would stay in the memtable,
     * unmerged, for ever. An hourly flush keeps the grace bound (§3.1). */
    if (segd_mono_ms() >= p->flush_next_ms) {
        p->flush_next_ms = segd_mono_ms() + 3600 * 1000;
        if (segd_store_flush(p->store, err, sizeof(err)) != SEGD_OK)
            segd_log(pipeline_log(p), SEGD_LOG_WARN, "store", "flush: %s", err);
    }
}

static int joined(segd_pipeline_t *p)
{
    char *member = rd_kafka_memberid(p->consumer);
    int yes = member && *member;
    if (member)
        rd_kafka_mem_free(p->consumer, member);
    return yes;
}

/* While the group has given this member nothing, /readyz says "unassigned", and
 * this log line (once per run) says why that can last. Not while no broker
 * answers: that is the reason then, said by pipeline_brokers.c. The coordinator hands out
 * partitions only once every member it knows has rejoined or timed out. A member
 * that stopped without leaving the group (killed, or a static member's earlier
 * run on brokers without static membership) is waited for up to its session
 * timeout. */
static void log_unassigned(segd_pipeline_t *p)
{
    if (p->rebalanced || p->unassigned_logged || segd_pipeline_brokers_are_down(p) ||
        segd_mono_s() - p->subscribed_s < UNASSIGNED_NOTE_MS / 1000.0)
        return;
    p->unassigned_logged = 1;
    segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
             "waiting for the group's assignment (%.1f s so far, %s): the coordinator "
             "assigns once every member it knows has rejoined or timed out, and a member "
             "that stopped without leaving the group (killed) is waited for up to its "
             "session timeout (this member's session.timeout.ms is %" PRId64 " ms)",
             segd_mono_s() - p->subscribed_s, joined(p) ? "joined" : "not joined yet",
             p->session_timeout_ms);
}

/* The links topic's share of this step (identity.enable, DESIGN §10). */
static segd_err_t step_links(segd_pipeline_t *p, char *errstr, size_t n)
{
    segd_links_stats_t before, after;
    segd_links_get_stats(p->links, &before);
    segd_err_t err = segd_links_step(p->links, 0, errstr, n);
    if (err)
        return err;
    segd_links_get_stats(p->links, &after);
    segd_pipeline_metrics_links(p, &before, &after);
    if (after.member_changes != before.member_changes && p->hooks.committed)
        p->hooks.committed(p->hooks.ctx); /* the outbox has MemberEvents to publish */
    return SEGD_OK;
}

/* Whether the upkeep about to run reads what the write of the batch the
 * writer thread has changes, so that it must be drained first: stored
 * offsets of partitions waiting for theirs, users the sweep deletes, the
 * identity graph the links step changes, and the outbox depth when one
 * more entry could put it over changes.max.outbox (the hold is then exact
 * to the batch, as without the writer). W is advance_gc's own. */
static int upkeep_needs_drain(segd_pipeline_t *p)
{
    if (!p->wheld)
        return 0;
    if (p->nunread || p->links || (p->sweep && segd_sweep_active(p->sweep)))
        return 1;
    return p->hooks.backlog && p->cfg->changes_max_outbox > 0 &&
           p->hooks.backlog(p->hooks.ctx) + 1 > (uint64_t)p->cfg->changes_max_outbox;
}

segd_err_t segd_pipeline_step(segd_pipeline_t *p, char *errstr, size_t n)
{
    if (!p->consumer) /* a rebuild that could not subscribe already said why */
        return segd_errf(SEGD_ERR_KAFKA, errstr, n,
                         "consumer: none (it was not rebuilt after a fatal error)");
    double t0 = segd_mono_s();
    segd_pipeline_brokers_step(p);
    log_unassigned(p);
    advance_gc(p);
    /* a held batch whose write failed: what reads its effects waits for the
     * flush below to retry it */
    int held_failed = upkeep_needs_drain(p) && segd_pipeline_batch_settle(p);
    if (!held_failed) {
        segd_pipeline_unread_retry(p);
        segd_pipeline_sweep_step(p);
    }
    double t1 = segd_mono_s();
    segd_pipeline_wait_for_publisher(p);
    p->st.upkeep_s += t1 - t0;
    p->st.hold_s += segd_mono_s() - t1;
    segd_err_t err = p->links && !held_failed ? step_links(p, errstr, n) : SEGD_OK;
    if (err)
        return err;
    int fatal;
    int rc = segd_pipeline_batch_take(p, &fatal);
    err = segd_pipeline_batch_flush(p, errstr, n);
    int failing = fatal || rd_kafka_fatal_error(p->consumer, NULL, 0) || p->refused[0];
    /* the step is about to fail, or the consumer to be rebuilt: nothing
     * stays in the writer's hands */
    if (!err && failing)
        err = segd_pipeline_batch_drain(p, errstr, n);
    /* This is checked even after a failed flush, because the fatal error event
     * came only once while the consumer's fatal state stays. The batch is
     * written first: its data and offsets are exact whoever owns the
     * partitions next, as on a lost assignment. */
    if (!err && (fatal || rd_kafka_fatal_error(p->consumer, NULL, 0)))
        return segd_pipeline_rebuild(p, errstr, n);
    if (!err && p->refused[0]) /* error_cb: credentials or certificate refused */
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "%s", p->refused);
    if (!err) {
        segd_pipeline_commit_written(p, 0); /* a quiet step sends what the interval held */
        segd_pipeline_commit_resend(p);
    }
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

/* The writer thread's word that a batch is stored (hooks set before the
 * first step, so before the first batch reaches the writer). */
static void writer_written(void *ctx)
{
    segd_pipeline_t *p = ctx;
    if (p->hooks.committed)
        p->hooks.committed(p->hooks.ctx);
}

/* The two batches: one built while the writer thread writes the other. */
static segd_err_t appliers_init(segd_pipeline_t *p, char *errstr, size_t n)
{
    p->ap = &p->apv[0];
    p->wap = &p->apv[1];
    segd_err_t err = segd_applier_init(p->ap, p->store);
    if (!err)
        err = segd_applier_init(p->wap, p->store);
    if (!err && p->cfg->changes_enable) { /* every batch records its changes (DESIGN §5) */
        segd_applier_enable_outbox(p->ap);
        segd_applier_enable_outbox(p->wap);
    }
    if (!err && p->cfg->writer_thread)
        return segd_pwriter_new(&p->writer, writer_written, p, errstr, n);
    return err;
}

segd_err_t segd_pipeline_new(segd_pipeline_t **out, const segd_config_t *cfg,
                             segd_store_t *store, volatile sig_atomic_t *stop, char *errstr,
                             size_t n)
{
    segd_pipeline_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    pthread_mutex_init(&p->brokers_mu, NULL);
    pthread_mutex_init(&p->consumer_mu, NULL);
    p->cfg = cfg;
    p->store = store;
    p->stop = stop;
    p->bo.log = cfg->log;
    p->st.created_s = segd_mono_s();
    p->lag = segd_lag_new();
    segd_err_t err = p->lag ? appliers_init(p, errstr, n) : SEGD_ERR_NOMEM;
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

/* Works around upstream #4312 (see FIRST_ASSIGNMENT_WAIT_MS). A member that has
 * joined the group (it has a member id) but has had no rebalance callback yet
 * polls until the group assigns it something, for a bounded time. Nothing polled
 * here is applied or stored, because the partitions are read again later.
 * Returns 1 when the member is still joined and unassigned, since destroying the
 * consumer would then abort the process. */
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

/* Closing a consumer that had a fatal error (a stop came before the step
 * that would rebuild it, or the rebuilds' bound was passed): the taken
 * batch is written, and the handle is left to process exit like a
 * never-assigned one. */
static void close_fatal(segd_pipeline_t *p)
{
    char err[256];
    if (segd_pipeline_batch_flush(p, err, sizeof(err)) != SEGD_OK ||
        segd_pipeline_batch_drain(p, err, sizeof(err)) != SEGD_OK)
        segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline", "last batch not written: %s", err);
    segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
             "closing after a fatal consumer error: the consumer handle is left to "
             "process exit (librdkafka 2.0.2 would never finish destroying it)");
    /* its threads live on and log: the route it keeps outlives p, cut here */
    segd_klog_cut(p->klog);
    p->klog = NULL;
    segd_pipeline_consumer_set(p, NULL);
    if (p->dlq)
        segd_dlq_close(p->dlq);
}

void segd_pipeline_close(segd_pipeline_t *p)
{
    char err[256];
    /* the batch the writer has is written before partitions leave */
    if (segd_pipeline_batch_drain(p, err, sizeof(err)) != SEGD_OK)
        segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline", "batch not written: %s", err);
    if (p->consumer) {
        /* After a fatal error (a fenced static member) librdkafka 2.0.2's close
         * and destroy never return, because its main thread spins. The group has
         * already dropped this member, so there is nothing to leave. */
        if (rd_kafka_fatal_error(p->consumer, NULL, 0))
            return close_fatal(p);
        int unassigned = await_first_assignment(p);
        segd_pipeline_commit_written(p, 1); /* the group's lag shows where this member ended */
        rd_kafka_consumer_close(p->consumer); /* revokes: the batch is written */
        if (segd_pipeline_batch_flush(p, err, sizeof(err)) != SEGD_OK ||
            segd_pipeline_batch_drain(p, err, sizeof(err)) != SEGD_OK)
            segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline",
                     "last batch not written: %s", err);
        if (unassigned) { /* the last resort: a leak instead of an abort */
            segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                     "closing before the group's first assignment: the consumer "
                     "handle is left to process exit (librdkafka 2.0.2 would abort)");
            /* The consumer's threads live on and log, also after p and the
             * logger are gone: the route it keeps is cut, and leaked with it. */
            segd_klog_cut(p->klog);
            p->klog = NULL;
        }
        rd_kafka_t *rk = p->consumer;
        segd_pipeline_consumer_set(p, NULL);
        if (!unassigned)
            rd_kafka_destroy(rk);
    }
    if (p->dlq)
        segd_dlq_close(p->dlq);
}

void segd_pipeline_destroy(segd_pipeline_t *p)
{
    if (!p)
        return;
    segd_pipeline_close(p);
    segd_klog_free(p->klog); /* its consumer is destroyed (or it was never made) */
    segd_links_destroy(p->links);
    segd_dlq_destroy(p->dlq);
    segd_sweep_destroy(p->sweep);
    segd_ingest_destroy(p->ingest);
    segd_pwriter_destroy(p->writer); /* before the batch in its hands is freed */
    segd_applier_free(&p->apv[0]);
    segd_applier_free(&p->apv[1]);
    segd_lag_destroy(p->lag);
    pthread_mutex_destroy(&p->brokers_mu);
    pthread_mutex_destroy(&p->consumer_mu);
    free(p);
}

segd_links_t *segd_pipeline_links(segd_pipeline_t *p) { return p->links; }
