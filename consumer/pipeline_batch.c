/* The batch: polling messages into it, checking each (consumer/ingest.h),
 * adding good events to the WriteBatch and bad ones to the dead letters,
 * counting misrouted events against the input's partition counts, and
 * writing it (dead letters first, then data and offsets in one WriteBatch,
 * then the Kafka commit). Ingest's speed is decided here. Runs on the
 * pipeline's thread; with ingest.writer.thread the write itself is handed
 * to consumer/pipeline_writer.c and taken back (drained) before the next
 * one. A batch is also written before partitions are revoked
 * (consumer/pipeline_assign.c) and at close. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/ingest_step.h"
#include "core/partition.h"

/* The entry of (topic, partition) among n positions, or NULL. */
static pipeline_position_t *find_position(pipeline_position_t *pos, size_t n, const char *topic,
                                 int32_t partition)
{
    for (size_t i = 0; i < n; i++)
        if (pos[i].partition == partition && !strcmp(pos[i].topic, topic))
            return &pos[i];
    return NULL;
}

/* events is 0 for a dead letter, 1 for an applied event of segments. */
static void note_position(segd_pipeline_t *p, const char *topic, int32_t partition,
                          int64_t next, uint64_t events, uint64_t segments)
{
    pipeline_position_t *q = find_position(p->pos, p->npos, topic, partition);
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

/* Returns -1 when a stop interrupted a fault wait and -2 when memory ran out;
 * in both cases the message stays unapplied and its offset unwritten. */
static int handle_message(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    char why[256];
    int reason = 0;
    const segd_event_t *ev = NULL;
    if (!p->st.messages++)
        p->st.first_message_s = segd_mono_s();
    segd_ingest_step_times_t t = {0};
    int ok = segd_ingest_step(p->ingest, p->ap, p->dlq, 0, m, &ev, &reason, why, sizeof(why),
                              &t);
    p->st.check_s += t.check_s;
    p->st.build_s += t.build_s;
    if (ok < 0)
        return ok;
    if (ok) {
        p->st.events++;
        p->st.segments += ev->n_segments;
        /* a control event goes to every partition on purpose */
        if (!segd_event_is_control(ev) && misrouted(p, m, ev)) {
            p->st.misrouted++;
            p->misrouted_pending++;
        }
    } else
        p->st.dlq[reason]++;
    note_position(p, rd_kafka_topic_name(m->rkt), m->partition, m->offset + 1, ok ? 1 : 0,
                  ok ? ev->n_segments : 0);
    return 0;
}

/* Polls messages into the batch until batch.max.messages, batch.max.ms, a
 * stop, or, once the batch holds a message, until the consumer has nothing
 * more fetched. Waiting out batch.max.ms for more would add up to that
 * much to every event's latency at light load, while under load the queue
 * is seldom empty and batches fill up anyway. Returns 0, or
 * handle_message's -1 (a stop came during a fault wait) or -2 (out of
 * memory) with that message rewound, unapplied. *fatal is set when the
 * consumer reported a fatal error. */
int segd_pipeline_batch_take(segd_pipeline_t *p, int *fatal)
{
    int64_t deadline = segd_mono_ms() + p->cfg->batch_max_ms;
    int64_t taken = 0;
    int rc = 0;
    *fatal = 0;
    while (taken < p->cfg->batch_max_messages && !*p->stop) {
        int64_t left = deadline - segd_mono_ms();
        if (left <= 0)
            break;
        double tp = segd_mono_s();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, taken ? 0 : (int)left);
        double dt = segd_mono_s() - tp;
        p->st.poll_s += dt;
        if (!m) {
            p->st.poll_idle_s += dt;
            p->st.batches_short += taken > 0;
        }
        if (!m && taken)
            break;
        if (!m)
            continue;
        if (m->err) {
            /* A fatal error (a static member fenced by another with the same
             * group.instance.id, or by librdkafka's own late commit retry)
             * leaves a consumer that never fetches again: polling on would
             * hang the daemon at its last offset. What was taken so far is
             * applied below; then the step rebuilds the consumer
             * (pipeline_rebuild.c). */
            *fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && !*fatal)
                segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline", "consumer: %s",
                         rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            if (*fatal)
                break;
            continue;
        }
        if (segd_pipeline_unread_has(p, rd_kafka_topic_name(m->rkt), m->partition)) {
            rd_kafka_message_destroy(m); /* it restarts from its stored offset */
            continue;
        }
        p->st.fetch_nudges += (uint64_t)segd_fetch_nudge_seen(&p->nudge, p->consumer, m->len);
        rc = handle_message(p, m);
        if (rc < 0) /* unapplied: the next poll must return it again */
            segd_pipeline_rewind(p, m);
        rd_kafka_message_destroy(m);
        if (rc < 0)
            break;
        taken++;
    }
    return rc;
}

/* The batch's misrouted total and the partition counts segd get places
 * users with, in the batch's own WriteBatch. */
static void record_counts(segd_pipeline_t *p)
{
    if (p->misrouted_pending)
        segd_batch_set_counter(p->ap->batch, SEGD_COUNTER_MISROUTED,
                               p->misrouted_stored + p->misrouted_pending);
    if (p->unchecked_pending)
        segd_batch_set_counter(p->ap->batch, SEGD_COUNTER_UNCHECKED,
                               p->unchecked_stored + p->unchecked_pending);
    for (size_t i = 0; i < p->nparts; i++)
        if (p->parts[i].count > 0)
            segd_batch_set_partition_count(p->ap->batch, p->parts[i].topic, p->parts[i].count);
}

/* Keeps a batch's offsets, now written, for the next commit to the group. */
static void note_written(segd_pipeline_t *p, const pipeline_position_t *pos, size_t npos)
{
    for (size_t i = 0; i < npos; i++) {
        const pipeline_position_t *b = &pos[i];
        pipeline_position_t *w = find_position(p->written, p->nwritten, b->topic, b->partition);
        if (!w && p->nwritten == MAX_POSITIONS)
            segd_pipeline_commit_written(p, 1); /* no room: what is kept goes now (and
                                                  * leaves the list empty) */
        if (!w) {
            w = &p->written[p->nwritten++];
            *w = *b;
        }
        if (b->next > w->next)
            w->next = b->next;
    }
}

/* The pending batch's positions of revoked partitions are dropped, whether
 * its write before the revoke failed or not: kept, the next write would note
 * them as written and the next commit would send them to the group, over
 * what the partition's new owner commits. Their events stay in the
 * WriteBatch (with their offsets when a write was tried) and reach this
 * member's store with its next write, data and offset together as always;
 * without the offset they are applied again should the partition come
 * back, which changes nothing (DESIGN §3). */
static void forget_positions(pipeline_position_t *pos, size_t *npos,
                             const rd_kafka_topic_partition_list_t *parts)
{
    for (size_t i = 0; i < *npos;) {
        if (rd_kafka_topic_partition_list_find(parts, pos[i].topic, pos[i].partition))
            pos[i] = pos[--*npos];
        else
            i++;
    }
}

/* The same holds for the batch the writer thread could not write. */
void segd_pipeline_batch_forget(segd_pipeline_t *p, const rd_kafka_topic_partition_list_t *parts)
{
    forget_positions(p->pos, &p->npos, parts);
    if (p->wheld)
        forget_positions(p->wpos, &p->nwpos, parts);
}

/* Commits the offsets written since the last commit to the group: at once
 * when forced (before partitions are revoked), else at most every
 * commit.interval.ms. The group's offsets are for lag monitors only (a
 * partition starts from the store's offset, DESIGN §4), and a commit per
 * batch sent an OffsetCommit per few messages at light load: thousands in
 * flight on a loaded coordinator, which then timed out its heartbeats too. */
void segd_pipeline_commit_written(segd_pipeline_t *p, int force)
{
    /* closed after a fatal error: nothing can be sent; a lost assignment (a
     * refused generation, a session timed out) or a fatal error (the consumer
     * is rebuilt, pipeline_rebuild.c): its partitions are no longer ours, and
     * the next assignment commits the store's offsets anyway */
    int lost = p->consumer && rd_kafka_assignment_lost(p->consumer);
    if (p->nwritten && lost) /* the group's committed lag stays behind: say why */
        segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
                    "written offsets not committed: the assignment was lost", "partitions=%zu",
                    p->nwritten);
    if (!p->consumer || lost || rd_kafka_fatal_error(p->consumer, NULL, 0))
        p->nwritten = 0;
    if (!p->nwritten)
        return;
    int64_t now = segd_mono_ms();
    /* after refusals in a row, not before their backoff (commit_retry_at) */
    if (!force && (now < p->commit_next_ms || (p->commit_refusals && now < p->commit_retry_ms)))
        return;
    rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new((int)p->nwritten);
    for (size_t i = 0; i < p->nwritten; i++)
        rd_kafka_topic_partition_list_add(offs, p->written[i].topic, p->written[i].partition)
            ->offset = p->written[i].next;
    rd_kafka_commit(p->consumer, offs, 1); /* a refusal comes back to the commit callback */
    rd_kafka_topic_partition_list_destroy(offs);
    p->nwritten = 0;
    p->st.commits++;
    p->commit_next_ms = segd_mono_ms() + p->cfg->commit_interval_ms;
}

/* Writes a after a first try that ended in err: with backoff until it is
 * written, a stop comes, or the store has stopped (SEGD_ERR_ABORTED, which
 * needs a restart). On error a stays as it was, for the next try. */
static segd_err_t write_until(segd_pipeline_t *p, segd_applier_t *a, segd_err_t err,
                              char *errstr, size_t n)
{
    int64_t wait = 100;
    while (err != SEGD_OK) {
        if (*p->stop || err == SEGD_ERR_ABORTED)
            return err;
        wait = pipeline_backoff(p, wait, errstr);
        err = segd_applier_flush(a, errstr, n);
    }
    return SEGD_OK;
}

/* What follows a batch's write, on this thread: its offsets kept for the
 * commit to the group, its counts now the store's, the publisher told
 * (kick: the writer thread has not told it), the metrics. flush_s is the
 * batch's flush time besides the write's write_s. */
static void batch_written(segd_pipeline_t *p, const pipeline_position_t *pos, size_t npos,
                          int64_t misrouted, int64_t unchecked, double flush_s, double write_s,
                          int kick)
{
    double tc = segd_mono_s();
    p->st.write_s += write_s;
    note_written(p, pos, npos);
    segd_pipeline_commit_written(p, 0);
    if (kick && p->hooks.committed)
        p->hooks.committed(p->hooks.ctx);
    p->st.commit_s += segd_mono_s() - tc;
    if (p->mx.consumed)
        segd_pipeline_metrics_batch(p, pos, npos, flush_s + write_s);
    p->misrouted_stored += misrouted;
    p->unchecked_stored += unchecked;
    p->st.batches++;
    /* per batch, never per message; at debug only (tests wait on it) */
    segd_log_kv(pipeline_log(p), SEGD_LOG_DEBUG, "pipeline", "batch written",
                "batch=%" PRIu64 " consumed=%" PRIu64 " events=%" PRIu64 " segments=%" PRIu64,
                p->st.batches, p->st.messages, p->st.events, p->st.segments);
    pipeline_fault_cleared(p);
}

/* The batch being built starts empty (its dead letters were delivered). */
static void batch_reset(segd_pipeline_t *p)
{
    p->npos = 0;
    p->misrouted_pending = 0;
    p->unchecked_pending = 0;
    segd_dlq_clear(p->dlq);
}

int segd_pipeline_batch_settle(segd_pipeline_t *p)
{
    if (!p->wheld)
        return 0;
    if (!p->winflight)
        return 1;
    char errstr[512];
    double tw = segd_mono_s(), write_s = 0;
    segd_err_t err = segd_pwriter_wait(p->writer, &write_s, errstr, sizeof(errstr));
    p->winflight = 0;
    p->st.writer_wait_s += segd_mono_s() - tw;
    if (err)
        return 1; /* held: the next drain retries it */
    p->wheld = 0;
    batch_written(p, p->wpos, p->nwpos, p->wmisrouted, p->wunchecked, p->wflush_s, write_s, 0);
    return 0;
}

segd_err_t segd_pipeline_batch_drain(segd_pipeline_t *p, char *errstr, size_t n)
{
    if (!segd_pipeline_batch_settle(p))
        return SEGD_OK;
    /* its write failed (on the writer, or here before a stop): again here */
    double tw = segd_mono_s();
    segd_err_t err = write_until(p, p->wap, segd_applier_flush(p->wap, errstr, n), errstr, n);
    if (err)
        return err;
    p->wheld = 0;
    batch_written(p, p->wpos, p->nwpos, p->wmisrouted, p->wunchecked, p->wflush_s,
                  segd_mono_s() - tw, 1);
    return SEGD_OK;
}

/* Hands the sealed batch to the writer thread, and an empty one takes its
 * place. Its dead letters are delivered, so they are dropped now: a failed
 * write of the batch does not need them again. */
static segd_err_t hand_over(segd_pipeline_t *p, double t0, char *errstr, size_t n)
{
    segd_err_t err = segd_applier_seal(p->ap);
    if (err)
        return segd_errf(err, errstr, n, "outbox entry: %s", segd_err_str(err));
    segd_applier_t *empty = p->wap;
    p->wap = p->ap;
    p->ap = empty;
    memcpy(p->wpos, p->pos, p->npos * sizeof(p->pos[0]));
    p->nwpos = p->npos;
    p->wmisrouted = p->misrouted_pending;
    p->wunchecked = p->unchecked_pending;
    p->wflush_s = segd_mono_s() - t0;
    p->wheld = p->winflight = 1;
    batch_reset(p);
    segd_pwriter_start(p->writer, p->wap);
    return SEGD_OK;
}

/* The batch the writer has is written first (drained). Then the dead
 * letters, then data + offsets in one WriteBatch, then the Kafka commit.
 * With the writer thread the write and what follows it happen on the
 * writer and at the next drain; a batch holding a retirement is written
 * here all the same, because the next batch's checks read the policy its
 * write changes. A failure leaves the batch intact for the next attempt. */
segd_err_t segd_pipeline_batch_flush(segd_pipeline_t *p, char *errstr, size_t n)
{
    segd_err_t err = segd_pipeline_batch_drain(p, errstr, n);
    if (err || !p->npos)
        return err;
    double t0 = segd_mono_s();
    err = segd_dlq_deliver(p->dlq, errstr, n);
    p->st.upkeep_s += segd_mono_s() - t0; /* the dead letters, acknowledged */
    if (err)
        return err;
    for (size_t i = 0; i < p->npos; i++)
        segd_batch_set_offset(p->ap->batch, p->pos[i].topic, p->pos[i].partition,
                              p->pos[i].next);
    record_counts(p);
    if (p->writer && !p->ap->n_retired)
        return hand_over(p, t0, errstr, n);
    double tw = segd_mono_s();
    err = write_until(p, p->ap, segd_applier_flush(p->ap, errstr, n), errstr, n);
    if (err)
        return err;
    batch_written(p, p->pos, p->npos, p->misrouted_pending, p->unchecked_pending, tw - t0,
                  segd_mono_s() - tw, 1);
    batch_reset(p);
    return SEGD_OK;
}
