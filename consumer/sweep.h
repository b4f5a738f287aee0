/* The revocation sweep of `segd run` (issue 11, DESIGN §7): a partition
 * revoked from this instance keeps its users (a warm standby: a
 * cooperative-sticky rebalance often hands it back) until it has been away
 * for sweep.after.s; then the sweep deletes the users whose partition
 * (input.partitioner) this instance does not own, examining at most
 * sweep.records.per.s records a second, with a log line and counters.
 *
 * Exactness. Before the first user of a partition goes, one synced write
 * deletes the partition's input offset and marks it (meta sweep/<topic>/<p>):
 * from then on the partition counts as "no offset" (restored from its unit,
 * or replayed), so a partition returning mid-sweep never resumes over a
 * store with users missing. Its remaining users are stale for the same
 * reason, and one older than the unit's GC watermark could resurrect what
 * the unit no longer records (a removal dropped below W): while a partition
 * is marked and owned, the pipeline keeps it paused (segd_sweep_purging)
 * and the sweep deletes the rest at full speed; the mark goes when a pass
 * over the whole store has ended, and only then does the partition restore
 * or replay. A user of an owned partition is never deleted otherwise (the
 * pipeline thread runs the sweep between polls, and assignments change
 * only in its rebalance callback, so "not owned" cannot change under a
 * step), nor one whose restore is still running (a cancelled load may
 * still write it). A store that has applied misrouted events (producers
 * not keyed by user), or events it could not check (partition count
 * unknown then), may hold owned data under unowned users: no sweep begins
 * there.
 *
 * Threads: the pipeline's thread only. Time is passed in (monotonic ms). */
#ifndef SEGD_SWEEP_H
#define SEGD_SWEEP_H

#include <stdint.h>

#include "base/err.h"
#include "base/log.h"
#include "core/partition.h"
#include "store/store.h"

/* The store counters (segd_store_counter_get) that the pipeline writes with
 * each batch and that keep a sweep from beginning (consumer/pipeline.h has
 * them from here): events found misrouted, and events applied while their
 * topic's partition count was unknown (not checked for misrouting). */
#define SEGD_COUNTER_MISROUTED "misrouted"
#define SEGD_COUNTER_UNCHECKED "unchecked"

typedef struct segd_sweep_opts {
    int64_t after_ms;          /* sweep.after.s: revoked this long before a sweep;
                                * 0 = no new sweeps (marks left are still finished) */
    int64_t records_per_s;     /* sweep.records.per.s: records examined a second */
    segd_partitioner_t partitioner;
    size_t n_topics;           /* the input topics: no pass until every one's
                                * partition count is known (a user goes only when
                                * it is swept in all of them) */
    /* Whether a restore of the partition is queued or running (a cancelled
     * load may still be writing it): never swept meanwhile. May be NULL. */
    int (*restoring)(void *ctx, const char *topic, int32_t partition);
    void *restoring_ctx;
    const segd_log_t *log;     /* borrowed; NULL = the default logger (stderr) */
} segd_sweep_opts_t;

typedef struct segd_sweep_stats {
    uint64_t users_deleted;
    uint64_t records_examined;
    uint64_t partitions_swept; /* whose pass ended (mark cleared) */
    uint64_t passes;
    int disabled;              /* misrouted or unchecked events in this store, or a
                                * partition it could not track: no sweep */
} segd_sweep_stats_t;

typedef struct segd_sweep segd_sweep_t;

/* Reads the marks a previous run left (those partitions are swept first,
 * whatever after_ms says). now_ms starts every partition's "away" clock. */
segd_err_t segd_sweep_new(segd_sweep_t **out, segd_store_t *store, const segd_sweep_opts_t *o,
                          int64_t now_ms, char *errstr, size_t errstr_size);
void segd_sweep_destroy(segd_sweep_t *sw);

/* The input topic has `count` partitions (users are placed with it). */
segd_err_t segd_sweep_topic(segd_sweep_t *sw, const char *topic, int32_t count,
                            int64_t now_ms);
/* Assigned (owned = 1) or revoked (0) now. */
void segd_sweep_owned(segd_sweep_t *sw, const char *topic, int32_t partition, int owned,
                      int64_t now_ms);
/* Whether the partition is marked and the sweep may still delete its
 * users: its data must not come back yet. */
int segd_sweep_purging(const segd_sweep_t *sw, const char *topic, int32_t partition);
/* Something the sweep relies on failed (a partition it cannot track): from
 * now on it deletes nothing, in this run. */
void segd_sweep_disable(segd_sweep_t *sw, const char *why);
/* Whether steps have anything to do (a sweep configured, or marks left). */
int segd_sweep_active(const segd_sweep_t *sw);
/* Bounded work: at most the records the rate allows since the last step
 * (or ~50 ms when an owned partition waits for its purge). A failed write
 * is returned; the step is redone later. */
segd_err_t segd_sweep_step(segd_sweep_t *sw, int64_t now_ms, char *errstr, size_t errstr_size);
void segd_sweep_get_stats(const segd_sweep_t *sw, segd_sweep_stats_t *st);

#endif
