/* The pipeline's state, shared by the files that make up the pipeline
 * (consumer/pipeline*.c) and by nothing else: callers outside consumer/ use
 * consumer/pipeline.h. Every function declared here runs on the pipeline's
 * one thread, as its rebalance callback does.
 *
 * The files call one way, down: pipeline.c drives the rest; the rebalance
 * callback (pipeline_assign.c) writes the batch and starts restores; the
 * batch (pipeline_batch.c) reports into pipeline_metrics.c; and all of them
 * stand on the per-partition state (pipeline_parts.c), which calls none. */
#ifndef SEGD_PIPELINE_INT_H
#define SEGD_PIPELINE_INT_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdint.h>

#include "consumer/apply.h"
#include "consumer/backoff.h"
#include "consumer/dlq.h"
#include "consumer/fetch_nudge.h"
#include "consumer/links.h"
#include "consumer/pipeline.h"
#include "consumer/pipeline_writer.h"
#include "transport/kconf.h"

/* The most partitions the batch and the unread table track. */
#define MAX_POSITIONS 1024
/* The most consumer rebuilds after fatal errors within the window of
 * consumer/pipeline_rebuild.c; the next fatal error stops segd run. */
#define REBUILDS_MAX 5

/* A partition in the pending batch: the offset after its last message, and
 * what the batch took from it. */
typedef struct pipeline_position {
    char topic[256];
    int32_t partition;
    int64_t next;
    uint64_t messages, events, segments; /* of this batch, for the metrics */
} pipeline_position_t;

/* The families the pipeline reports into (segd_pipeline_set_metrics); all
 * NULL without a registry, which makes every update a no-op. */
typedef struct pipeline_metrics {
    segd_metric_t *consumed, *events, *segments; /* per topic, partition */
    segd_metric_t *dlq, *misrouted, *batches, *fault_waits;
    segd_metric_t *batch_messages, *apply_seconds, *lag, *assigned;
    segd_metric_t *swept_users, *swept_examined, *swept_partitions, *sweep_off;
    segd_metric_t *link_events, *member_changes; /* identity.enable (DESIGN §10) */
    segd_metric_t *rebuilds; /* the consumer rebuilt after a fatal error */
} pipeline_metrics_t;

/* An input topic's partition count from the brokers' metadata: the P of
 * segd_partition_of for the misrouted check. */
typedef struct topic_parts {
    char topic[256];
    int32_t count;
} topic_parts_t;

/* An assigned partition that waits paused for its starting offset: its
 * stored offset could not be read, the sweep or the restore hook has it,
 * or librdkafka refused a rewind. segd_pipeline_unread_retry resumes it. */
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
    /* written only by the pipeline's thread, under consumer_mu; other
     * threads hold that lock while they use it (segd_pipeline_assigned,
     * segd_pipeline_assignment): a consumer rebuilt after a fatal error
     * replaces it and the old one is destroyed (pipeline_rebuild.c) */
    rd_kafka_t *consumer;
    pthread_mutex_t consumer_mu;
    uint64_t rebuilds;                  /* consumers rebuilt so far */
    int64_t rebuild_ms[REBUILDS_MAX];   /* monotonic times of the last rebuilds */
    /* the consumer's opaque and log route: a handle left to process exit
     * keeps it, cut, after p is freed (segd_klog_cut) */
    segd_klog_t *klog;
    /* why the brokers refused the consumer's login or TLS handshake (its
     * error_cb); not empty: the next step fails and segd run stops */
    char refused[640];
    segd_dlq_t *dlq;
    segd_pipeline_hooks_t hooks; /* the change publisher, through its owner */
    segd_sweep_t *sweep;         /* NULL when sweep.after.s = 0 */
    int64_t sweep_logged_ms;     /* a failed sweep step was reported then */
    segd_ingest_t *ingest;
    segd_applier_t apv[2]; /* the two batches ap and wap point at */
    segd_applier_t *ap;    /* the batch being built */
    /* ingest.writer.thread (consumer/pipeline_writer.h): wap is the batch
     * handed to the writer, or whose write there failed and is retried on
     * this thread before any other write (segd_pipeline_batch_drain) */
    segd_pwriter_t *writer; /* NULL: every batch is written on this thread */
    segd_fetch_nudge_t nudge; /* wakes the fetcher after a full queue drained */
    segd_applier_t *wap;
    int wheld;              /* wap holds a batch not yet written */
    int winflight;          /* ... which the writer has */
    pipeline_position_t wpos[MAX_POSITIONS]; /* its positions */
    size_t nwpos;
    int64_t wmisrouted, wunchecked; /* its pending counts */
    double wflush_s;        /* its flush's time before the hand-over (metrics) */
    pipeline_position_t pos[MAX_POSITIONS];
    size_t npos;
    /* offsets written to the store and not yet committed to the group */
    pipeline_position_t written[MAX_POSITIONS];
    size_t nwritten;
    int64_t commit_next_ms; /* monotonic time the next commit may be sent */
    unread_t unread[MAX_POSITIONS];
    size_t nunread;
    int held;       /* back-pressure: every assigned partition is paused */
    int rebalanced; /* the group has called the rebalance callback */
    segd_pipeline_stats_t st;
    segd_backoff_t bo; /* shared with ingest and dlq: one fault report at a time */
    int64_t gc_next_ms;    /* monotonic time of the next GC watermark advance */
    int caught_up_streak;  /* upkeeps in a row that found the store caught up */
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
    uint64_t commit_refusals;  /* in a row, reset by an accepted commit: the backoff */
    uint64_t commits_failed;   /* for the log: refusals seen, resends made */
    uint64_t commits_resent;
    int64_t session_timeout_ms; /* the consumer's, for the log of a long wait */
    int unassigned_logged;      /* that wait was explained */
    double subscribed_s; /* segd_mono_s of the last subscribe (a rebuild subscribes again) */
    /* reachability of the brokers (consumer/pipeline_brokers.c) */
    pthread_mutex_t brokers_mu; /* guards brokers_down: /readyz reads it */
    char brokers_down[512];     /* why no broker answers; empty while one does */
    char broker_cause[256];     /* librdkafka's last connection failure, in short */
    int64_t brokers_check_ms;   /* monotonic time of the next check while down */
    uint64_t brokers_down_messages; /* st.messages when they went down */
    pipeline_metrics_t mx;
};

/* The pipeline's log, borrowed from its configuration. */
static inline segd_log_t *pipeline_log(const segd_pipeline_t *p) { return p->cfg->log; }

/* Exponential backoff for fault waits; logs the fault once per change. */
static inline int64_t pipeline_backoff(segd_pipeline_t *p, int64_t wait_ms, const char *fault)
{
    return segd_backoff_wait(&p->bo, wait_ms, p->cfg->retry_max_ms, fault);
}

static inline void pipeline_fault_cleared(segd_pipeline_t *p)
{
    segd_backoff_cleared(&p->bo);
}

/* ---------- per-partition state (consumer/pipeline_parts.c) ---------- */

/* The topic's partition count as last read, NULL when never read. */
topic_parts_t *segd_pipeline_parts_find(segd_pipeline_t *p, const char *topic);
/* Reads it from the brokers again; 0 when they cannot say. */
int32_t segd_pipeline_parts_refresh(segd_pipeline_t *p, const char *topic);
/* A list of one partition at offset; the caller destroys it. */
rd_kafka_topic_partition_list_t *segd_pipeline_one_partition(const char *topic,
                                                             int32_t partition, int64_t offset);
/* input.offset.reset as a librdkafka logical offset. */
int64_t segd_pipeline_reset_offset(const segd_pipeline_t *p);
/* Whether the partition waits paused for its starting offset. */
int segd_pipeline_unread_has(const segd_pipeline_t *p, const char *topic, int32_t partition);
/* Adds the partition to the table (or finds it there); NULL when full. */
unread_t *segd_pipeline_unread_note(segd_pipeline_t *p, const char *topic, int32_t partition,
                                    int64_t fallback);
/* Drops revoked partitions, cancelling their restores. */
void segd_pipeline_unread_forget(segd_pipeline_t *p,
                                 const rd_kafka_topic_partition_list_t *parts);
/* Seeks the partition to offset; 0 when librdkafka refused (e.g. the
 * fetcher is not started yet). */
int segd_pipeline_seek(segd_pipeline_t *p, const char *topic, int32_t partition, int64_t offset);
/* Makes m, unapplied, the next message of its partition again. */
void segd_pipeline_rewind(segd_pipeline_t *p, const rd_kafka_message_t *m);

/* ---------- the batch (consumer/pipeline_batch.c) ---------- */

/* Polls messages into the batch. Returns 0, or -1 when a stop came during a
 * fault wait and -2 when memory ran out, in both cases with that message
 * left unapplied. Sets *fatal when the consumer has failed for good. */
int segd_pipeline_batch_take(segd_pipeline_t *p, int *fatal);
/* Writes the batch (dead letters, then data and offsets in one WriteBatch,
 * then the Kafka commit); on failure the batch stays for the next try. */
/* Sends the written offsets to the group: forced, or when commit.interval.ms
 * has passed since the last commit. */
void segd_pipeline_commit_written(segd_pipeline_t *p, int force);

segd_err_t segd_pipeline_batch_flush(segd_pipeline_t *p, char *errstr, size_t n);
/* Waits for the batch the writer thread has (ingest.writer.thread) and
 * finishes it (offsets noted for the commit, counts, metrics); a failed
 * write is retried here with backoff until it succeeds, a stop comes or
 * the store is stopped (the error: the batch stays, and the next drain
 * tries again first). SEGD_OK at once when no batch is held. Everything
 * that reads what a write changes, or lets partitions go, drains first. */
segd_err_t segd_pipeline_batch_drain(segd_pipeline_t *p, char *errstr, size_t n);
/* The same without retrying a failed write (upkeep must not block the
 * step's poll in a fault wait): 1 when a batch whose write failed is still
 * held, which the step's flush retries. */
int segd_pipeline_batch_settle(segd_pipeline_t *p);
/* Drops revoked partitions from the pending batch (after its write, which
 * may have failed): no later commit sends their offsets. */
void segd_pipeline_batch_forget(segd_pipeline_t *p,
                                const rd_kafka_topic_partition_list_t *parts);

/* ---------- starting offsets (consumer/pipeline_restore.c) ---------- */

/* Each step: resumes the partitions whose offset can now be read. */
void segd_pipeline_unread_retry(segd_pipeline_t *p);
/* An assigned partition without a stored offset: 1 when it waits paused
 * for the sweep or the restore hook. */
int segd_pipeline_restore_start(segd_pipeline_t *p, const rd_kafka_topic_partition_t *tp);
/* The revocation sweep, made at start and driven once a step. */
segd_err_t segd_pipeline_sweep_new(segd_pipeline_t *p, char *errstr, size_t n);
void segd_pipeline_sweep_step(segd_pipeline_t *p);

/* ---------- assignment (consumer/pipeline_assign.c) ---------- */

/* librdkafka's rebalance and offset commit callbacks; opaque is the
 * pipeline. Both run inside consumer_poll on the pipeline's thread. */
void segd_pipeline_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t *parts, void *opaque);
void segd_pipeline_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *offs, void *opaque);
/* After a refused commit: sends the store's offsets again, at most every
 * COMMIT_RETRY_MS. */
void segd_pipeline_commit_resend(segd_pipeline_t *p);
/* segd_pipeline_assigned on the pipeline's own thread, without consumer_mu
 * (that thread is the consumer's only writer). */
int segd_pipeline_assigned_own(segd_pipeline_t *p);
/* Holds ingest (every partition paused) while the change stream is behind. */
void segd_pipeline_wait_for_publisher(segd_pipeline_t *p);

/* ---------- the group consumer (consumer/pipeline_consumer.c) ---------- */

/* Refuses to start when an input or dead-letter topic does not exist. */
segd_err_t segd_pipeline_check_topics(segd_pipeline_t *p, char *errstr, size_t n);
/* Makes p->consumer and subscribes it to the input topics. */
segd_err_t segd_pipeline_subscribe(segd_pipeline_t *p, char *errstr, size_t n);
/* Replaces p->consumer (the old one is destroyed or retired by the caller). */
void segd_pipeline_consumer_set(segd_pipeline_t *p, rd_kafka_t *rk);

/* ---------- rebuild after a fatal error (consumer/pipeline_rebuild.c) ---------- */

/* After a fatal consumer error (the step's batch written): retires the
 * consumer and makes a new one with the same settings, or, beyond the
 * bound, returns the fatal error in librdkafka's words. */
segd_err_t segd_pipeline_rebuild(segd_pipeline_t *p, char *errstr, size_t n);

/* ---------- broker reachability (consumer/pipeline_brokers.c) ---------- */

/* At start: 1 when no broker answers (said in the log and kept for /readyz),
 * so that the start's topic checks do not wait for them. */
int segd_pipeline_brokers_probe(segd_pipeline_t *p);
/* The consumer's error_cb (served by consumer_poll on the pipeline's thread);
 * opaque is its segd_klog_t. */
void segd_pipeline_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque);
/* Each step while no broker answers: asks again, at most every second, and
 * says when one does. */
void segd_pipeline_brokers_step(segd_pipeline_t *p);
/* 1 while no broker answers. Pipeline thread. */
int segd_pipeline_brokers_are_down(segd_pipeline_t *p);

/* ---------- metrics (consumer/pipeline_metrics.c) ---------- */

/* A written batch's figures into the registry: its positions, its write
 * time apply_s. */
void segd_pipeline_metrics_batch(segd_pipeline_t *p, const pipeline_position_t *pos,
                                 size_t npos, double apply_s);
/* The lag table and gauges, at most every LAG_REFRESH_MS. */
void segd_pipeline_metrics_lag(segd_pipeline_t *p);
/* The links step's counts: b and a are its stats before and after. */
void segd_pipeline_metrics_links(segd_pipeline_t *p, const segd_links_stats_t *b,
                                 const segd_links_stats_t *a);

#endif
