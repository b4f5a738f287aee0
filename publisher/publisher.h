/* The change-stream publisher (DESIGN §5). It turns outbox entries into
 * change events on the change topic, and deletes them once the broker has
 * acknowledged every event made from them. A cycle reads up to max_entries
 * entries and joins each user's operands per source input partition into one
 * delta (the §3 join, so coalescing is exact). It produces each delta, keyed
 * by user id, to the change partition of its input partition; a delta with
 * no input source goes to the user's partition under input.partitioner.
 * Retirements add one RETIRE control event per change partition. The cycle
 * then waits for the acks, and deletes the entries and records the change
 * topic's acknowledged positions in one store write. A failure anywhere
 * repeats the cycle later. Nothing is deleted that was not acknowledged, and
 * duplicates are harmless to readers. The publisher runs on its own thread
 * (start/kick/stop) or synchronously (cycle/drain).
 *
 * Threads: new, start, stop, destroy from the owning thread; kick,
 * get_stats and reset_latency from any thread. cycle and drain run on the
 * caller's thread and must not be used while the background thread runs.
 * Ownership: the store is borrowed and must outlive the publisher; the
 * options struct is copied but its strings are borrowed for the publisher's
 * life (topic is used at every cycle); kafka_props are read during new only.
 * The publisher owns its producer, registry client, batch and thread. */
#ifndef SEGD_PUBLISHER_H
#define SEGD_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "core/partition.h"
#include "wire/change.h"
#include "wire/change_frame.h"
#include "metrics/registry.h"
#include "store/store.h"

#define SEGD_DEFAULT_CHANGES_TOPIC "segments.changes"

typedef struct segd_publisher segd_publisher_t;

typedef struct segd_publisher_opts {
    const char *brokers;
    const char *topic;              /* default "segments.changes" */
    segd_change_framing_t framing;  /* Confluent needs registry_url */
    const char *registry_url;       /* schema registered under "<topic>-value" */
    const char *registry_auth;      /* user:password */
    const char *registry_ca;
    const char *compression;        /* lz4 (default) | zstd */
    segd_partitioner_t partitioner; /* input.partitioner: the bucket field and the
                                     * partition of deltas with no input source */
    size_t max_entries;             /* outbox entries per cycle, default 64 */
    int64_t queue_kb;               /* the producer's queue.buffering.max.kbytes;
                                     * 0 (default) = librdkafka's (1 GiB) */
    size_t max_delta_entries;       /* larger deltas go out in parts, default 32768;
                                     * parts are also cut to fit the producer's
                                     * message.max.bytes (less 1 KiB + 1/64) */
    int64_t retry_max_ms;           /* backoff cap, default 5000 */
    int64_t ack_timeout_ms;         /* wait for acks per cycle, default 30000 */
    const char *const *kafka_props; /* extra librdkafka producer settings: k, v, ..., NULL */
    const segd_log_t *log;          /* borrowed, outlives the publisher; NULL = default */
    int brokers_down;               /* the caller found no broker answering: new does
                                     * not wait for the change topic's metadata (the
                                     * first cycle asks); default 0 */
} segd_publisher_opts_t;

typedef struct segd_publisher_stats {
    uint64_t cycles;          /* completed (acknowledged and deleted) */
    uint64_t entries;         /* outbox entries acknowledged and deleted */
    uint64_t events;          /* change events acknowledged */
    uint64_t bytes;           /* change event value bytes acknowledged */
    uint64_t segments;        /* entries carried by those events */
    uint64_t retries;         /* failed cycles (broker, registry or store) */
    uint64_t producer_renewals; /* change producers replaced after a fatal error */
    uint64_t depth;           /* outbox entries not yet acknowledged (exact) */
    int64_t oldest_unacked_ms;/* age of the oldest unacknowledged entry; 0 = none */
    int64_t latency_p50_ms;   /* input timestamp -> acknowledged, per entry */
    int64_t latency_p99_ms;
    int64_t latency_max_ms;
} segd_publisher_stats_t;

void segd_publisher_opts_default(segd_publisher_opts_t *o);

/* store is borrowed and must outlive the publisher. */
segd_err_t segd_publisher_new(segd_publisher_t **out, segd_store_t *store,
                              const segd_publisher_opts_t *o, char *errstr,
                              size_t errstr_size);
void segd_publisher_destroy(segd_publisher_t *p);

/* One cycle on the caller's thread; *acked (may be NULL) = entries deleted. */
segd_err_t segd_publisher_cycle(segd_publisher_t *p, size_t *acked, char *errstr,
                                size_t errstr_size);
/* Cycles until the outbox is empty or timeout_ms passes (SEGD_ERR_KAFKA). */
segd_err_t segd_publisher_drain(segd_publisher_t *p, int64_t timeout_ms, char *errstr,
                                size_t errstr_size);

/* The change topic's partition count as last read from the brokers; 0 when
 * they could not be asked yet (every cycle asks again). */
int32_t segd_publisher_partitions(const segd_publisher_t *p);

/* Another topic's partition count, asked through the publisher's producer
 * (segd run checks its input topics against the change topic with it
 * before its consumer subscribes). */
segd_err_t segd_publisher_topic_partitions(segd_publisher_t *p, const char *topic,
                                           int32_t *count, char *errstr, size_t n);

/* Background thread: cycles when kicked (after each ingest batch) and at
 * least every 100 ms, backs off on failures, logs a fault once. */
segd_err_t segd_publisher_start(segd_publisher_t *p, char *errstr, size_t errstr_size);
void segd_publisher_kick(segd_publisher_t *p);
/* Stops the thread after trying to drain for up to drain_ms. */
void segd_publisher_stop(segd_publisher_t *p, int64_t drain_ms);

/* Observes each acknowledged outbox entry's event -> ack latency into m's
 * segd_change_latency_seconds histogram (m borrowed; must outlive the
 * publisher). Thread-safe. The other change-stream figures come from
 * segd_publisher_get_stats at scrape time. */
void segd_publisher_set_metrics(segd_publisher_t *p, segd_metrics_t *m);

/* Thread-safe. */
void segd_publisher_get_stats(segd_publisher_t *p, segd_publisher_stats_t *st);
/* Forgets the latencies seen so far (benchmarks: measure after warm-up). */
void segd_publisher_reset_latency(segd_publisher_t *p);

#endif
