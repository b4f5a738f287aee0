/* The group's assignment as the pipeline handles it: librdkafka's rebalance
 * callback (starting offsets from the store, the pending batch written
 * before partitions leave), the commit of the store's offsets to the group
 * on assignment and again after a refused commit, and pausing partitions
 * (unknown offset, or ingest held while the change stream is behind).
 * Runs on the pipeline's thread (the reads of the assignment are in
 * consumer/pipeline_parts.c). */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/lag.h"
#include "consumer/sweep.h"

/* A Kafka commit that failed is sent again no sooner than this after the
 * failure: a group rebalancing answers REBALANCE_IN_PROGRESS until it
 * settles, and a resend at every step would only be refused again. Each
 * refusal in a row doubles the wait, up to COMMIT_RETRY_MAX_MS: a commit
 * refused with ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID costs the member its
 * assignment (librdkafka rejoins), and a member that committed at once on
 * every new assignment was refused again within milliseconds, so a group
 * that kept refusing kept it rejoining without consuming (issue 28: a loaded
 * machine, 4 partitions revoked every 5 s for a minute). */
#define COMMIT_RETRY_MS 500
#define COMMIT_RETRY_MAX_MS 8000

/* When a commit may go again after the refusals in a row so far. */
static int64_t commit_retry_at(const segd_pipeline_t *p)
{
    int64_t wait = COMMIT_RETRY_MS;
    for (uint64_t i = 1; i < p->commit_refusals && wait < COMMIT_RETRY_MAX_MS; i++)
        wait *= 2;
    return segd_mono_ms() + (wait < COMMIT_RETRY_MAX_MS ? wait : COMMIT_RETRY_MAX_MS);
}

/* Where a partition assigned paused "starts" until its seek. A concrete
 * offset, never a logical one: librdkafka (2.0.2) answers a seek made while
 * the lookup of a logical offset is in flight by taking the late, outdated
 * lookup reply as a reason to query again, and then fetches from the
 * logical offset, not the seek's. With END, a restored partition resumed
 * at its unit's offset skipped what came between that offset and the end
 * (found by tests/trials/fleet.py). Nothing is fetched here before the seek. */
#define PAUSED_START 0

/* Receives the result of an asynchronous Kafka commit, which consumer_poll
 * delivers on this thread. The store holds the offsets that matter, and the
 * group's committed offsets only serve lag monitors, so a refused commit is not
 * an error for ingest (it is refused when the generation changed under a
 * rebalance: ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID). Left
 * alone, though, it would keep the group's committed lag stale until the
 * partition's next batch, which on a quiet partition may never come. So the
 * refusal is noted here, and segd_pipeline_commit_resend sends the store's
 * offsets again. */
void segd_pipeline_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *offs, void *opaque)
{
    (void)rk;
    segd_pipeline_t *p = segd_klog_owner(opaque);
    rd_kafka_resp_err_t first = err;
    for (int i = 0; !first && offs && i < offs->cnt; i++)
        first = offs->elems[i].err;
    if (!first || first == RD_KAFKA_RESP_ERR__NO_OFFSET) {
        if (!first)
            p->commit_refusals = 0;
        if (!first && p->commit_logged) {
            p->commit_logged = 0;
            segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "offset commit accepted again");
        }
        return;
    }
    if (!p->commit_logged) /* once until a commit is accepted: a rebalance may refuse many */
        segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
                 "offset commit refused (%s): sending the stored offsets again once the "
                 "group settles", rd_kafka_err2str(first));
    p->commit_logged = 1;
    p->commit_failed = 1;
    p->commits_failed++;
    p->commit_refusals++;
    p->commit_retry_ms = commit_retry_at(p); /* the batches' commits wait for it too */
}

/* Sends the store's offsets of every assigned partition to the group again
 * after a refused commit: the assignment as it is now, so a partition that
 * moved away is left to its new owner. */
void segd_pipeline_commit_resend(segd_pipeline_t *p)
{
    char err[256];
    if (!p->commit_failed || segd_mono_ms() < p->commit_retry_ms)
        return;
    /* a lost assignment is listed until its revoke is served: those
     * partitions are not ours, and a commit of theirs can be refused as
     * FENCED_INSTANCE_ID, which librdkafka makes fatal (review) */
    if (rd_kafka_assignment_lost(p->consumer) || rd_kafka_fatal_error(p->consumer, NULL, 0))
        return;
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new(parts->cnt);
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t next;
        if (!segd_pipeline_unread_has(p, tp->topic, tp->partition) &&
            segd_store_offset_get(p->store, tp->topic, tp->partition, &next, err,
                                  sizeof(err)) == SEGD_OK)
            rd_kafka_topic_partition_list_add(offs, tp->topic, tp->partition)->offset = next;
    }
    /* nothing to send (between a revoke and the next assignment): still
     * failed, tried again at the assignment */
    p->commit_retry_ms = commit_retry_at(p);
    if (offs->cnt) {
        p->commit_failed = 0;
        p->commits_resent++;
        /* a refusal comes back to segd_pipeline_commit_cb */
        rd_kafka_commit(p->consumer, offs, 1);
        segd_log_kv(pipeline_log(p), SEGD_LOG_DEBUG, "pipeline", "offsets committed again",
                    "partitions=%d refused=%" PRIu64 " resent=%" PRIu64, offs->cnt,
                    p->commits_failed, p->commits_resent);
    }
    rd_kafka_topic_partition_list_destroy(offs);
    rd_kafka_topic_partition_list_destroy(parts);
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
        int hold = p->held || segd_pipeline_unread_has(p, tp->topic, tp->partition);
        rd_kafka_topic_partition_list_add(hold ? pause : resume, tp->topic, tp->partition);
    }
    if (pause->cnt)
        rd_kafka_pause_partitions(p->consumer, pause);
    if (resume->cnt)
        rd_kafka_resume_partitions(p->consumer, resume);
    rd_kafka_topic_partition_list_destroy(pause);
    rd_kafka_topic_partition_list_destroy(resume);
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
        segd_pipeline_one_partition(rd_kafka_topic_name(m->rkt), m->partition, m->offset);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    segd_pipeline_rewind(p, m);
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

void segd_pipeline_wait_for_publisher(segd_pipeline_t *p)
{
    if (!p->hooks.backlog || p->cfg->changes_max_outbox <= 0 || !publisher_behind(p))
        return;
    /* paused partitions deliver nothing, and polling keeps the membership;
     * partitions assigned meanwhile start paused (segd_pipeline_rebalance_cb) */
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
        wait = pipeline_backoff(p, wait, "change stream behind: outbox over changes.max.outbox");
    }
    pipeline_fault_cleared(p);
    p->held = 0;
    resume_assignment(p);
}

/* Sets each assigned partition's starting offset from the store, in the assign
 * call itself. Only "no offset stored" means input.offset.reset. A partition
 * whose offset cannot be read starts paused and is retried by
 * segd_pipeline_unread_retry. */
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
        } else if (e == SEGD_ERR_NOTFOUND && segd_pipeline_restore_start(p, tp)) {
            tp->offset = PAUSED_START; /* paused; seeked before it resumes */
        } else if (e == SEGD_ERR_NOTFOUND) {
            tp->offset = segd_pipeline_reset_offset(p);
        } else {
            segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                     "waiting: %s [%" PRId32 "]: stored offset unreadable: %s "
                     "(partition paused, retrying)", tp->topic, tp->partition, err);
            unread_t *u = segd_pipeline_unread_note(p, tp->topic, tp->partition, -1);
            if (u)
                u->logged = 1;
            /* Nothing is fetched from PAUSED_START, because the partition is
             * seeked before it resumes. When there is no room to track it (more
             * than MAX_POSITIONS partitions) it falls back to
             * RD_KAFKA_OFFSET_STORED, never to the end. */
            tp->offset = u ? PAUSED_START : RD_KAFKA_OFFSET_STORED;
        }
        segd_lag_start(p->lag, tp->topic, tp->partition, tp->offset);
    }
}

/* librdkafka's rebalance callback, run inside consumer_poll on the pipeline's
 * thread. On an assignment each partition starts from the store's offset or
 * waits paused, and the store's offsets go to the new generation. On a revoke
 * the pending batch is written first, while the partitions are still ours, and
 * the sweep learns which partitions left. */
void segd_pipeline_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    segd_pipeline_t *p = segd_klog_owner(opaque);
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    rd_kafka_error_t *e = NULL;
    char msg[256];
    p->rebalanced = 1;
    segd_fetch_nudge_reset(&p->nudge); /* what the queue held was of other partitions */
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        const char *proto = coop ? "cooperative" : "eager";
        if (!p->st.assigned_s) { /* the group join, timed once */
            p->st.assigned_s = segd_mono_s();
            segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "partitions assigned",
                        "count=%d protocol=%s join_s=%.3f", parts->cnt, proto,
                        p->st.assigned_s - p->st.created_s);
        } else {
            segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "partitions assigned",
                        "count=%d protocol=%s", parts->cnt, proto);
        }
        segd_lag_assigned(p->lag);
        /* The store's offsets of every assigned partition go to the group at
         * once, to the new generation: a refused commit is sent again, and a
         * partition whose stored offset is already at its end (a restart
         * after a SIGKILL that came between write and commit) would
         * otherwise never be committed, since commits follow batches. After
         * refusals in a row it waits out their backoff, so the member
         * consumes before a refusal can cost it this assignment too. */
        p->commit_failed = 1;
        p->commit_retry_ms = p->commit_refusals ? commit_retry_at(p) : 0;
        p->lag_next_ms = 0; /* the new partitions' lag at the end of this step */
        set_start_offsets(p, parts);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        pause_or_resume(p, parts);
    } else {
        segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "partitions revoked", "count=%d",
                    parts->cnt);
        /* write what was read from these partitions while they are ours */
        if (segd_pipeline_batch_flush(p, msg, sizeof(msg)) != SEGD_OK ||
            segd_pipeline_batch_drain(p, msg, sizeof(msg)) != SEGD_OK) /* the writer's too */
            segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline",
                     "batch not written before revoke: %s", msg);
        /* while the partitions are ours: later, a commit of theirs could
         * overwrite the next owner's. Lost partitions (a refused generation,
         * a session timed out) are no longer ours: the commit would be
         * refused, and cost another rejoin where a refusal does that. */
        segd_pipeline_commit_written(p, 1); /* drops them when lost */
        /* for the same reason, a batch whose write failed (a stop during a
         * store fault) keeps no offset of theirs for a later commit */
        segd_pipeline_batch_forget(p, parts);
        segd_pipeline_unread_forget(p, parts);
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
        segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline",
                 "rebalance: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}
