/* What the pipeline reports into the metrics registry (docs/metrics.md):
 * the families it registers, each written batch's figures, the lag table
 * and gauges refreshed at most every LAG_REFRESH_MS, and the links step's
 * counts. Runs on the pipeline's thread; segd_pipeline_lags is the
 * thread-safe read of the lag table for /readyz. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <stdio.h>

#include "base/clock.h"
#include "consumer/lag.h"
#include "consumer/sweep.h"

#define LAG_REFRESH_MS 250 /* the lag table and gauge, at most this often */

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
    x->rebuilds = segd_metrics_counter(m, "segd_consumer_rebuilds_total",
        "Group consumers rebuilt in-process after a fatal librdkafka error (a static member "
        "fenced, FENCED_INSTANCE_ID).", NULL);
    x->sweep_off = segd_metrics_gauge(m, "segd_sweep_disabled",
        "1 when this store refuses to sweep (misrouted or unchecked events, or a partition "
        "it could not track).", NULL);
}

/* A written batch's figures into the registry: per partition what it
 * consumed and applied, its size and write time, and the running totals. */
void segd_pipeline_metrics_batch(segd_pipeline_t *p, const pipeline_position_t *pos,
                                 size_t npos, double apply_s)
{
    char part[16];
    const char *v[2] = {NULL, part};
    uint64_t messages = 0;
    for (size_t i = 0; i < npos; i++) {
        const pipeline_position_t *q = &pos[i];
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

static int paused_for_offset(void *ctx, const char *topic, int32_t partition)
{
    return segd_pipeline_unread_has(ctx, topic, partition);
}

/* The lag table (for /readyz) and gauge, from librdkafka's cached
 * watermarks: no broker round trip on this thread. */
void segd_pipeline_metrics_lag(segd_pipeline_t *p)
{
    if (segd_mono_ms() < p->lag_next_ms)
        return;
    p->lag_next_ms = segd_mono_ms() + LAG_REFRESH_MS;
    segd_lag_refresh(p->lag, p->consumer, paused_for_offset, p, p->mx.lag);
    segd_metric_set(p->mx.fault_waits, NULL, (double)p->bo.retries);
    segd_metric_set(p->mx.assigned, NULL, (double)segd_pipeline_assigned_own(p));
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
void segd_pipeline_metrics_links(segd_pipeline_t *p, const segd_links_stats_t *b,
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

segd_err_t segd_pipeline_lags(segd_pipeline_t *p, segd_partition_lag_t **out, size_t *n,
                              int *assigned, int64_t *age_ms)
{
    *age_ms = segd_lag_age_ms(p->lag);
    return segd_lag_get(p->lag, out, n, assigned);
}
