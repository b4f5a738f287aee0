/* Outbox -> change topic; see publisher.h. One producer, used by one thread
 * at a time (the background thread, or the caller of cycle/drain): delivery
 * reports run inside rd_kafka_flush on that thread. */
#define _GNU_SOURCE
#include "publisher/publisher.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/partition.h"
#include "transport/kconf.h"
#include "transport/kmeta.h"
#include "transport/registry.h"
#include "wire/outbox.h"
#include "base/clock.h"

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
    int64_t oldest_committed_ms; /* the oldest unacknowledged entry's commit time, as
                                  * the last scan saw it (0 = none): its age is taken
                                  * at get_stats, so it grows while a cycle waits
                                  * on an outage (guarded by mu) */
    uint64_t *lat; /* LAT_BUCKETS counters */
    segd_metric_t *latency; /* segd_change_latency_seconds; NULL = no registry */
    char last_fault[512];
};

void segd_publisher_opts_default(segd_publisher_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->topic = SEGD_DEFAULT_CHANGES_TOPIC;
    o->framing = SEGD_CHANGE_SINGLE_OBJECT;
    o->compression = "lz4";
    o->partitioner = SEGD_PARTITIONER_MURMUR2;
    o->max_entries = 64;
    o->retry_max_ms = 5000;
    o->ack_timeout_ms = 30000;
    o->max_delta_entries = 32768; /* ~16 B each: well under 1 MB messages */
}


/* ---------- producer ---------- */

/* librdkafka's lines, with the publisher as the client's opaque. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    const segd_publisher_t *p = rd_kafka_opaque(rk);
    segd_kconf_log(p ? p->o.log : NULL, rk, level, fac, buf);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    acks_t *a = &((segd_publisher_t *)opaque)->acks;
    if ((uintptr_t)m->_private != (uintptr_t)a->cycle) {
        a->stale++;
        return;
    }
    if (m->err) {
        a->failed++;
        snprintf(a->error, sizeof(a->error), "%s", rd_kafka_err2str(m->err));
        return;
    }
    a->ok++;
    a->bytes += m->len;
    if (m->partition >= 0 && m->partition < MAX_PARTITIONS && m->offset + 1 > a->next[m->partition])
        a->next[m->partition] = m->offset + 1;
}

static segd_err_t make_producer(segd_publisher_t *p, char *errstr, size_t n)
{
    char queue_kb[24];
    snprintf(queue_kb, sizeof(queue_kb), "%" PRId64, p->o.queue_kb);
    const char *defaults[] = {"bootstrap.servers", p->o.brokers,
                              "enable.idempotence", "true",
                              "compression.codec", p->o.compression,
                              "linger.ms", "5",
                              "message.timeout.ms", "0", /* retry until acked or stopped */
                              /* memory.limit.mb's share; a full queue waits (produce_one) */
                              p->o.queue_kb > 0 ? "queue.buffering.max.kbytes" : NULL, queue_kb,
                              NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "changes producer", defaults, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "changes producer", p->o.kafka_props, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, p);
    char e[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "changes producer: %s", e);
    }
    p->rkt = rd_kafka_topic_new(p->rk, p->o.topic, NULL);
    return p->rkt ? SEGD_OK : segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s", p->o.topic);
}

/* The most a change event's value (framing + body) may take: librdkafka
 * refuses a message over message.max.bytes at once and forever, and a
 * broker limits the record batch. Headroom: the key (<= 256 bytes), the
 * record and batch headers (< 128 bytes), a codec's worst-case growth on
 * incompressible data (lz4: 0.4%): 1 KiB + 1/64 of the limit. */
static size_t message_budget(segd_publisher_t *p)
{
    char v[32];
    size_t vlen = sizeof(v);
    long long max = 1000000; /* librdkafka's default */
    if (rd_kafka_conf_get(rd_kafka_conf(p->rk), "message.max.bytes", v, &vlen) ==
        RD_KAFKA_CONF_OK)
        max = atoll(v);
    long long budget = max - 1024 - max / 64;
    return budget > 4096 ? (size_t)budget : 4096;
}

/* With Confluent framing, schema's id under the subject <topic><suffix>,
 * registered once into *id. */
static segd_err_t ensure_subject(segd_publisher_t *p, const char *suffix, const char *schema,
                                 int32_t *id, char *errstr, size_t n)
{
    if (p->o.framing != SEGD_CHANGE_CONFLUENT || *id >= 0)
        return SEGD_OK;
    char subject[512];
    snprintf(subject, sizeof(subject), "%s%s", p->o.topic, suffix);
    return segd_registry_register(p->registry, subject, schema, id, errstr, n);
}

static segd_err_t ensure_schema(segd_publisher_t *p, char *errstr, size_t n)
{
    return ensure_subject(p, "-value", segd_change_schema_json(), &p->schema_id, errstr, n);
}

/* ---------- reading the outbox ---------- */

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

/* ---------- building change events ---------- */

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

/* Joins refs[from, to) (one user, one source partition) into p->change. */
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
    for (size_t i = from; i < to; i++) {
        const segd_outbox_item_t *it = p->refs[i].item;
        const segd_outbox_entry_t *e = p->refs[i].entry;
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
    return SEGD_OK;
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

/* Produces p->change; waits on a full queue by serving delivery reports,
 * for at most ack_timeout_ms: with the brokers down the queue never drains,
 * and an unbounded wait kept a stopping publisher (and segd run) hanging.
 * Giving up fails the cycle; its entries stay in the outbox. */
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
        err = produce_one(p, &part, partition, errstr, n);
        off += part.profile.n;
        (*events)++;
    } while (!err && off < c->profile.n);
    *segments += c->profile.n;
    return err;
}

/* The change topic's partition count, asked for while not known (brokers
 * unreachable at start) and again when an input partition lies past it (the
 * topic may have grown since). */
static segd_err_t ensure_partitions(segd_publisher_t *p, int32_t need, char *errstr, size_t n)
{
    if (p->partitions > 0 && p->partitions > need) /* 0: never asked (need -1: any) */
        return SEGD_OK;
    int32_t count = 0;
    segd_err_t err = segd_kmeta_partitions_wait(p->rk, p->o.topic, METADATA_WAIT_MS, &count,
                                                errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "change topic %s does not exist and the brokers did "
                         "not create it: create it with as many partitions as the input topic",
                         p->o.topic);
    if (err)
        return err;
    if (count <= 0) /* routing by a count of 0 would put every delta on partition 0 */
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "change topic %s: no partition count yet",
                         p->o.topic);
    if (count > MAX_PARTITIONS)
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "change topic %s has %" PRId32
                         " partitions; segd publishes to at most %d", p->o.topic, count,
                         MAX_PARTITIONS);
    p->partitions = count;
    return SEGD_OK;
}

/* Where a delta goes (DESIGN §5): the partition of its source, so that a
 * cache shard tailing change partition p sees every delta of input
 * partition p; a delta with no input source goes where input.partitioner
 * puts its user. An input partition past the change topic's stops the
 * cycle (the entry stays) rather than send the delta to a shard that does
 * not own its user. */
static segd_err_t route(segd_publisher_t *p, const item_ref_t *r, int32_t *out, char *errstr,
                        size_t n)
{
    segd_err_t err = ensure_partitions(p, r->part, errstr, n);
    if (err)
        return err;
    if (r->part >= p->partitions)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "change topic %s has %" PRId32
                         " partitions, fewer than input partition %" PRId32 " needs: add "
                         "partitions to it (as many as the input topic)", p->o.topic,
                         p->partitions, r->part);
    *out = r->part >= 0 ? r->part
                        : segd_partition_of(p->o.partitioner, r->item->user, r->item->user_len,
                                            p->partitions);
    return SEGD_OK;
}

/* A RETIRE marker is store-wide: every cache shard needs it, so it goes to
 * every change partition. */
static segd_err_t produce_retire(segd_publisher_t *p, uint64_t *events, uint64_t *segments,
                                 char *errstr, size_t n)
{
    segd_err_t err = ensure_partitions(p, 0, errstr, n);
    if (!err)
        err = build_retire(p);
    for (int32_t part = 0; !err && part < p->partitions; part++)
        err = produce_change(p, part, events, segments, errstr, n);
    return err;
}

/* The Confluent id of MemberEvents, registered under their own subject
 * (TopicRecordNameStrategy's `<topic>-segd.MemberEvent`) the first time
 * a cycle has one: a deployment without identities registers nothing new. */
static segd_err_t ensure_member_schema(segd_publisher_t *p, char *errstr, size_t n)
{
    return ensure_subject(p, "-segd.MemberEvent", segd_member_schema_json(),
                          &p->member_schema_id, errstr, n);
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
        err = ensure_partitions(p, 0, errstr, n);
        for (size_t j = 0; !err && j < e->n_members; j++) {
            err = produce_member(p, &e->members[j], errstr, n);
            (*events)++;
        }
    }
    return err;
}

/* Routes every delta of the cycle before any is produced: a refusal found
 * halfway made every retry send the deltas before it again, flooding the
 * change topic while the refused one waited for new partitions. */
static segd_err_t route_all(segd_publisher_t *p, char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < p->n_refs; i++)
        err = route(p, &p->refs[i], &p->refs[i].dest, errstr, n);
    return err;
}

/* One delta per (user, source input partition) of the cycle. */
static segd_err_t produce_cycle(segd_publisher_t *p, uint64_t *events, uint64_t *segments,
                                char *errstr, size_t n)
{
    segd_err_t err = collect_refs(p);
    if (!err)
        err = route_all(p, errstr, n);
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

/* ---------- acknowledging ---------- */

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
static void clear_cycle(segd_publisher_t *p)
{
    for (size_t i = 0; i < p->n_entries; i++)
        segd_outbox_entry_free(&p->entries[i]);
    p->n_entries = 0;
    p->scanned = 0;
    uint64_t cycle = p->acks.cycle + 1;
    memset(&p->acks, 0, sizeof(p->acks));
    p->acks.cycle = cycle;
}

/* A failed cycle's messages leave librdkafka's queue, queued or in flight:
 * left there (message.timeout.ms is 0) they would be sent again with every
 * retry's copies, growing the queue, and their late reports would arrive
 * during a later cycle. Purged messages report at once, with an error;
 * serving those reports here leaves nothing of this cycle behind. A
 * message purged in flight may still reach the topic, a harmless duplicate
 * of the retry's. */
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
    clear_cycle(p);
    segd_err_t err = ensure_schema(p, errstr, n);
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
            err = ensure_member_schema(p, errstr, n);
    if (!err)
        err = produce_cycle(p, &events, &segments, errstr, n);
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

/* ---------- thread ---------- */

static void log_fault(segd_publisher_t *p, const char *msg)
{
    if (strcmp(p->last_fault, msg)) {
        segd_log(p->o.log, SEGD_LOG_WARN, "publisher",
                 "publisher waiting: %s (outbox kept, retrying)", msg);
        snprintf(p->last_fault, sizeof(p->last_fault), "%.500s", msg);
    }
}

static void *run(void *arg)
{
    segd_publisher_t *p = arg;
    int64_t wait = 100;
    char err[512];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->kicked = 0;
        pthread_mutex_unlock(&p->mu);
        size_t acked = 0;
        segd_err_t e = segd_publisher_cycle(p, &acked, err, sizeof(err));
        if (e) {
            pthread_mutex_lock(&p->mu);
            p->st.retries++;
            pthread_mutex_unlock(&p->mu);
            log_fault(p, err);
            segd_sleep_ms(wait);
            wait = wait * 2 > p->o.retry_max_ms ? p->o.retry_max_ms : wait * 2;
            continue;
        }
        if (p->last_fault[0]) {
            segd_log(p->o.log, SEGD_LOG_INFO, "publisher", "publisher resumed after: %s",
                     p->last_fault);
            p->last_fault[0] = 0;
        }
        wait = 100;
        if (acked)
            continue; /* more may be waiting */
        pthread_mutex_lock(&p->mu);
        if (!p->kicked && !p->stop) {
            struct timespec ts;
            segd_realtime_after(&ts, 100);
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int32_t segd_publisher_partitions(const segd_publisher_t *p) { return p->partitions; }

segd_err_t segd_publisher_start(segd_publisher_t *p, char *errstr, size_t n)
{
    if (p->running)
        return SEGD_OK;
    p->stop = 0;
    if (pthread_create(&p->thread, NULL, run, p))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "publisher thread");
    p->running = 1;
    return SEGD_OK;
}

void segd_publisher_kick(segd_publisher_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->kicked = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_stop(segd_publisher_t *p, int64_t drain_ms)
{
    if (!p->running)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->running = 0;
    char err[512];
    if (drain_ms > 0 && segd_publisher_drain(p, drain_ms, err, sizeof(err)))
        segd_log(p->o.log, SEGD_LOG_WARN, "publisher",
                 "publisher stopped with deltas left in the outbox (re-published "
                 "at next start): %s", err);
}

static int64_t percentile(const uint64_t *lat, double q)
{
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < LAT_BUCKETS; b++)
        total += lat[b];
    if (!total)
        return 0;
    for (int b = 0; b < LAT_BUCKETS; b++) {
        seen += lat[b];
        if ((double)seen >= q * (double)total)
            return b;
    }
    return 0;
}

void segd_publisher_reset_latency(segd_publisher_t *p)
{
    pthread_mutex_lock(&p->mu);
    memset(p->lat, 0, LAT_BUCKETS * sizeof(*p->lat));
    p->st.latency_max_ms = 0;
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_set_metrics(segd_publisher_t *p, segd_metrics_t *m)
{
    segd_metric_t *h = segd_metrics_histogram(
        m, "segd_change_latency_seconds",
        "Input event timestamp to change-topic acknowledgement of its delta, per outbox entry.",
        NULL, segd_metric_latency_buckets, segd_metric_latency_nbuckets);
    pthread_mutex_lock(&p->mu);
    p->latency = h;
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_get_stats(segd_publisher_t *p, segd_publisher_stats_t *st)
{
    pthread_mutex_lock(&p->mu);
    *st = p->st;
    st->oldest_unacked_ms = p->oldest_committed_ms ? segd_wall_ms() - p->oldest_committed_ms : 0;
    st->depth = segd_store_outbox_depth(p->store); /* exact, whatever the cycles do */
    st->latency_p50_ms = percentile(p->lat, 0.50);
    st->latency_p99_ms = percentile(p->lat, 0.99);
    pthread_mutex_unlock(&p->mu);
}

/* ---------- construction ---------- */

typedef struct known_ctx {
    segd_publisher_t *p;
} known_ctx_t;

static int load_known(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    segd_publisher_t *p = ctx;
    if (!strcmp(topic, p->o.topic) && partition >= 0 && partition < MAX_PARTITIONS)
        p->known[partition] = next;
    return 0;
}

static segd_err_t load_positions(segd_publisher_t *p, char *errstr, size_t n)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = segd_store_view_open(p->store, &v, errstr, n);
    if (!err)
        err = segd_store_view_positions(v, "changes", load_known, p, errstr, n);
    segd_store_view_close(v);
    return err;
}

segd_err_t segd_publisher_new(segd_publisher_t **out, segd_store_t *store,
                              const segd_publisher_opts_t *o, char *errstr, size_t n)
{
    *out = NULL;
    if (!o->brokers || !o->topic || !*o->topic)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "changes: brokers and topic are required");
    if (o->framing == SEGD_CHANGE_CONFLUENT && !o->registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.format = confluent needs a schema registry URL");
    segd_publisher_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->o = *o;
    if (!p->o.max_entries)
        p->o.max_entries = 64;
    if (!p->o.max_delta_entries)
        p->o.max_delta_entries = 32768;
    p->store = store;
    p->schema_id = -1;
    p->member_schema_id = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    segd_profile_init(&p->acc);
    segd_profile_init(&p->tmp);
    segd_profile_init(&p->joined);
    segd_change_init(&p->change);
    p->lat = calloc(LAT_BUCKETS, sizeof(*p->lat));
    segd_err_t err = p->lat ? segd_batch_new(store, &p->batch) : SEGD_ERR_NOMEM;
    if (!err)
        err = load_positions(p, errstr, n);
    if (!err && o->framing == SEGD_CHANGE_CONFLUENT) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = o->registry_auth;
        ro.ca_file = o->registry_ca;
        err = segd_registry_new(&p->registry, o->registry_url, &ro, errstr, n);
    }
    if (!err)
        err = make_producer(p, errstr, n);
    if (!err)
        p->max_message = message_budget(p);
    /* a missing change topic is refused now; unreachable brokers are not an
     * error yet: every cycle asks again, keeping the outbox meanwhile */
    if (!err && ensure_partitions(p, 0, errstr, n) == SEGD_ERR_NOTFOUND)
        err = SEGD_ERR_NOTFOUND;
    if (err) {
        segd_publisher_destroy(p);
        return err;
    }
    *out = p;
    return SEGD_OK;
}

void segd_publisher_destroy(segd_publisher_t *p)
{
    if (!p)
        return;
    segd_publisher_stop(p, 0);
    if (p->rkt)
        rd_kafka_topic_destroy(p->rkt);
    if (p->rk) {
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(p->rk, 1000);
        rd_kafka_destroy(p->rk);
    }
    clear_cycle(p);
    for (size_t i = 0; i < p->cap_entries; i++)
        segd_buf_free(&p->values[i]);
    free(p->values);
    free(p->entries);
    free(p->refs);
    free(p->lat);
    segd_profile_free(&p->acc);
    segd_profile_free(&p->tmp);
    segd_profile_free(&p->joined);
    segd_change_free(&p->change);
    segd_buf_free(&p->msg);
    segd_batch_destroy(p->batch);
    segd_registry_destroy(p->registry);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
