/* libsegd-tail: libsegd-cache (segd/cache.h, all of it) plus a Kafka
 * consumer that keeps a segd_cache_t fresh from segd's change topic, the
 * way `segd cache` does (DESIGN §5): no consumer group (every cache reads
 * every partition), each partition started at the position the loaded
 * snapshot needs (the minimum over its units' manifests; partitions the
 * manifest does not list from offset 0, everything from the beginning when
 * no snapshot was loaded or from_beginning is set). A gap is never skipped:
 * when the topic no longer holds a delta the snapshot needs, making the
 * tail fails, or a later poll returns SEGD_CACHE_EGAP, for good.
 *
 * Link with `pkg-config --cflags --libs segd-tail` INSTEAD of segd-cache:
 * libsegd-tail contains the whole segd_cache_* API beside segd_cache_tail_*
 * (one copy of the table code in the process); it adds librdkafka.
 *
 * Threads: one thread drives a tail (poll, catch_up); lookups on the cache
 * run on any threads meanwhile; stats from any thread. The cache must
 * outlive its tail. Log lines (warnings: messages skipped, broker errors)
 * go to opts.log in logfmt. */
#ifndef SEGD_TAIL_PUBLIC_H
#define SEGD_TAIL_PUBLIC_H

#include <stdint.h>
#include <stdio.h>

#include "segd/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tail API's version, as SEGD_CACHE_VERSION: segd_cache_tail_version(). */
#define SEGD_TAIL_VERSION 10000

typedef struct segd_cache_tail segd_cache_tail_t;

typedef struct segd_cache_tail_opts {
    const char *brokers;            /* bootstrap servers; required */
    const char *topic;              /* NULL = "segments.changes" */
    int from_beginning;             /* ignore the snapshot's positions */
    const char *const *kafka_props; /* more librdkafka settings: key, value, ..., NULL */
    FILE *log;                      /* NULL = stderr */
} segd_cache_tail_opts_t;

typedef struct segd_cache_tail_stats {
    uint64_t applied;     /* change messages joined */
    uint64_t skipped;     /* messages that were not change events */
    int32_t partitions;
    int caught_up;        /* every partition reached the end it had at start */
    int64_t lag_messages; /* behind the high watermarks librdkafka last saw; -1 unknown */
} segd_cache_tail_stats_t;

SEGD_CACHE_API unsigned segd_cache_tail_version(void);

/* Connects and assigns every partition of the topic. SEGD_CACHE_EGAP when
 * the snapshot is older than the topic's retention, SEGD_CACHE_EKAFKA when
 * the brokers or the topic cannot be reached; why (NULL = not wanted)
 * receives the reason in English. */
SEGD_CACHE_API int segd_cache_tail_new(segd_cache_tail_t **out, segd_cache_t *c,
                                       const segd_cache_tail_opts_t *o, char *why,
                                       size_t why_size);
/* Applies what arrives within timeout_ms (at most one batch of 1000);
 * *applied (NULL = not wanted) = messages joined. SEGD_CACHE_EKAFKA: the
 * brokers answered with errors only (logged; librdkafka reconnects: keep
 * polling). SEGD_CACHE_EGAP is final: the cache misses deltas; load a newer
 * snapshot into a new cache. */
SEGD_CACHE_API int segd_cache_tail_poll(segd_cache_tail_t *t, int timeout_ms,
                                        uint64_t *applied);
/* Polls until every partition reached the high watermark it had when
 * called: a bidder serves once this returns SEGD_CACHE_OK. SEGD_CACHE_EKAFKA
 * after timeout_ms. */
SEGD_CACHE_API int segd_cache_tail_catch_up(segd_cache_tail_t *t, int64_t timeout_ms);
SEGD_CACHE_API void segd_cache_tail_stats(segd_cache_tail_t *t, segd_cache_tail_stats_t *st);
/* Stops and frees the consumer; t may be NULL. Returns within about 10 s:
 * librdkafka 2.0.2's teardown can take minutes after a gap (out-of-range
 * fetches), and is then left to finish, and free t, on a thread of its own. */
SEGD_CACHE_API void segd_cache_tail_destroy(segd_cache_tail_t *t);

#ifdef __cplusplus
}
#endif

#endif
