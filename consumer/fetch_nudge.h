/* Wakes librdkafka's fetcher when the consumer queue it stopped filling has
 * drained, so that a catch-up does not wait out librdkafka's one-second
 * re-check (DESIGN §4.1, bench/RESULTS.md "Session 16").
 *
 * librdkafka 2.0.2 (Debian 12) stops fetching a partition while the queue
 * holds queued.min.messages or queued.max.messages.kbytes, and its broker
 * thread then sleeps until an operation or a socket event wakes it, at most
 * a second (fetch.queue.backoff.ms, which shortens that, came in 2.1). A
 * consumer that drains the queue faster than that polls an empty queue for
 * the rest of the second. Any request the broker thread sends wakes it, and
 * on waking it decides again which partitions to fetch: so once the queue
 * has been full and is down to a quarter, one ListOffsets request
 * (rd_kafka_offsets_for_times of every assigned partition, which librdkafka
 * sends as one request per leading broker) wakes each broker. Its answer is
 * not used; one not answered within SEGD_FETCH_NUDGE_TIMEOUT_MS (a broker
 * down) is only a missed wake-up. A queue that never fills (a consumer at
 * the end of its topics) is never nudged. With client.rack set, a partition
 * fetched from a follower is not woken this way (ListOffsets goes to the
 * leader).
 *
 * State of one consumer, used on the thread that polls it. */
#ifndef SEGD_FETCH_NUDGE_H
#define SEGD_FETCH_NUDGE_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

typedef struct segd_fetch_nudge {
    rd_kafka_t *rk;          /* the consumer the state below is for */
    int64_t min_messages;    /* its queued.min.messages */
    int64_t max_bytes;       /* its queued.max.messages.kbytes, in bytes */
    double mean_bytes;       /* the messages' mean payload, running */
    int64_t peak;            /* the queue's longest since the last nudge */
    uint64_t seen;           /* messages noted */
} segd_fetch_nudge_t;

/* A zeroed struct is ready and holds nothing to free. reset forgets what
 * it saw (the consumer's partitions changed, or it was rebuilt). */
void segd_fetch_nudge_reset(segd_fetch_nudge_t *n);

/* Notes one message rk's poll returned, its payload_bytes (the mean tells
 * when the byte limit, not the length, is what filled the queue); every
 * 64 messages looks at rk's consumer queue, and when it
 * was full since the last nudge and is down to a quarter, sends the
 * wake-ups and returns 1; else 0. The leader lookup and the wait for
 * answers are each bounded by SEGD_FETCH_NUDGE_TIMEOUT_MS. A new rk starts
 * a new state. */
#define SEGD_FETCH_NUDGE_TIMEOUT_MS 50
int segd_fetch_nudge_seen(segd_fetch_nudge_t *n, rd_kafka_t *rk, size_t payload_bytes);

#endif
