/* The memory budget's split; see memory.h. The shares and why they are what
 * they are are in DESIGN §4.1 (the table there is this function in prose). */
#include "config/memory.h"

#define MIB (1LL << 20)

/* bytes a message costs while its batch is built: the fetched message, the
 * decoded event and its merge operands, the outbox copy in the WriteBatch */
#define BATCH_BYTES_PER_MESSAGE (16LL << 10)
/* bytes an ingested message costs in a publish cycle: its operands read back
 * from the outbox, decoded, joined per user and encoded as change events */
#define CYCLE_BYTES_PER_MESSAGE (1LL << 10)
/* librdkafka's defaults, which the budget never exceeds: more does not fetch
 * faster, and a larger producer queue only delays back-pressure */
#define FETCH_MAX_BYTES_CAP 52428800LL
#define PARTITION_FETCH_CAP (1LL << 20)
#define PRODUCER_QUEUE_KB_CAP 1048576LL
#define QUEUED_KB_CAP 2097151LL  /* librdkafka's upper bound */
/* librdkafka 2.0.2 looks at a full queue again only after a second (its
 * fetch.queue.backoff.ms came in 2.1) unless consumer/fetch_nudge.c wakes
 * it; the queue holds the budget's share, and three seconds of what the
 * pipeline drains on 2 cores (~300 000 messages/s) is more than enough */
#define QUEUED_MESSAGES_CAP 1000000LL
#define QUEUED_MESSAGES_MIN 1000LL
#define FETCH_MAX_BYTES_MIN 1000000LL /* librdkafka: >= message.max.bytes' default */
#define MEMTABLE_CAP_MB 512LL    /* 4 memtables of 128 MiB: more only slows flushes */
#define BATCH_CAP 1000LL         /* bench ingest: 1000 > 5000 > 20000 on 2 cores */
#define BATCH_MIN 100LL

static int64_t clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* percent of the splittable bytes */
static int64_t share(int64_t bytes, int percent) { return bytes / 100 * percent; }

static void split_kafka(int64_t bytes, segd_memory_split_t *m)
{
    int64_t fetch = share(bytes, 28);
    /* the queue may be overshot by a fetch response in flight, whose
     * messages cost their per-message structures as the queue's do: a tenth
     * of the share as its payload, charged at a typical message's full cost */
    m->fetch_max_bytes = clamp(fetch / 10, FETCH_MAX_BYTES_MIN, FETCH_MAX_BYTES_CAP);
    int64_t overshoot = m->fetch_max_bytes / SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE *
                        (SEGD_MEMORY_QUEUED_MESSAGE_BYTES + SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE);
    /* the queue's length and payload: a full queue of typical messages
     * costs what is left, its per-message structures included */
    int64_t queue = fetch - overshoot;
    m->fetch_queue_messages =
        clamp(queue / (SEGD_MEMORY_QUEUED_MESSAGE_BYTES + SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE),
              QUEUED_MESSAGES_MIN, QUEUED_MESSAGES_CAP);
    int64_t payload = queue - m->fetch_queue_messages * SEGD_MEMORY_QUEUED_MESSAGE_BYTES;
    m->fetch_queue_kb = clamp(payload >> 10, 1024, QUEUED_KB_CAP);
    m->partition_fetch_bytes = clamp(fetch / 32, 64 << 10, PARTITION_FETCH_CAP);
}

static void split_publisher(int64_t bytes, int64_t batch, segd_memory_split_t *m)
{
    int64_t pub = share(bytes, 8);
    m->producer_queue_kb = clamp((pub / 2) >> 10, 1024, PRODUCER_QUEUE_KB_CAP);
    m->publisher_entries = clamp(pub / 2 / (batch * CYCLE_BYTES_PER_MESSAGE), 4, 64);
}

void segd_memory_split(int64_t limit_mb, int64_t batch_max_messages, segd_memory_split_t *m)
{
    m->limit_mb = clamp(limit_mb, SEGD_MEMORY_MIN_MB, SEGD_MEMORY_MAX_MB);
    int64_t bytes = (m->limit_mb - SEGD_MEMORY_FIXED_MB) * MIB;
    m->memtable_mb = share(bytes, 25) / MIB;
    int64_t surplus = 0; /* what memtables cannot use goes to the block cache */
    if (m->memtable_mb > MEMTABLE_CAP_MB) {
        surplus = m->memtable_mb - MEMTABLE_CAP_MB;
        m->memtable_mb = MEMTABLE_CAP_MB;
    }
    m->write_buffer_mb = clamp(m->memtable_mb / SEGD_MEMORY_WRITE_BUFFERS, 1, 128);
    m->block_cache_mb = share(bytes, 22) / MIB + surplus;
    m->batch_max_messages = clamp(share(bytes, 5) / BATCH_BYTES_PER_MESSAGE, BATCH_MIN,
                                  BATCH_CAP);
    split_kafka(bytes, m);
    split_publisher(bytes, batch_max_messages > 0 ? batch_max_messages : m->batch_max_messages,
                    m);
    m->restore_mb = share(bytes, 5) / MIB;
    /* the remaining 7 %: snapshot exports, the DLQ producer, heap slack */
}
