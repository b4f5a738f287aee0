/* Partitions that wait paused for their starting offset (the unread
 * table, kept by consumer/pipeline_parts.c): an offset the store could not
 * read, a partition that came back while the sweep deletes its users, one
 * handed to the restore hook, one whose rewind librdkafka refused. Each step
 * retries them and resumes those whose offset is known. Also drives the
 * revocation sweep (consumer/sweep.h) from the pipeline's thread. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>

#include "base/clock.h"
#include "consumer/lag.h"
#include "consumer/sweep.h"

/* Whether a partition handed to the restore hook is still restoring. Once its
 * restore has finished it goes on as any unread partition does. Its offset is
 * then in the store (restored) or absent, and then it replays from
 * input.offset.reset. */
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

/* Hands the partition to the restore hook and returns 1 when the hook takes it.
 * The partition then waits paused, as an unread partition, until the restore has
 * finished. */
static int hand_to_restore(segd_pipeline_t *p, unread_t *u)
{
    char err[256];
    topic_parts_t *t = segd_pipeline_parts_find(p, u->topic);
    int32_t count = t ? t->count : 0;
    /* a unit routes users by the partition count it was made with */
    if (count <= 0 && segd_pipeline_partitions(p, u->topic, &count, err, sizeof(err))) {
        segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                 "%s [%" PRId32 "]: no restore (%s): replaying it",
                 u->topic, u->partition, err);
        return 0;
    }
    if (p->hooks.restore_begin(p->hooks.restore_ctx, u->topic, u->partition, count))
        return 0;
    u->restoring = 1;
    u->logged = 1;
    segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
             "%s [%" PRId32 "] has no stored offset: restoring it from a snapshot unit "
             "(partition paused)", u->topic, u->partition);
    return 1;
}

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

/* Partitions whose stored offset could not be read were assigned paused. Each
 * step reads their offsets again, seeks to them and resumes the partitions. Only
 * "no offset stored" falls back to input.offset.reset, because doing that after
 * a read error would skip a backlog. */
void segd_pipeline_unread_retry(segd_pipeline_t *p)
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
            next = u->fallback >= 0 ? u->fallback : segd_pipeline_reset_offset(p);
            e = SEGD_OK;
        }
        if (e || !segd_pipeline_seek(p, u->topic, u->partition, next)) {
            if (e && !u->logged)
                segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                         "waiting: %s [%" PRId32 "]: stored offset unreadable: "
                         "%s (partition paused, retrying)", u->topic, u->partition, err);
            u->logged |= e != SEGD_OK;
            i++;
            continue;
        }
        if (u->logged)
            segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
                     "resumed %s [%" PRId32 "] at its stored offset",
                     u->topic, u->partition);
        segd_lag_start(p->lag, u->topic, u->partition, next);
        /* The assignment's commit left this partition out (it had no offset
         * yet), and a partition restored or resumed at its end gets no batch
         * to commit after: the store's offsets of the assignment go to the
         * group once more, or its committed lag stays stale for good. */
        p->commit_failed = 1;
        if (!p->held) {
            rd_kafka_topic_partition_list_t *l =
                segd_pipeline_one_partition(u->topic, u->partition, next);
            rd_kafka_resume_partitions(p->consumer, l);
            rd_kafka_topic_partition_list_destroy(l);
        }
        *u = p->unread[--p->nunread];
    }
}

/* A partition without a stored offset waits, paused, for the sweep to
 * finish deleting its users if it was half swept (consumer/sweep.h), then
 * for the restore hook, if any. Returns 1 when it waits. */
int segd_pipeline_restore_start(segd_pipeline_t *p, const rd_kafka_topic_partition_t *tp)
{
    int purging = segd_sweep_purging(p->sweep, tp->topic, tp->partition);
    if ((!p->hooks.restore_begin && !purging) ||
        segd_pipeline_unread_has(p, tp->topic, tp->partition))
        return 0;
    unread_t *u = segd_pipeline_unread_note(p, tp->topic, tp->partition, -1);
    if (!u) {
        if (purging) /* it starts unpaused: the sweep must not touch it now */
            segd_sweep_disable(p->sweep, "more paused partitions than it can track");
        return 0;
    }
    if (purging) {
        u->purging = 1;
        u->logged = 1;
        segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
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

static int restoring(void *ctx, const char *topic, int32_t partition)
{
    segd_pipeline_t *p = ctx;
    return p->hooks.restore_state &&
           p->hooks.restore_state(p->hooks.restore_ctx, topic, partition) ==
               SEGD_PIPELINE_RESTORING;
}

/* The sweep is always made, so that marks an earlier run left get finished even
 * with sweep.after.s = 0. New sweeps are only started with restore.from set,
 * because a swept partition that comes back has no offset, and a replay of its
 * history would be refused as too_late once the store's GC watermark has
 * started. They also need a single input topic, because a record joins a user's
 * data of every topic, and a unit of one topic's partition cannot split it
 * (DESIGN §7). */
segd_err_t segd_pipeline_sweep_new(segd_pipeline_t *p, char *errstr, size_t n)
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

/* The revocation sweep's share of this step (consumer/sweep.h): here, on
 * the thread whose rebalance callback changes the assignment. */
void segd_pipeline_sweep_step(segd_pipeline_t *p)
{
    char err[256];
    if (!p->sweep || !segd_sweep_active(p->sweep))
        return;
    for (size_t i = 0; i < p->cfg->n_topics; i++) {
        const char *topic = p->cfg->topics[i];
        topic_parts_t *t = segd_pipeline_parts_find(p, topic);
        int32_t count = t && t->count > 0 ? t->count : segd_pipeline_parts_refresh(p, topic);
        if (count > 0 && segd_sweep_topic(p->sweep, topic, count, segd_mono_ms()))
            return; /* out of memory: no sweep this time */
    }
    if (segd_sweep_step(p->sweep, segd_mono_ms(), err, sizeof(err)) != SEGD_OK &&
        segd_mono_ms() - p->sweep_logged_ms >= 10000) {
        p->sweep_logged_ms = segd_mono_ms();
        segd_log(pipeline_log(p), SEGD_LOG_WARN, "sweep", "%s (retrying)", err);
    }
}
