/* Kafka -> store ingest; see pipeline.h. One thread: librdkafka's rebalance
 * callback runs inside consumer_poll on this thread, so it may write the
 * pending batch before partitions leave. */
#define _GNU_SOURCE
#include "consumer/pipeline.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/apply.h"
#include "transport/kconf.h"
#include "transport/registry.h"
#include "base/clock.h"
#include "base/utf8.h"

#define MAX_POSITIONS 1024
/* librdkafka's default message.max.bytes is 1000000: a dead letter larger
 * than this would be refused forever and stall its partition. Longer ones
 * keep their head; segd.source points at the original, still in the topic. */
#define DLQ_MAX_VALUE 900000
#define SEEK_TIMEOUT_MS 5000
/* librdkafka 2.0.2's cooperative-sticky assignor aborts in rd_kafka_destroy
 * when a member that joined stops before its first assignment (upstream
 * #4312, fixed in 2.3.0): close waits up to this long for it. */
#define FIRST_ASSIGNMENT_WAIT_MS 30000

typedef struct position {
    char topic[256];
    int32_t partition;
    int64_t next;
} position_t;

/* An assigned partition whose stored offset could not be read: it stays
 * paused until a read succeeds (retry_unread). */
typedef struct unread {
    char topic[256];
    int32_t partition;
    int logged;       /* the read error was reported */
    int64_t fallback; /* where to start without a stored offset (a failed rewind's
                         message); -1 = input.offset.reset */
} unread_t;

/* A dead letter waiting to be delivered before its offset is written. One in
 * flight is never produced again: librdkafka retries it itself until its
 * delivery report, and a second copy would be a duplicate dead letter. */
enum { DL_PENDING, DL_IN_FLIGHT, DL_DELIVERED };
typedef struct dead_letter {
    char *key, *value;
    size_t klen, vlen;
    char reason[256];
    char source[300];
    char original_size[24]; /* set when the value was truncated */
    int state;              /* DL_PENDING, DL_IN_FLIGHT, DL_DELIVERED (delivery report) */
} dead_letter_t;

struct segd_pipeline {
    const segd_config_t *cfg;
    segd_store_t *store;
    volatile sig_atomic_t *stop;
    rd_kafka_t *consumer;
    rd_kafka_t *producer; /* dead letters */
    segd_pipeline_hooks_t hooks; /* the change publisher, through its owner */
    segd_registry_t *registry;
    segd_avro_codec_t *codec;
    segd_applier_t ap;
    segd_event_t ev;
    position_t pos[MAX_POSITIONS];
    size_t npos;
    dead_letter_t *dlq;
    size_t ndlq, capdlq;
    unread_t unread[MAX_POSITIONS];
    size_t nunread;
    int held;       /* back-pressure: every assigned partition is paused */
    int rebalanced; /* the group has called the rebalance callback */
    segd_pipeline_stats_t st;
    char last_fault[512];
    int64_t gc_next_ms;    /* monotonic time of the next GC watermark advance */
    int64_t flush_next_ms; /* and of the next forced flush of the profiles */
};

static const char *const reason_names[SEGD_DLQ_REASONS] = {
    "decode", "unknown_schema", "oversize", "limit", "invalid", "key_mismatch", "bad_utf8",
    "too_late", "from_future"};

const char *segd_dlq_reason_name(int reason)
{
    return reason >= 0 && reason < SEGD_DLQ_REASONS ? reason_names[reason] : "?";
}


/* Exponential backoff for fault waits; logs the fault once per change. */
static int64_t backoff(segd_pipeline_t *p, int64_t wait_ms, const char *fault)
{
    if (strcmp(p->last_fault, fault) != 0) {
        fprintf(stderr, "segd: waiting: %s (retrying with backoff, nothing committed)\n",
                fault);
        snprintf(p->last_fault, sizeof(p->last_fault), "%s", fault);
    }
    p->st.retries++;
    segd_sleep_ms(wait_ms);
    wait_ms *= 2;
    return wait_ms > p->cfg->retry_max_ms ? p->cfg->retry_max_ms : wait_ms;
}

static void fault_cleared(segd_pipeline_t *p)
{
    if (p->last_fault[0]) {
        fprintf(stderr, "segd: resumed after: %s\n", p->last_fault);
        p->last_fault[0] = 0;
    }
}

/* ---------- batch state ---------- */

static void note_position(segd_pipeline_t *p, const char *topic, int32_t partition,
                          int64_t next)
{
    for (size_t i = 0; i < p->npos; i++)
        if (p->pos[i].partition == partition && !strcmp(p->pos[i].topic, topic)) {
            if (next > p->pos[i].next)
                p->pos[i].next = next;
            return;
        }
    if (p->npos == MAX_POSITIONS)
        return; /* unreachable with sane partition counts; the offset is re-read */
    position_t *q = &p->pos[p->npos++];
    snprintf(q->topic, sizeof(q->topic), "%s", topic);
    q->partition = partition;
    q->next = next;
}

static segd_err_t add_dead_letter(segd_pipeline_t *p, const rd_kafka_message_t *m,
                                  int reason, const char *why)
{
    dead_letter_t *arr = segd_array_grow(p->dlq, &p->capdlq, p->ndlq + 1, sizeof(*arr));
    if (!arr)
        return SEGD_ERR_NOMEM;
    p->dlq = arr;
    dead_letter_t *d = &p->dlq[p->ndlq];
    memset(d, 0, sizeof(*d));
    size_t vlen = m->len < DLQ_MAX_VALUE ? m->len : DLQ_MAX_VALUE;
    if (vlen < m->len)
        snprintf(d->original_size, sizeof(d->original_size), "%zu", m->len);
    d->key = m->key_len ? malloc(m->key_len) : NULL;
    d->value = vlen ? malloc(vlen) : NULL;
    if ((m->key_len && !d->key) || (vlen && !d->value)) {
        free(d->key);
        free(d->value);
        return SEGD_ERR_NOMEM;
    }
    if (m->key_len)
        memcpy(d->key, m->key, m->key_len);
    if (vlen)
        memcpy(d->value, m->payload, vlen);
    d->klen = m->key_len;
    d->vlen = vlen;
    snprintf(d->reason, sizeof(d->reason), "%s", why);
    snprintf(d->source, sizeof(d->source), "%s/%" PRId32 "/%" PRId64,
             rd_kafka_topic_name(m->rkt), m->partition, m->offset);
    p->ndlq++;
    p->st.dlq[reason]++;
    return SEGD_OK;
}

static void clear_dead_letters(segd_pipeline_t *p)
{
    for (size_t i = 0; i < p->ndlq; i++) {
        free(p->dlq[i].key);
        free(p->dlq[i].value);
    }
    p->ndlq = 0;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk, (void)opaque;
    if (m->_private) /* a failed one is produced again by the next attempt */
        ((dead_letter_t *)m->_private)->state = m->err ? DL_PENDING : DL_DELIVERED;
}

/* Produces every undelivered dead letter and waits for the broker's acks. */
static segd_err_t deliver_dead_letters(segd_pipeline_t *p, char *errstr, size_t n)
{
    int64_t wait = 100;
    for (;;) {
        size_t undelivered = 0;
        for (size_t i = 0; i < p->ndlq; i++) {
            dead_letter_t *d = &p->dlq[i];
            if (d->state == DL_DELIVERED)
                continue;
            undelivered++;
            if (d->state == DL_IN_FLIGHT)
                continue;
            rd_kafka_headers_t *h = rd_kafka_headers_new(3);
            rd_kafka_header_add(h, "segd.error", -1, d->reason, -1);
            rd_kafka_header_add(h, "segd.source", -1, d->source, -1);
            if (d->original_size[0])
                rd_kafka_header_add(h, "segd.original_size", -1, d->original_size, -1);
            if (rd_kafka_producev(p->producer, RD_KAFKA_V_TOPIC(p->cfg->dlq_topic),
                                  RD_KAFKA_V_KEY(d->key, d->klen),
                                  RD_KAFKA_V_VALUE(d->value, d->vlen),
                                  RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END))
                rd_kafka_headers_destroy(h); /* not enqueued: retried below */
            else
                d->state = DL_IN_FLIGHT;
        }
        if (!undelivered)
            return SEGD_OK;
        rd_kafka_flush(p->producer, 10000);
        int all = 1;
        for (size_t i = 0; i < p->ndlq; i++)
            all &= p->dlq[i].state == DL_DELIVERED;
        if (all)
            return SEGD_OK;
        if (*p->stop)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "dead-letter topic %s unreachable",
                             p->cfg->dlq_topic);
        wait = backoff(p, wait, "dead-letter produce failed");
    }
}

/* Dead letters first, then data + offsets in one WriteBatch, then the Kafka
 * commit. A failure leaves the batch intact for the next attempt. */
static segd_err_t flush_batch(segd_pipeline_t *p, char *errstr, size_t n)
{
    if (!p->npos)
        return SEGD_OK;
    segd_err_t err = deliver_dead_letters(p, errstr, n);
    if (err)
        return err;
    for (size_t i = 0; i < p->npos; i++)
        segd_batch_set_offset(p->ap.batch, p->pos[i].topic, p->pos[i].partition,
                              p->pos[i].next);
    int64_t wait = 100;
    while ((err = segd_applier_flush(&p->ap, errstr, n)) != SEGD_OK) {
        if (*p->stop || err == SEGD_ERR_ABORTED) /* a stopped store needs a restart */
            return err;
        wait = backoff(p, wait, errstr);
    }
    rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new((int)p->npos);
    for (size_t i = 0; i < p->npos; i++)
        rd_kafka_topic_partition_list_add(offs, p->pos[i].topic, p->pos[i].partition)
            ->offset = p->pos[i].next;
    rd_kafka_commit(p->consumer, offs, 1);
    rd_kafka_topic_partition_list_destroy(offs);
    if (p->hooks.committed)
        p->hooks.committed(p->hooks.ctx);
    p->npos = 0;
    clear_dead_letters(p);
    p->st.batches++;
    fault_cleared(p);
    return SEGD_OK;
}

/* ---------- partition positions ----------
 * No polled message is ever dropped without being applied or its partition
 * being put back in front of it: librdkafka's position is already past
 * every message it returned, and the next batch stores offsets past them. */

static rd_kafka_topic_partition_list_t *one_partition(const char *topic, int32_t partition,
                                                      int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    return l;
}

static int64_t reset_offset(const segd_pipeline_t *p)
{
    return strcmp(p->cfg->offset_reset, "latest") ? RD_KAFKA_OFFSET_BEGINNING
                                                  : RD_KAFKA_OFFSET_END;
}

static int is_unread(const segd_pipeline_t *p, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].partition == partition && !strcmp(p->unread[i].topic, topic))
            return 1;
    return 0;
}

/* Returns the entry, or NULL when the table is full (more than
 * MAX_POSITIONS unreadable partitions: unreachable with sane counts). */
static unread_t *note_unread(segd_pipeline_t *p, const char *topic, int32_t partition,
                             int64_t fallback)
{
    for (size_t i = 0; i < p->nunread; i++)
        if (p->unread[i].partition == partition && !strcmp(p->unread[i].topic, topic))
            return &p->unread[i];
    if (p->nunread == MAX_POSITIONS)
        return NULL;
    unread_t *u = &p->unread[p->nunread++];
    snprintf(u->topic, sizeof(u->topic), "%s", topic);
    u->partition = partition;
    u->logged = 0;
    u->fallback = fallback;
    return u;
}

static void forget_unread(segd_pipeline_t *p, const rd_kafka_topic_partition_list_t *parts)
{
    for (size_t i = 0; i < p->nunread;) {
        if (rd_kafka_topic_partition_list_find(parts, p->unread[i].topic,
                                               p->unread[i].partition))
            p->unread[i] = p->unread[--p->nunread];
        else
            i++;
    }
}

/* Seeks to offset; 0 when librdkafka refused (e.g. the fetcher is not
 * started yet). */
static int seek_to(segd_pipeline_t *p, const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = one_partition(topic, partition, offset);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(p->consumer, l, SEEK_TIMEOUT_MS);
    int ok = !e && !l->elems[0].err;
    if (e)
        rd_kafka_error_destroy(e);
    rd_kafka_topic_partition_list_destroy(l);
    return ok;
}

/* Makes m the next message of its partition again. If librdkafka refuses
 * the seek, the partition waits paused and restarts from its stored offset
 * (at worst re-applying part of the batch, which is harmless, DESIGN §3). */
static void rewind_to(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    if (seek_to(p, topic, m->partition, m->offset))
        return;
    fprintf(stderr, "segd: cannot rewind %s [%" PRId32 "] to %" PRId64
                    "; it restarts from its stored offset\n", topic, m->partition, m->offset);
    rd_kafka_topic_partition_list_t *l = one_partition(topic, m->partition, 0);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    /* without a stored offset yet, m is where it must start: a reset to
     * latest would skip it and everything after it */
    note_unread(p, topic, m->partition, m->offset);
}

/* Partitions whose stored offset could not be read were assigned paused;
 * each step reads again, seeks and resumes them. Only "no offset stored"
 * falls back to input.offset.reset: a read error would skip a backlog. */
static void retry_unread(segd_pipeline_t *p)
{
    for (size_t i = 0; i < p->nunread;) {
        unread_t *u = &p->unread[i];
        char err[256];
        int64_t next;
        segd_err_t e =
            segd_store_offset_get(p->store, u->topic, u->partition, &next, err, sizeof(err));
        if (e == SEGD_ERR_NOTFOUND) {
            next = u->fallback >= 0 ? u->fallback : reset_offset(p);
            e = SEGD_OK;
        }
        if (e || !seek_to(p, u->topic, u->partition, next)) {
            if (e && !u->logged)
                fprintf(stderr, "segd: waiting: %s [%" PRId32 "]: stored offset unreadable: "
                                "%s (partition paused, retrying)\n", u->topic, u->partition, err);
            u->logged |= e != SEGD_OK;
            i++;
            continue;
        }
        if (u->logged)
            fprintf(stderr, "segd: resumed %s [%" PRId32 "] at its stored offset\n", u->topic,
                    u->partition);
        if (!p->held) {
            rd_kafka_topic_partition_list_t *l = one_partition(u->topic, u->partition, next);
            rd_kafka_resume_partitions(p->consumer, l);
            rd_kafka_topic_partition_list_destroy(l);
        }
        *u = p->unread[--p->nunread];
    }
}

/* New partitions start paused while ingest is held or their offset is
 * unknown; the others are resumed explicitly, since librdkafka keeps an
 * application's pause across unassign and reassign. */
static void pause_or_resume(segd_pipeline_t *p, const rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *pause = rd_kafka_topic_partition_list_new(parts->cnt);
    rd_kafka_topic_partition_list_t *resume = rd_kafka_topic_partition_list_new(parts->cnt);
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int hold = p->held || is_unread(p, tp->topic, tp->partition);
        rd_kafka_topic_partition_list_add(hold ? pause : resume, tp->topic, tp->partition);
    }
    if (pause->cnt)
        rd_kafka_pause_partitions(p->consumer, pause);
    if (resume->cnt)
        rd_kafka_resume_partitions(p->consumer, resume);
    rd_kafka_topic_partition_list_destroy(pause);
    rd_kafka_topic_partition_list_destroy(resume);
}

/* ---------- messages ---------- */

static int classify_decode_error(segd_err_t err)
{
    if (err == SEGD_ERR_LIMIT)
        return SEGD_DLQ_LIMIT;
    return err == SEGD_ERR_SCHEMA ? SEGD_DLQ_UNKNOWN_SCHEMA : SEGD_DLQ_DECODE;
}

/* Decodes, retrying while the registry is unreachable (not bad input).
 * Returns 1 when the message was decoded, 0 when it was dead-lettered with
 * *reason set, -1 when a stop interrupted the wait. */
static int decode_message(segd_pipeline_t *p, const rd_kafka_message_t *m, int *reason,
                          char *why, size_t n)
{
    int64_t wait = 100;
    for (;;) {
        segd_err_t err = segd_avro_decode(p->codec, p->cfg->framing, m->payload, m->len,
                                          &p->ev, why, n);
        if (err == SEGD_OK)
            return 1;
        if (err != SEGD_ERR_HTTP) {
            *reason = classify_decode_error(err);
            return 0;
        }
        if (*p->stop)
            return -1;
        wait = backoff(p, wait, why);
    }
}

/* DESIGN §3: an event older than W + grace could need an entry a compaction
 * already dropped, and one from the future would win for ever. */
static int check_event_time(segd_pipeline_t *p, int *reason, char *why, size_t n)
{
    segd_policy_t *pol = segd_store_policy(p->store);
    switch (segd_policy_check_ts(pol, p->ev.ts_ms, p->cfg->limits.max_clock_skew_ms)) {
    case SEGD_TS_TOO_LATE:
        snprintf(why, n, "too_late: ts_ms %" PRId64 " is below %" PRId64
                 " (GC watermark + store.gc.grace.s)", p->ev.ts_ms, segd_policy_ts_floor(pol));
        *reason = SEGD_DLQ_TOO_LATE;
        return 0;
    case SEGD_TS_FROM_FUTURE:
        snprintf(why, n, "from_future: ts_ms %" PRId64 " is more than %" PRId64
                 " ms after now (limits.max.clock.skew.ms)", p->ev.ts_ms,
                 p->cfg->limits.max_clock_skew_ms);
        *reason = SEGD_DLQ_FROM_FUTURE;
        return 0;
    default:
        return 1;
    }
}

static int check_event(segd_pipeline_t *p, const rd_kafka_message_t *m, int *reason,
                       char *why, size_t n)
{
    segd_err_t err = segd_event_validate(&p->ev, &p->cfg->limits, why, n);
    if (err) {
        *reason = err == SEGD_ERR_LIMIT ? SEGD_DLQ_LIMIT
                  : segd_utf8_valid(p->ev.user_id, p->ev.user_id_len) ? SEGD_DLQ_INVALID
                                                                      : SEGD_DLQ_BAD_UTF8;
        return 0;
    }
    if (m->key && (m->key_len != p->ev.user_id_len ||
                   memcmp(m->key, p->ev.user_id, m->key_len) != 0)) {
        snprintf(why, n, "key does not match user_id");
        *reason = SEGD_DLQ_KEY_MISMATCH;
        return 0;
    }
    return check_event_time(p, reason, why, n);
}

/* Returns -1 when a stop interrupted a fault wait and -2 when memory ran out;
 * in both cases the message stays unapplied and its offset unwritten. */
static int handle_message(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    char why[256];
    int reason = 0, ok;
    p->st.messages++;
    if (m->len > p->cfg->limits.max_message) {
        snprintf(why, sizeof(why), "message of %zu bytes exceeds %zu", m->len,
                 p->cfg->limits.max_message);
        reason = SEGD_DLQ_OVERSIZE;
        ok = 0;
    } else {
        ok = decode_message(p, m, &reason, why, sizeof(why));
        if (ok < 0)
            return -1;
        if (ok)
            ok = check_event(p, m, &reason, why, sizeof(why));
    }
    if (ok) {
        rd_kafka_timestamp_type_t tstype;
        int64_t ts = rd_kafka_message_timestamp(m, &tstype);
        if (segd_applier_add_from(&p->ap, &p->ev, rd_kafka_topic_name(m->rkt), m->partition,
                                  m->offset, ts > 0 ? ts : 0) != SEGD_OK)
            return -2;
        p->st.events++;
        p->st.segments += p->ev.n_segments;
    } else if (add_dead_letter(p, m, reason, why) != SEGD_OK) {
        return -2;
    }
    note_position(p, rd_kafka_topic_name(m->rkt), m->partition, m->offset + 1);
    return 0;
}


/* Ingest waits while the change stream is too far behind: an unbounded
 * outbox would turn a broker outage into a disk-full outage. */
static int publisher_behind(segd_pipeline_t *p)
{
    return p->hooks.backlog(p->hooks.ctx) > (uint64_t)p->cfg->changes_max_outbox;
}

/* A message polled while ingest is held goes back: its partition is paused
 * and put in front of it again. */
static void hold_message(segd_pipeline_t *p, const rd_kafka_message_t *m)
{
    rd_kafka_topic_partition_list_t *l =
        one_partition(rd_kafka_topic_name(m->rkt), m->partition, m->offset);
    rd_kafka_pause_partitions(p->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
    rewind_to(p, m);
}

/* Partitions polled again after a hold: the assignment as it is now (a
 * rebalance may have run inside the hold), less those still unread. */
static void resume_assignment(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    pause_or_resume(p, parts);
    rd_kafka_topic_partition_list_destroy(parts);
}

static void wait_for_publisher(segd_pipeline_t *p)
{
    if (!p->hooks.backlog || p->cfg->changes_max_outbox <= 0 || !publisher_behind(p))
        return;
    /* paused partitions deliver nothing, and polling keeps the membership;
     * partitions assigned meanwhile start paused (rebalance_cb) */
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return;
    p->held = 1;
    rd_kafka_pause_partitions(p->consumer, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    int64_t wait = 100;
    while (!*p->stop && publisher_behind(p)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, 0);
        if (m && !m->err)
            hold_message(p, m);
        if (m)
            rd_kafka_message_destroy(m);
        wait = backoff(p, wait, "change stream behind: outbox over changes.max.outbox");
    }
    fault_cleared(p);
    p->held = 0;
    resume_assignment(p);
}

/* Whether every assigned partition has been read to within a few batches of
 * the end offset librdkafka last saw (cached, no broker round trip): under
 * steady load the position never sits exactly at the end. */
static int caught_up(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(p->consumer, &parts))
        return 0;
    int64_t slack = 10 * p->cfg->batch_max_messages;
    int ok = parts->cnt > 0 && !rd_kafka_position(p->consumer, parts);
    for (int i = 0; ok && i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t lo, hi;
        ok = !rd_kafka_get_watermark_offsets(p->consumer, tp->topic, tp->partition, &lo, &hi) &&
             hi >= 0 && (tp->offset >= 0 ? hi - tp->offset <= slack : hi == lo);
    }
    rd_kafka_topic_partition_list_destroy(parts);
    return ok;
}

/* Moves the GC watermark at most every 10 s, and only here: between the
 * time check of an event and the write of its batch W stays put. A fresh
 * store starts W's phase only once caught up, so replaying the input's
 * history into it is not refused (DESIGN §3, §7). A failure leaves W where
 * it was, which is always safe. */
static void advance_gc(segd_pipeline_t *p)
{
    char err[256];
    if (segd_mono_ms() < p->gc_next_ms)
        return;
    p->gc_next_ms = segd_mono_ms() + 10000;
    int flags = segd_policy_ts_floor(segd_store_policy(p->store)) == 0 && caught_up(p)
                    ? SEGD_GC_CAUGHT_UP
                    : 0;
    if (segd_store_gc_advance(p->store, flags, err, sizeof(err)) != SEGD_OK)
        fprintf(stderr, "segd: GC watermark not advanced: %s\n", err);
    /* RocksDB only looks for files due for periodic compaction after a flush
     * or compaction: on a quiet store an operand would stay in the memtable,
     * unmerged, for ever. An hourly flush keeps the grace bound (§3.1). */
    if (segd_mono_ms() >= p->flush_next_ms) {
        p->flush_next_ms = segd_mono_ms() + 3600 * 1000;
        if (segd_store_flush(p->store, err, sizeof(err)) != SEGD_OK)
            fprintf(stderr, "segd: flush: %s\n", err);
    }
}

segd_err_t segd_pipeline_step(segd_pipeline_t *p, char *errstr, size_t n)
{
    advance_gc(p);
    retry_unread(p);
    wait_for_publisher(p);
    int64_t deadline = segd_mono_ms() + p->cfg->batch_max_ms;
    int64_t taken = 0;
    int rc = 0;
    while (taken < p->cfg->batch_max_messages && !*p->stop) {
        int64_t left = deadline - segd_mono_ms();
        if (left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, (int)left);
        if (!m)
            continue;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "segd: consumer: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        if (is_unread(p, rd_kafka_topic_name(m->rkt), m->partition)) {
            rd_kafka_message_destroy(m); /* it restarts from its stored offset */
            continue;
        }
        rc = handle_message(p, m);
        if (rc < 0) /* unapplied: the next poll must return it again */
            rewind_to(p, m);
        rd_kafka_message_destroy(m);
        if (rc < 0)
            break;
        taken++;
    }
    segd_err_t err = flush_batch(p, errstr, n);
    /* out of memory: stop before the unapplied message, which comes again */
    if (!err && rc == -2)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return err;
}

/* ---------- assignment ---------- */

/* Starting offsets come from the store, in the assign call itself. Only
 * "no offset stored" means input.offset.reset; a partition whose offset
 * cannot be read starts paused and is retried (retry_unread). */
static void set_start_offsets(segd_pipeline_t *p, rd_kafka_topic_partition_list_t *parts)
{
    char err[256];
    for (int i = 0; i < parts->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &parts->elems[i];
        int64_t next;
        segd_err_t e =
            segd_store_offset_get(p->store, tp->topic, tp->partition, &next, err, sizeof(err));
        if (e == SEGD_OK) {
            tp->offset = next;
        } else if (e == SEGD_ERR_NOTFOUND) {
            tp->offset = reset_offset(p);
        } else {
            fprintf(stderr, "segd: waiting: %s [%" PRId32 "]: stored offset unreadable: %s "
                            "(partition paused, retrying)\n", tp->topic, tp->partition, err);
            unread_t *u = note_unread(p, tp->topic, tp->partition, -1);
            if (u)
                u->logged = 1;
            /* never fetched: seeked before resuming; with no room to track it
             * (over MAX_POSITIONS partitions) it stays at its stored offset's
             * fallback, never at the end */
            tp->offset = u ? RD_KAFKA_OFFSET_END : RD_KAFKA_OFFSET_STORED;
        }
    }
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    segd_pipeline_t *p = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    rd_kafka_error_t *e = NULL;
    char msg[256];
    p->rebalanced = 1;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        set_start_offsets(p, parts);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        pause_or_resume(p, parts);
    } else {
        /* write what was read from these partitions while they are ours */
        if (flush_batch(p, msg, sizeof(msg)) != SEGD_OK)
            fprintf(stderr, "segd: batch not written before revoke: %s\n", msg);
        forget_unread(p, parts);
        if (coop)
            e = rd_kafka_incremental_unassign(rk, parts);
        else
            rd_kafka_assign(rk, NULL);
    }
    if (e) {
        fprintf(stderr, "segd: rebalance: %s\n", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

/* ---------- construction ---------- */

/* Static membership (KIP-345): a restarted member with the same
 * group.instance.id takes its old place at once instead of waiting for the
 * group to time the old one out. The id is the store's (one store, one
 * member); group.instance.id overrides it, and an empty value turns static
 * membership off. */
static segd_err_t instance_id(segd_pipeline_t *p, char *out, size_t size, char *errstr,
                              size_t n)
{
    if (p->cfg->group_instance_id) {
        snprintf(out, size, "%s", p->cfg->group_instance_id);
        return SEGD_OK;
    }
    return segd_store_instance_id(p->store, out, size, errstr, n);
}

static segd_err_t make_consumer(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    char member[256];
    segd_err_t err = instance_id(p, member, sizeof(member), errstr, n);
    if (err)
        return err;
    const char *const defaults[] = {
        "bootstrap.servers", cfg->brokers, "enable.auto.commit", "false",
        "enable.auto.offset.store", "false", "partition.assignment.strategy",
        "cooperative-sticky", "enable.partition.eof", "false", "group.id", cfg->group,
        "auto.offset.reset", cfg->offset_reset,
        member[0] ? "group.instance.id" : NULL, member, NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    err = segd_kconf_apply(conf, "consumer", defaults, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++) /* the operator's settings win */
        err = segd_kconf_set(conf, "consumer", cfg->kafka[i].key, cfg->kafka[i].value, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_opaque(conf, p);
    p->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf));
    if (!p->consumer) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "consumer: %s", errbuf);
    }
    rd_kafka_poll_set_consumer(p->consumer);
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int)cfg->n_topics);
    for (size_t i = 0; i < cfg->n_topics; i++)
        rd_kafka_topic_partition_list_add(topics, cfg->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t kerr = rd_kafka_subscribe(p->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "subscribe: %s", rd_kafka_err2str(kerr))
                : SEGD_OK;
}

static segd_err_t make_producer(segd_pipeline_t *p, char *errstr, size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", p->cfg->brokers, "enable.idempotence",
                                    "true", "linger.ms", "5", "compression.codec", "lz4", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* consumer-only kafka.* settings would make the producer warn: use only ours */
    segd_err_t err = segd_kconf_apply(conf, "dead-letter producer", defaults, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    p->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errbuf, sizeof(errbuf));
    if (!p->producer) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "producer: %s", errbuf);
    }
    return SEGD_OK;
}

static segd_err_t make_codec(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    if (cfg->registry_url) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = cfg->registry_auth;
        ro.ca_file = cfg->registry_ca;
        segd_err_t err = segd_registry_new(&p->registry, cfg->registry_url, &ro, errstr, n);
        if (err)
            return err;
    }
    segd_schema_source_t src = {segd_registry_lookup, p->registry};
    segd_err_t err =
        segd_avro_codec_new(&p->codec, NULL, p->registry ? &src : NULL, errstr, n);
    if (!err) /* stop decoding an oversized array early, not after allocating it */
        segd_avro_codec_set_limits(p->codec, &cfg->limits);
    return err;
}

void segd_pipeline_set_hooks(segd_pipeline_t *p, const segd_pipeline_hooks_t *h)
{
    p->hooks = *h;
}

segd_err_t segd_pipeline_new(segd_pipeline_t **out, const segd_config_t *cfg,
                             segd_store_t *store, volatile sig_atomic_t *stop, char *errstr,
                             size_t n)
{
    segd_pipeline_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->cfg = cfg;
    p->store = store;
    p->stop = stop;
    segd_event_init(&p->ev);
    segd_err_t err = segd_applier_init(&p->ap, store);
    if (!err)
        err = make_codec(p, errstr, n);
    if (!err)
        err = make_producer(p, errstr, n);
    if (!err && cfg->changes_enable) /* every batch records its changes (DESIGN §5) */
        segd_applier_enable_outbox(&p->ap);
    if (!err)
        err = make_consumer(p, errstr, n);
    if (err) {
        segd_pipeline_destroy(p);
        return err;
    }
    *out = p;
    return SEGD_OK;
}

segd_err_t segd_pipeline_run(segd_pipeline_t *p, char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    while (!*p->stop && !err)
        err = segd_pipeline_step(p, errstr, n);
    return err;
}

void segd_pipeline_get_stats(const segd_pipeline_t *p, segd_pipeline_stats_t *st)
{
    *st = p->st;
}

int segd_pipeline_assigned(segd_pipeline_t *p)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (!p->consumer || rd_kafka_assignment(p->consumer, &parts))
        return -1;
    int n = parts->cnt;
    rd_kafka_topic_partition_list_destroy(parts);
    return n;
}

static int joined(segd_pipeline_t *p)
{
    char *member = rd_kafka_memberid(p->consumer);
    int yes = member && *member;
    if (member)
        rd_kafka_mem_free(p->consumer, member);
    return yes;
}

/* The workaround for upstream #4312 (see FIRST_ASSIGNMENT_WAIT_MS): a
 * member that has joined (has a member id) but has had no rebalance
 * callback polls, bounded, until the group assigns it something. Nothing
 * polled here is applied or stored: the partitions are read again later.
 * Returns 1 when the member is still joined and unassigned: destroying
 * the consumer would then abort the process. */
static int await_first_assignment(segd_pipeline_t *p)
{
    int64_t deadline = segd_mono_ms() + FIRST_ASSIGNMENT_WAIT_MS;
    while (!p->rebalanced && joined(p) && segd_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(p->consumer, 100);
        if (m)
            rd_kafka_message_destroy(m);
    }
    return !p->rebalanced && joined(p);
}

void segd_pipeline_close(segd_pipeline_t *p)
{
    char err[256];
    if (p->consumer) {
        int unassigned = await_first_assignment(p);
        rd_kafka_consumer_close(p->consumer); /* revokes: the batch is written */
        if (flush_batch(p, err, sizeof(err)) != SEGD_OK)
            fprintf(stderr, "segd: last batch not written: %s\n", err);
        if (unassigned) /* the last resort: a leak instead of an abort */
            fprintf(stderr, "segd: closing before the group's first assignment: the consumer "
                            "handle is left to process exit (librdkafka 2.0.2 would abort)\n");
        else
            rd_kafka_destroy(p->consumer);
        p->consumer = NULL;
    }
    if (p->producer) {
        rd_kafka_flush(p->producer, 5000);
        rd_kafka_destroy(p->producer);
        p->producer = NULL;
    }
}

void segd_pipeline_destroy(segd_pipeline_t *p)
{
    if (!p)
        return;
    segd_pipeline_close(p);
    clear_dead_letters(p);
    free(p->dlq);
    segd_avro_codec_destroy(p->codec);
    segd_registry_destroy(p->registry);
    segd_applier_free(&p->ap);
    segd_event_free(&p->ev);
    free(p);
}
