/* Tails the change topic (DESIGN §5) into an edge table. It is a librdkafka
 * consumer without a group, because each cache reads every partition. Each
 * partition starts at the snapshot manifest's position; for a snapshot of
 * units that is the fold of their manifests, the minimum over the units per
 * change partition (wire/manifest.h). Partitions the manifest does not
 * list, or all of them with from_beginning, start at the beginning, which
 * is safe because joining a delta twice is harmless.
 *
 * Messages that do not decode are counted and skipped; they never stop the
 * tail. A gap does, because the cache would otherwise silently miss
 * deltas. When the change topic no longer holds a delta the snapshot needs
 * (its log start is past the manifest's position, or past 0 for a
 * partition the manifest does not list), segd_tail_new fails. When
 * retention removes a position later (auto.offset.reset=error),
 * segd_tail_poll returns SEGD_TAIL_GAP. Either way the message is
 * "snapshot older than the change topic's retention: load a newer
 * snapshot". One thread drives a tail (poll and catch_up). */
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
    int64_t destroy_wait_ms;         /* how long destroy waits for librdkafka's teardown
                                      * before leaving it to its own thread; 0 = 10 s,
                                      * negative = not at all (tests of that path) */
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

/* Applies what arrives within timeout_ms, at most one batch, and returns
 * the number of events applied. A consumer error returns -1 after logging
 * it. SEGD_TAIL_GAP, also logged, is final: the edge table now misses
 * deltas and only a newer snapshot can fix that. */
int segd_tail_poll(segd_tail_t *t, int timeout_ms);

/* Polls until every partition has reached the high watermark it had when
 * called (SEGD_ERR_KAFKA after timeout_ms, SEGD_ERR_INVALID on a gap). */
segd_err_t segd_tail_catch_up(segd_tail_t *t, int64_t timeout_ms, char *errstr,
                              size_t errstr_size);

void segd_tail_get_stats(segd_tail_t *t, segd_tail_stats_t *st);

#endif
