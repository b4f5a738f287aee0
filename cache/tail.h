/* Tails the change topic (DESIGN §5) into an edge table: a librdkafka
 * consumer without a group (each cache reads every partition), assigned at
 * a snapshot manifest's positions (for a snapshot of units, the fold of
 * their manifests: per change partition the minimum over the units; see
 * wire/manifest.h) (partitions the manifest does not list,
 * or all of them with from_beginning, start at the beginning: re-joining a
 * delta is harmless). Messages that do not decode are counted and skipped;
 * they never stop the tail. A gap does: when the change topic no longer
 * holds a delta the snapshot needs (its log start is past the manifest's
 * position, or past a partition the manifest does not list, which needs
 * offset 0), segd_tail_new fails, and a position that retention removes
 * later (auto.offset.reset=error) makes segd_tail_poll return SEGD_TAIL_GAP;
 * either way: "snapshot older than the change topic's retention: load a
 * newer snapshot". One thread drives a tail (poll/catch_up). */
#ifndef SEGD_TAIL_H
#define SEGD_TAIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "cache/edge.h"
#include "wire/manifest.h"

typedef struct segd_tail segd_tail_t;

typedef struct segd_tail_opts {
    const char *brokers;
    const char *topic;               /* default "segments.changes" */
    int from_beginning;              /* ignore the manifest's positions */
    int32_t schema_id;               /* Confluent frames: ChangeEvent's id, -1 = any */
    int32_t member_schema_id;        /* Confluent frames: MemberEvent's id, -1 = any
                                      * (the body's first byte tells, wire/member.h) */
    const char *const *kafka_props;  /* extra librdkafka settings: k, v, ..., NULL */
    const segd_log_t *log;           /* borrowed, outlives the tail; NULL = default */
} segd_tail_opts_t;

typedef struct segd_tail_stats {
    uint64_t applied;       /* change events joined */
    uint64_t skipped;       /* did not decode */
    int64_t newest_committed_ms; /* committed_at_ms of the newest delta seen */
    int64_t last_applied_ms;     /* wall time of the last applied event */
    int partitions;
    int caught_up; /* every partition reached the end offset it had at start */
    int64_t lag_messages; /* sum over partitions of the high watermark librdkafka last
                             saw less the next offset to apply; -1 = not known yet */
} segd_tail_stats_t;

#define SEGD_TAIL_GAP (-2)

void segd_tail_opts_default(segd_tail_opts_t *o);

/* manifest may be NULL (start at the beginning). edge is borrowed. */
segd_err_t segd_tail_new(segd_tail_t **out, segd_edge_t *edge, const segd_tail_opts_t *o,
                         const segd_manifest_t *manifest, char *errstr, size_t errstr_size);
void segd_tail_destroy(segd_tail_t *t);

/* Applies what arrives within timeout_ms (at most one batch); returns the
 * number of events applied, -1 on a consumer error (logged), or
 * SEGD_TAIL_GAP (logged; final: the edge table misses deltas). */
int segd_tail_poll(segd_tail_t *t, int timeout_ms);

/* Polls until every partition has reached the high watermark it had when
 * called (SEGD_ERR_KAFKA after timeout_ms, SEGD_ERR_INVALID on a gap). */
segd_err_t segd_tail_catch_up(segd_tail_t *t, int64_t timeout_ms, char *errstr,
                              size_t errstr_size);

void segd_tail_get_stats(segd_tail_t *t, segd_tail_stats_t *st);

#endif
