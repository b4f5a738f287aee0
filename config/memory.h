/* The one memory budget (memory.limit.mb, DESIGN §4.1): how one number is
 * split among RocksDB's block cache and memtables, librdkafka's fetch queue,
 * the change publisher's cycle, the ingest batches and a restore's sort.
 * Pure arithmetic, no state: config/config.c applies the split to the keys
 * an operator did not set, store/, the pipeline, the publisher and the
 * restorer are sized from the shares (app/app.c, app/daemon.c). */
#ifndef SEGD_MEMORY_H
#define SEGD_MEMORY_H

#include <stdint.h>

#define SEGD_MEMORY_DEFAULT_MB 1024
#define SEGD_MEMORY_MIN_MB 128
#define SEGD_MEMORY_MAX_MB (1 << 20)
/* code, libraries, thread stacks and allocator slack: taken off the top */
#define SEGD_MEMORY_FIXED_MB 48

typedef struct segd_memory_split {
    int64_t limit_mb;              /* memory.limit.mb */
    int64_t block_cache_mb;        /* store.block.cache.mb: RocksDB's LRU cache,
                                    * index and filter blocks charged to it */
    int64_t memtable_mb;           /* every column family's memtables together
                                    * (RocksDB's db_write_buffer_size) */
    int64_t write_buffer_mb;       /* one memtable (write_buffer_size); up to
                                    * SEGD_MEMORY_WRITE_BUFFERS of them per family */
    int64_t fetch_queue_kb;        /* librdkafka queued.max.messages.kbytes: the
                                    * queue's payload */
    int64_t fetch_queue_messages;  /* librdkafka queued.min.messages: the queue's
                                    * length, each message costing
                                    * SEGD_MEMORY_QUEUED_MESSAGE_BYTES beyond its
                                    * payload */
    int64_t fetch_max_bytes;       /* fetch.max.bytes (one response in flight per
                                    * broker, on top of the queue) */
    int64_t partition_fetch_bytes; /* max.partition.fetch.bytes */
    int64_t producer_queue_kb;     /* the change producer's queue.buffering.max.kbytes */
    int64_t publisher_entries;     /* outbox entries read per publish cycle */
    int64_t batch_max_messages;    /* batch.max.messages */
    int64_t restore_mb;            /* a restore's sort (restore.from) */
} segd_memory_split_t;

#define SEGD_MEMORY_WRITE_BUFFERS 4

/* What librdkafka 2.0.2 (Debian 12) keeps per queued message beyond its
 * payload, which queued.max.messages.kbytes does not count: measured 368,
 * 520, 824 and 2348 bytes per message of 50, 200, 500 and 2000 bytes
 * (bench/RESULTS.md, issue 31) */
#define SEGD_MEMORY_QUEUED_MESSAGE_BYTES 320
/* the message the queue's length and a fetch response's cost are sized
 * for: an event of ~20 segments is ~200 bytes */
#define SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE 200

/* Splits limit_mb (clamped to [SEGD_MEMORY_MIN_MB, SEGD_MEMORY_MAX_MB]).
 * batch_max_messages > 0 is an operator's explicit batch size: the
 * publisher's cycle is sized for batches of that many messages; 0 = the
 * budget's own. Every share is within its consumer's accepted range. */
void segd_memory_split(int64_t limit_mb, int64_t batch_max_messages,
                       segd_memory_split_t *out);

#endif
