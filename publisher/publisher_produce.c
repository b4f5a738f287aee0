/* The change events of one publisher cycle: joins each user's operands per
 * source input partition into one delta (the §3 join, so coalescing is
 * exact), cuts deltas into parts that fit the producer's limits, adds one
 * RETIRE event per change partition and the membership changes, and
 * produces them all with the cycle's id as the message opaque. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/partition.h"
#include "core/record.h"
#include "publisher/publisher_int.h"

static int cmp_ref(const void *a, const void *b)
{
    const segd_outbox_item_t *x = ((const item_ref_t *)a)->item,
                             *y = ((const item_ref_t *)b)->item;
    size_t m = x->user_len < y->user_len ? x->user_len : y->user_len;
    int c = memcmp(x->user, y->user, m);
    if (c)
        return c;
    if (x->user_len != y->user_len)
        return x->user_len < y->user_len ? -1 : 1;
    int32_t px = ((const item_ref_t *)a)->part, py = ((const item_ref_t *)b)->part;
    return px < py ? -1 : px > py;
}

static segd_err_t collect_refs(segd_publisher_t *p)
{
    p->n_refs = 0;
    for (size_t i = 0; i < p->n_entries; i++) {
        const segd_outbox_entry_t *e = &p->entries[i];
        for (size_t j = 0; j < e->n_items; j++) {
            item_ref_t *r = segd_array_grow(p->refs, &p->cap_refs, p->n_refs + 1, sizeof(*r));
            if (!r)
                return SEGD_ERR_NOMEM;
            p->refs = r;
            uint32_t src = e->items[j].source;
            p->refs[p->n_refs++] =
                (item_ref_t){&e->items[j], e, src == UINT32_MAX ? -1 : e->sources[src].partition,
                             -1};
        }
    }
    if (p->n_refs) /* a cycle of retirements only has none (and no array) */
        qsort(p->refs, p->n_refs, sizeof(*p->refs), cmp_ref);
    return SEGD_OK;
}

/* Widens the user's source range for (topic, partition), or adds one. */
static segd_err_t note_source(segd_change_t *c, const segd_outbox_entry_t *e,
                              const segd_outbox_item_t *it)
{
    if (it->source == UINT32_MAX)
        return SEGD_OK;
    const segd_outbox_source_ref_t *s = &e->sources[it->source];
    for (size_t i = 0; i < c->n_sources; i++) {
        segd_source_range_t *r = &c->sources[i];
        if (r->partition == s->partition && r->topic_len == s->topic_len &&
            !memcmp(r->topic, s->topic, s->topic_len)) {
            if (it->offset < r->first_offset)
                r->first_offset = it->offset;
            if (it->offset > r->last_offset)
                r->last_offset = it->offset;
            return SEGD_OK;
        }
    }
    return segd_change_add_source(c, s->topic, s->topic_len, s->partition, it->offset,
                                  it->offset);
}

/* Joins refs[from, to) (one user, one source partition) into p->change. A
 * group holding a replace item (a rebuild swap's, always sourceless and
 * written before anything else of the swapped-in store, so it precedes
 * every other item of its group) is sent as a replacing delta: the record
 * joined with the items after it. */
static segd_err_t build_delta(segd_publisher_t *p, size_t from, size_t to)
{
    segd_change_t *c = &p->change;
    segd_change_reset(c);
    const segd_outbox_item_t *first = p->refs[from].item;
    c->user_id = first->user;
    c->user_id_len = first->user_len;
    c->buckets = p->partitions;
    c->bucket = segd_partition_of(p->o.partitioner, first->user, first->user_len, p->partitions);
    c->committed_at_ms = INT64_MAX;
    segd_profile_clear(&p->acc);
    int replace = 0;
    for (size_t i = from; i < to; i++) {
        const segd_outbox_item_t *it = p->refs[i].item;
        const segd_outbox_entry_t *e = p->refs[i].entry;
        replace |= e->kind == SEGD_OUTBOX_REPLACE;
        segd_err_t derr = segd_record_decode(it->operand, it->operand_len, &p->tmp);
        if (derr == SEGD_ERR_CORRUPT)
            continue; /* written by us, so only a disk fault gets here */
        if (derr) /* out of memory: the cycle fails and the entry stays */
            return derr;
        const segd_profile_t *in[2] = {&p->acc, &p->tmp};
        segd_err_t err = segd_profile_join(&p->joined, in, 2, NULL);
        if (!err)
            err = note_source(c, e, it);
        if (err)
            return err;
        segd_profile_t t = p->acc;
        p->acc = p->joined;
        p->joined = t;
        if (e->committed_at_ms < c->committed_at_ms)
            c->committed_at_ms = e->committed_at_ms;
    }
    /* the change owns its profile: swap instead of copying */
    segd_profile_t t = c->profile;
    c->profile = p->acc;
    p->acc = t;
    return replace ? segd_change_mark_replace(c) : SEGD_OK;
}

static segd_err_t build_retire(segd_publisher_t *p)
{
    segd_change_t *c = &p->change;
    segd_change_reset(c);
    c->kind = SEGD_CHANGE_RETIRE;
    c->bucket = -1;
    c->buckets = p->partitions;
    c->committed_at_ms = INT64_MAX;
    for (size_t i = 0; i < p->n_entries; i++) {
        const segd_outbox_entry_t *e = &p->entries[i];
        for (size_t j = 0; j < e->n_retirements; j++)
            if (segd_change_add_retirement(c, e->retirements[j].segment_id,
                                           e->retirements[j].retired_before_ms))
                return SEGD_ERR_NOMEM;
        if (e->n_retirements && e->committed_at_ms < c->committed_at_ms)
            c->committed_at_ms = e->committed_at_ms;
    }
    return SEGD_OK;
}

/* Produces p->msg. On a full queue it serves delivery reports and tries
 * again, for at most ack_timeout_ms, because with the brokers down the queue
 * never drains and an unbounded wait kept a stopping publisher (and segd
 * run) hanging. Giving up fails the cycle, and its entries stay in the
 * outbox. */
static segd_err_t produce_msg(segd_publisher_t *p, int32_t partition, const char *key,
                              size_t key_len, char *errstr, size_t n)
{
    int64_t give_up = segd_mono_ms() + p->o.ack_timeout_ms;
    for (;;) {
        if (rd_kafka_produce(p->rkt, partition, RD_KAFKA_MSG_F_COPY, p->msg.data,
                             p->msg.len, key_len ? (void *)key : NULL, key_len,
                             (void *)(uintptr_t)p->acks.cycle) == 0)
            return SEGD_OK;
        rd_kafka_resp_err_t kerr = rd_kafka_last_error();
        if (kerr != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "produce: %s", rd_kafka_err2str(kerr));
        if (segd_mono_ms() > give_up)
            return segd_errf(SEGD_ERR_TIMEOUT, errstr, n, "produce: queue full for %" PRId64
                             " ms (brokers unreachable?)", p->o.ack_timeout_ms);
        rd_kafka_poll(p->rk, 100);
    }
}

static segd_err_t produce_one(segd_publisher_t *p, const segd_change_t *c, int32_t partition,
                              char *errstr, size_t n)
{
    p->msg.len = 0;
    segd_err_t err = segd_change_frame(p->o.framing, p->schema_id, &p->msg);
    if (!err)
        err = segd_change_encode(c, &p->msg);
    if (err)
        return segd_errf(err, errstr, n, "encode change event: %s", segd_err_str(err));
    return produce_msg(p, partition, c->user_id, c->user_id_len, errstr, n);
}

/* The bytes of c's framed value without its entries, plus the largest
 * count prefix of the entries array. */
static segd_err_t fixed_bytes(segd_publisher_t *p, const segd_change_t *c, size_t *out)
{
    segd_change_t empty = *c;
    empty.profile.n = 0;
    p->msg.len = 0;
    segd_err_t err = segd_change_frame(p->o.framing, p->schema_id, &p->msg);
    if (!err)
        err = segd_change_encode(&empty, &p->msg);
    *out = p->msg.len + 10; /* the longest count prefix (an Avro long) */
    return err;
}

/* Produces p->change, split into events of at most max_delta_entries
 * entries and at most max_message encoded bytes: a message over the
 * producer's or broker's size limit would be refused forever and stop the
 * stream, while parts of a delta join to the same state. A part holds at
 * least one entry. */
static segd_err_t produce_change(segd_publisher_t *p, int32_t partition, uint64_t *events,
                                 uint64_t *segments, char *errstr, size_t n)
{
    const segd_change_t *c = &p->change;
    size_t max = p->o.max_delta_entries, off = 0, fixed;
    int replace = segd_change_is_replace(c);
    segd_err_t err = fixed_bytes(p, c, &fixed);
    if (err)
        return segd_errf(err, errstr, n, "encode change event: %s", segd_err_str(err));
    do {
        segd_change_t part = *c; /* shallow: a window on the entries */
        part.profile.entries = c->profile.entries + off;
        size_t k = 0, bytes = fixed;
        while (off + k < c->profile.n && k < max) {
            size_t eb = segd_change_entry_bytes(&c->profile.entries[off + k]);
            if (k && bytes + eb > p->max_message)
                break;
            bytes += eb;
            k++;
        }
        part.profile.n = k;
        if (off && replace) /* later parts join: only the first replaces */
            part.n_sources = 0;
        err = produce_one(p, &part, partition, errstr, n);
        off += part.profile.n;
        (*events)++;
    } while (!err && off < c->profile.n);
    *segments += c->profile.n;
    return err;
}

/* A RETIRE marker is store-wide: every cache shard needs it, so it goes to
 * every change partition. */
static segd_err_t produce_retire(segd_publisher_t *p, uint64_t *events, uint64_t *segments,
                                 char *errstr, size_t n)
{
    segd_err_t err = segd_publisher_ensure_partitions(p, 0, errstr, n);
    if (!err)
        err = build_retire(p);
    for (int32_t part = 0; !err && part < p->partitions; part++)
        err = produce_change(p, part, events, segments, errstr, n);
    return err;
}

/* A membership change goes to the change partition of its id (DESIGN
 * §10.6), where the cache shard holding the id's profile reads it. */
static segd_err_t produce_member(segd_publisher_t *p, const segd_member_t *m, char *errstr,
                                 size_t n)
{
    segd_member_t ev = *m;
    ev.buckets = p->partitions;
    ev.bucket = segd_partition_of(p->o.partitioner, m->id, m->id_len, p->partitions);
    p->msg.len = 0;
    segd_err_t err = segd_frame(SEGD_FRAME_MEMBER, p->o.framing, p->member_schema_id, &p->msg);
    if (!err)
        err = segd_member_encode(&ev, &p->msg);
    if (err)
        return segd_errf(err, errstr, n, "encode member event: %s", segd_err_str(err));
    return produce_msg(p, ev.bucket, m->id, m->id_len, errstr, n);
}

static segd_err_t produce_members(segd_publisher_t *p, uint64_t *events, char *errstr,
                                  size_t n)
{
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < p->n_entries; i++) {
        const segd_outbox_entry_t *e = &p->entries[i];
        if (e->kind != SEGD_OUTBOX_MEMBER || !e->n_members)
            continue;
        err = segd_publisher_ensure_partitions(p, 0, errstr, n);
        for (size_t j = 0; !err && j < e->n_members; j++) {
            err = produce_member(p, &e->members[j], errstr, n);
            (*events)++;
        }
    }
    return err;
}

/* One delta per (user, source input partition) of the cycle. */
segd_err_t segd_publisher_produce_cycle(segd_publisher_t *p, uint64_t *events,
                                        uint64_t *segments, char *errstr, size_t n)
{
    segd_err_t err = collect_refs(p);
    if (!err)
        err = segd_publisher_route_all(p, errstr, n);
    for (size_t i = 0; !err && i < p->n_refs;) {
        size_t j = i + 1;
        while (j < p->n_refs && cmp_ref(&p->refs[i], &p->refs[j]) == 0)
            j++;
        err = build_delta(p, i, j);
        if (!err)
            err = produce_change(p, p->refs[i].dest, events, segments, errstr, n);
        i = j;
    }
    int retirements = 0;
    for (size_t i = 0; i < p->n_entries; i++)
        retirements |= p->entries[i].n_retirements > 0;
    if (!err && retirements)
        err = produce_retire(p, events, segments, errstr, n);
    if (!err)
        err = produce_members(p, events, errstr, n);
    return err;
}
