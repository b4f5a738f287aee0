/* What the publisher's modules share; publisher.h is the public side. It
 * holds the publisher itself, one cycle's references to its outbox items,
 * the tally of the cycle's delivery reports, and the functions one module
 * calls in another. Only publisher/publisher*.c include it. */
#ifndef SEGD_PUBLISHER_INTERNAL_H
#define SEGD_PUBLISHER_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "publisher/publisher.h"
#include "transport/registry.h"
#include "wire/outbox.h"

#define MAX_PARTITIONS 4096
#define LAT_BUCKETS 10001 /* latencies in whole ms; the last bucket holds >= 10 s */
#define METADATA_WAIT_MS 10000 /* a change topic being auto-created answers "unknown" first */
#define PURGE_WAIT_MS 5000 /* serving the reports of purged messages (no broker involved) */

/* One user's share of a cycle: an outbox item, and the input partition it
 * came from (-1 = no input source: backfill, bulk load, erase). */
typedef struct item_ref {
    const segd_outbox_item_t *item;
    const segd_outbox_entry_t *entry;
    int32_t part;
    int32_t dest; /* the change partition, set by route_all before anything is produced */
} item_ref_t;

/* What the delivery reports of one cycle found. Every message carries its
 * cycle's id as its opaque, and a report with another id (a message of an
 * earlier, failed cycle that librdkafka still delivered) counts for
 * nothing: crediting it to this cycle could delete outbox entries whose own
 * messages were never acknowledged. */
typedef struct acks {
    uint64_t cycle; /* the id this cycle's messages carry */
    uint64_t ok, failed, bytes;
    uint64_t stale; /* reports of earlier cycles' messages, ignored */
    int64_t next[MAX_PARTITIONS]; /* per partition: highest acked offset + 1 */
    char error[256];
} acks_t;

struct segd_publisher {
    segd_publisher_opts_t o;
    segd_store_t *store;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    segd_registry_t *registry;
    int32_t schema_id; /* Confluent id; -1 until registered */
    int32_t member_schema_id; /* MemberEvents' Confluent id; -1 until registered */
    int32_t partitions; /* the change topic's partition count; 0 = not known yet */
    uint64_t cursor;   /* next outbox seq to read */
    int64_t known[MAX_PARTITIONS]; /* change positions already recorded */

    /* cycle state, reused */
    segd_buf_t *values;       /* copies of the cycle's outbox values */
    segd_outbox_entry_t *entries;
    size_t n_entries, cap_entries;
    uint64_t first_seq, last_seq; /* outbox seqs the cycle read */
    size_t scanned;               /* entries read, decodable or not */
    item_ref_t *refs;
    size_t n_refs, cap_refs;
    segd_profile_t acc, tmp, joined;
    segd_change_t change;
    size_t max_message; /* the producer's message.max.bytes less headroom */
    segd_buf_t msg;
    segd_batch_t *batch;
    acks_t acks;

    /* thread */
    pthread_t thread;
    int running;
    pthread_mutex_t mu; /* guards kicked, stop, st, lat */
    pthread_cond_t cv;
    int kicked, stop;
    segd_publisher_stats_t st;
    /* The commit time of the oldest unacknowledged entry as the last scan
     * saw it, 0 for none; guarded by mu. Its age is taken in get_stats, so
     * that the age keeps growing while a cycle waits through an outage. */
    int64_t oldest_committed_ms;
    uint64_t *lat; /* LAT_BUCKETS counters */
    segd_metric_t *latency; /* segd_change_latency_seconds; NULL = no registry */
    char last_fault[512];
};

/* publisher_cycle.c: one cycle, from reading the outbox to deleting what
 * the broker acknowledged. */
void segd_publisher_clear_cycle(segd_publisher_t *p);

/* publisher_producer.c: makes the change producer when there is none, and
 * replaces it after a fatal error; SEGD_OK and nothing done otherwise. */
segd_err_t segd_publisher_renew_producer(segd_publisher_t *p, char *errstr, size_t n);
/* Purges what it holds, unwaited for, and destroys it; none is a no-op. */
void segd_publisher_destroy_producer(segd_publisher_t *p);
/* Its delivery reports: each counts only for the cycle its message names. */
void segd_publisher_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* publisher_route.c: the change partition of each delta, and the registry
 * ids the values are framed with. */
segd_err_t segd_publisher_ensure_partitions(segd_publisher_t *p, int32_t need, char *errstr,
                                            size_t n);
segd_err_t segd_publisher_route_all(segd_publisher_t *p, char *errstr, size_t n);
segd_err_t segd_publisher_ensure_schema(segd_publisher_t *p, char *errstr, size_t n);
segd_err_t segd_publisher_ensure_member_schema(segd_publisher_t *p, char *errstr, size_t n);

/* publisher_produce.c: the cycle's change events, built and produced. */
segd_err_t segd_publisher_produce_cycle(segd_publisher_t *p, uint64_t *events,
                                        uint64_t *segments, char *errstr, size_t n);

#endif
