/* The group consumer rebuilt in-process after a fatal error (issue 28,
 * defect B), and the bound on it. librdkafka makes a FENCED_INSTANCE_ID
 * answer fatal, and 2.0.2 also gets it for its own retry of an
 * OffsetCommit sent before two brokers (the coordinator among them) were
 * killed: the session timed out meanwhile, the retry reaches the group
 * after the member's place was reset, and the group fences it. That is a
 * broker fault, not a second member, and a daemon should ride it out. The
 * old handle is retired as a lost assignment would leave it (nothing it
 * holds is committed; what it fetched and the pipeline did not take is
 * dropped with it) and destroyed; then a new one with the same settings
 * and group.instance.id joins, and partitions restart from the store's
 * offsets through the ordinary assignment. A real second member with the same
 * group.instance.id fences this one again and again: more than
 * REBUILDS_MAX rebuilds within REBUILD_WINDOW_MS end the step with the
 * error, and segd run stops. Runs on the pipeline's thread. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/lag.h"
#include "consumer/sweep.h"

/* A broker fault fences a member at most once per outage (5 of 25
 * two-node SIGKILLs did, never twice in one); two members with one
 * group.instance.id fence each other every few seconds. */
#define REBUILD_WINDOW_MS (10 * 60 * 1000)

/* The consumer's fatal error, in librdkafka's words. */
static void fatal_words(rd_kafka_t *rk, const char **name, char *why, size_t size)
{
    why[0] = 0;
    rd_kafka_resp_err_t e = rd_kafka_fatal_error(rk, why, size);
    *name = rd_kafka_err2name(e);
    if (!why[0])
        snprintf(why, size, "no reason given");
}

/* Whether REBUILDS_MAX rebuilds already happened within the window: then
 * this fatal error is the one too many. */
static int over_bound(const segd_pipeline_t *p, int64_t now)
{
    if (p->rebuilds < REBUILDS_MAX)
        return 0;
    int64_t oldest = p->rebuild_ms[p->rebuilds % REBUILDS_MAX]; /* of the last MAX */
    return now - oldest < REBUILD_WINDOW_MS;
}

/* How long a rebuild waits for the old consumer's teardown before the new
 * one joins. */
#define RETIRE_WAIT_MS 10000

static void klog_free_cb(void *klog) { segd_klog_free(klog); }

/* Destroys the fatal consumer, waiting up to RETIRE_WAIT_MS. It must go
 * before the new one joins: left alive, librdkafka 2.0.2 rejoins the group
 * after a fatal fence (rd_kafka_cgrp_revoke_all_rejoin_maybe), syncs and
 * heartbeats, holding partitions it never fetches (seen on the mock), and
 * with the same group.instance.id it would fence the new member in turn.
 * A teardown not done in time is left to finish on its thread (its log
 * route cut: nothing of it reaches the log any more). */
static void destroy_bounded(segd_pipeline_t *p, rd_kafka_t *rk, segd_klog_t *klog)
{
    /* no consumer close: it would wait for a rebalance a fenced member
     * never gets, and an unassign or commit of its is pointless */
    if (!segd_kdestroy_bounded(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE, klog, RETIRE_WAIT_MS,
                               klog_free_cb, klog))
        segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                 "the fatal consumer's teardown is still running after %d ms: left to "
                 "finish on its own thread (librdkafka 2.0.2)", RETIRE_WAIT_MS);
}

/* Retires the fatal consumer: its partitions are revoked for the sweep, as
 * a lost assignment's are (the new member's assignment takes back what is
 * still ours), nothing of it is committed, what it fetched and the
 * pipeline did not take goes with it, and it is destroyed. */
static void retire(segd_pipeline_t *p)
{
    rd_kafka_t *old = p->consumer;
    segd_klog_t *klog = p->klog;
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (!rd_kafka_assignment(old, &parts))
        for (int i = 0; i < parts->cnt; i++)
            segd_sweep_owned(p->sweep, parts->elems[i].topic, parts->elems[i].partition, 0,
                             segd_mono_ms());
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    segd_pipeline_consumer_set(p, NULL); /* waits for other threads using it */
    segd_fetch_nudge_reset(&p->nudge); /* the next consumer may get old's address */
    p->klog = NULL;
    destroy_bounded(p, old, klog);
}

/* What the pipeline kept of the old member's assignment goes with it, as
 * on a lost assignment: offsets written and not yet committed (the new
 * assignment commits the store's), partitions waiting for their offset or
 * a restore (the restore is cancelled: the new assignment starts it again
 * if the partition comes back without an offset), the commit backoff, and
 * the first assignment the close waits for (librdkafka #4312) is the new
 * member's. */
static void forget_member(segd_pipeline_t *p)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].restoring && p->hooks.restore_cancel)
            p->hooks.restore_cancel(p->hooks.restore_ctx, p->unread[i].topic,
                                    p->unread[i].partition);
    p->nwritten = 0;
    p->npos = 0; /* written by the step before (its flush succeeded) */
    p->nunread = 0;
    p->commit_failed = 0;
    p->commit_logged = 0;
    p->commit_refusals = 0;
    p->rebalanced = 0;
    p->unassigned_logged = 0;
    segd_lag_unassigned(p->lag);
}

segd_err_t segd_pipeline_rebuild(segd_pipeline_t *p, char *errstr, size_t n)
{
    const char *name;
    char why[512];
    fatal_words(p->consumer, &name, why, sizeof(why));
    int64_t now = segd_mono_ms();
    if (over_bound(p, now))
        return segd_errf(SEGD_ERR_KAFKA, errstr, n,
                         "consumer: fatal error (%s): %s; the consumer was rebuilt %d times "
                         "in the last %d s and failed again: another member with this "
                         "group.instance.id (a second segd run on a copy of this store, or "
                         "the same group.instance.id set twice) fences it, so segd stops here",
                         name, why, REBUILDS_MAX, REBUILD_WINDOW_MS / 1000);
    p->rebuild_ms[p->rebuilds % REBUILDS_MAX] = now;
    p->rebuilds++;
    p->st.rebuilds = p->rebuilds;
    segd_metric_add(p->mx.rebuilds, NULL, 1);
    segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
             "consumer: fatal error (%s): %s; rebuilding the consumer (rebuild %" PRIu64
             "; more than %d within %d s stop segd): its batch was written, nothing of "
             "it is committed, and the new member resumes from the store's offsets",
             name, why, p->rebuilds, REBUILDS_MAX, REBUILD_WINDOW_MS / 1000);
    retire(p);
    forget_member(p);
    segd_err_t err = segd_pipeline_subscribe(p, errstr, n);
    if (err) /* stops segd run; close finds no consumer */
        segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline", "consumer not rebuilt: %s",
                 errstr);
    return err;
}
