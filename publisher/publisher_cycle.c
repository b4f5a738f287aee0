/* One publisher cycle (publisher.h): read outbox entries, have
 * publisher_produce.c send their change events, wait for the delivery
 * reports, then delete the entries and record the change positions in one
 * store write. A delivery report counts only for the cycle whose id its
 * message carries, and a failed cycle purges its messages from librdkafka's
 * queue, so nothing is deleted without its own acknowledgement. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "publisher/publisher_int.h"

static segd_err_t grow_entries(segd_publisher_t *p)
{
    if (p->n_entries < p->cap_entries)
        return SEGD_OK;
    size_t cap = p->cap_entries ? p->cap_entries * 2 : 16;
    segd_buf_t *v = realloc(p->values, cap * sizeof(*v));
    if (v)
        p->values = v;
    segd_outbox_entry_t *e = realloc(p->entries, cap * sizeof(*e));
    if (e)
        p->entries = e;
    if (!v || !e)
        return SEGD_ERR_NOMEM;
    for (size_t i = p->cap_entries; i < cap; i++) {
        memset(&p->values[i], 0, sizeof(p->values[i]));
        segd_outbox_entry_init(&p->entries[i]);
    }
    p->cap_entries = cap;
    return SEGD_OK;
}

typedef struct read_ctx {
    segd_publisher_t *p;
    segd_err_t err;
} read_ctx_t;

static int read_entry(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen)
{
    read_ctx_t *rc = ctx;
    segd_publisher_t *p = rc->p;
    if ((rc->err = grow_entries(p)))
        return 1;
    segd_buf_t *b = &p->values[p->n_entries];
    b->len = 0;
    if (segd_buf_reserve(b, vlen ? vlen : 1)) {
        rc->err = SEGD_ERR_NOMEM;
        return 1;
    }
    memcpy(b->data, value, vlen);
    b->len = vlen;
    if (!p->scanned++)
        p->first_seq = seq;
    p->last_seq = seq;
    segd_err_t err = segd_outbox_decode(b->data, b->len, &p->entries[p->n_entries]);
    if (err == SEGD_ERR_NOMEM) {
        rc->err = err;
        return 1;
    }
    /* an undecodable entry cannot be published; it is dropped with a log
     * line (deleted with the cycle's range) rather than blocking the stream */
    if (err)
        segd_log_kv(p->o.log, SEGD_LOG_ERROR, "publisher", "outbox entry does not decode; dropped",
                    "seq=%" PRIu64, seq);
    else
        p->n_entries++;
    return 0;
}

static void record_latency(segd_publisher_t *p, int64_t now)
{
    for (size_t i = 0; i < p->n_entries; i++) {
        int64_t from = p->entries[i].event_ms;
        if (from <= 0)
            continue;
        int64_t ms = now - from < 0 ? 0 : now - from;
        p->lat[ms < LAT_BUCKETS - 1 ? ms : LAT_BUCKETS - 1]++;
        segd_metric_observe(p->latency, NULL, (double)ms / 1000.0);
        if (ms > p->st.latency_max_ms)
            p->st.latency_max_ms = ms;
    }
}

/* Deletes the acknowledged entries and records the change positions. */
static segd_err_t commit_cycle(segd_publisher_t *p, uint64_t first, uint64_t end,
                               char *errstr, size_t n)
{
    segd_batch_clear(p->batch);
    /* point deletes: a range tombstone per cycle would pile up in the
     * memtable and slow every later outbox iterator */
    for (uint64_t seq = first; seq < end; seq++)
        segd_batch_outbox_delete(p->batch, seq);
    for (int32_t i = 0; i < MAX_PARTITIONS; i++)
        if (p->acks.next[i] > p->known[i])
            segd_batch_set_change_position(p->batch, p->o.topic, i, p->acks.next[i]);
    segd_err_t err = segd_store_write(p->store, p->batch, errstr, n);
    if (err)
        return err;
    for (int32_t i = 0; i < MAX_PARTITIONS; i++)
        if (p->acks.next[i] > p->known[i])
            p->known[i] = p->acks.next[i];
    return SEGD_OK;
}

/* Starts a cycle with a new id: reports of the messages of earlier cycles
 * no longer count (dr_cb). */
void segd_publisher_clear_cycle(segd_publisher_t *p)
{
    for (size_t i = 0; i < p->n_entries; i++)
        segd_outbox_entry_free(&p->entries[i]);
    p->n_entries = 0;
    p->scanned = 0;
    uint64_t cycle = p->acks.cycle + 1;
    memset(&p->acks, 0, sizeof(p->acks));
    p->acks.cycle = cycle;
}

/* Takes a failed cycle's messages out of librdkafka's queue, whether queued
 * or in flight. Left there, they would be sent along with every retry's
 * copies, since message.timeout.ms is 0, and the queue would keep growing;
 * their late reports would also arrive during a later cycle. Purged messages
 * report at once with an error, and serving those reports here leaves
 * nothing of this cycle behind. A message purged in flight may still reach
 * the topic, which is a harmless duplicate of the retry's. */
static void abandon_cycle(segd_publisher_t *p)
{
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    int64_t give_up = segd_mono_ms() + PURGE_WAIT_MS;
    while (rd_kafka_outq_len(p->rk) > 0 && segd_mono_ms() < give_up)
        rd_kafka_poll(p->rk, 10);
}

static segd_err_t wait_acks(segd_publisher_t *p, uint64_t events, char *errstr, size_t n)
{
    rd_kafka_flush(p->rk, (int)p->o.ack_timeout_ms);
    if (p->acks.failed)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "change topic %s: %s", p->o.topic,
                         p->acks.error);
    if (p->acks.ok != events)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "change topic %s: %" PRIu64
                         " of %" PRIu64 " deltas unacknowledged", p->o.topic,
                         events - p->acks.ok, events);
    return SEGD_OK;
}

segd_err_t segd_publisher_cycle(segd_publisher_t *p, size_t *acked, char *errstr, size_t n)
{
    if (acked)
        *acked = 0;
    segd_publisher_clear_cycle(p);
    segd_err_t err = segd_publisher_renew_producer(p, errstr, n);
    if (!err)
        err = segd_publisher_ensure_schema(p, errstr, n);
    if (err)
        return err;
    read_ctx_t rc = {p, SEGD_OK};
    err = segd_store_outbox_scan(p->store, p->cursor, p->o.max_entries, read_entry, &rc,
                                 errstr, n);
    if (!err && rc.err)
        err = segd_errf(rc.err, errstr, n, "outbox: %s", segd_err_str(rc.err));
    if (err || p->scanned == 0) {
        pthread_mutex_lock(&p->mu);
        p->oldest_committed_ms = err ? p->oldest_committed_ms : 0;
        pthread_mutex_unlock(&p->mu);
        return err;
    }
    pthread_mutex_lock(&p->mu);
    p->oldest_committed_ms = p->n_entries ? p->entries[0].committed_at_ms : 0;
    pthread_mutex_unlock(&p->mu);
    uint64_t events = 0, segments = 0;
    /* before anything is produced: a registry that refuses the subject must
     * not make every retry of the cycle send its deltas again */
    for (size_t i = 0; !err && i < p->n_entries; i++)
        if (p->entries[i].kind == SEGD_OUTBOX_MEMBER)
            err = segd_publisher_ensure_member_schema(p, errstr, n);
    if (!err)
        err = segd_publisher_produce_cycle(p, &events, &segments, errstr, n);
    if (!err)
        err = wait_acks(p, events, errstr, n);
    if (err) {
        abandon_cycle(p);
        return err;
    }
    uint64_t first = p->first_seq, end = p->last_seq + 1;
    if (!err)
        err = commit_cycle(p, first, end, errstr, n);
    if (err)
        return err;
    p->cursor = end;
    pthread_mutex_lock(&p->mu);
    record_latency(p, segd_wall_ms());
    p->st.cycles++;
    p->st.entries += p->n_entries;
    p->st.events += events;
    p->st.segments += segments;
    p->st.bytes += p->acks.bytes;
    pthread_mutex_unlock(&p->mu);
    if (acked)
        *acked = p->scanned;
    return SEGD_OK;
}

segd_err_t segd_publisher_drain(segd_publisher_t *p, int64_t timeout_ms, char *errstr,
                                size_t n)
{
    int64_t t0 = segd_mono_ms();
    for (;;) {
        size_t acked = 0;
        segd_err_t err = segd_publisher_cycle(p, &acked, errstr, n);
        /* the store's exact depth, not the cursor: sequences of batches never
         * written leave gaps the cursor never passes (every idle stop then
         * waited the whole timeout and warned of deltas that did not exist) */
        if (!err && acked == 0 && segd_store_outbox_depth(p->store) == 0)
            return SEGD_OK;
        if (segd_mono_ms() - t0 >= timeout_ms)
            return err ? err
                       : segd_errf(SEGD_ERR_KAFKA, errstr, n, "outbox not drained in %" PRId64
                                   " ms", timeout_ms);
        if (err || acked == 0)
            segd_sleep_ms(err ? 200 : 10);
    }
}
