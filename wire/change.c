/* ChangeEvent / SnapshotRecord Avro binary; see change.h. Field order is the
 * schemas' order; arrays are written as one block (count, items, 0). */
#include "wire/change.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "segd_schemas.h"
#include "base/varint.h"
#include "wire/avro_bin.h"
#include "base/utf8.h"

/* Bounds for untrusted arrays: a decoder never allocates more than the
 * input could describe (each item takes at least one byte per field). */
#define MIN_SEGMENT_BYTES 5
#define MIN_RETIREMENT_BYTES 2
#define MIN_SOURCE_BYTES 4

uint32_t segd_bucket_of(const char *user, size_t len, uint32_t buckets)
{
    return (uint32_t)(XXH64(user, len, 0) & (uint64_t)(buckets - 1));
}

const char *segd_change_schema_json(void) { return SEGD_SCHEMA_CHANGE_EVENT; }
const char *segd_snapshot_schema_json(void) { return SEGD_SCHEMA_SNAPSHOT_RECORD; }

void segd_change_init(segd_change_t *c)
{
    memset(c, 0, sizeof(*c));
    segd_profile_init(&c->profile);
}

void segd_change_free(segd_change_t *c)
{
    segd_profile_free(&c->profile);
    free(c->retirements);
    free(c->sources);
    segd_change_init(c);
}

void segd_change_reset(segd_change_t *c)
{
    c->kind = SEGD_CHANGE_DELTA;
    c->user_id = "";
    c->user_id_len = 0;
    c->bucket = 0;
    c->buckets = 0;
    segd_profile_clear(&c->profile);
    c->n_retirements = 0;
    c->n_sources = 0;
    c->committed_at_ms = 0;
}

segd_err_t segd_change_add_source(segd_change_t *c, const char *topic, size_t topic_len,
                                  int32_t partition, int64_t first, int64_t last)
{
    segd_source_range_t *a =
        segd_array_grow(c->sources, &c->cap_sources, c->n_sources + 1, sizeof(*a));
    if (!a)
        return SEGD_ERR_NOMEM;
    c->sources = a;
    c->sources[c->n_sources++] = (segd_source_range_t){topic, topic_len, partition, first, last};
    return SEGD_OK;
}

segd_err_t segd_change_mark_replace(segd_change_t *c)
{
    return segd_change_add_source(c, SEGD_CHANGE_REPLACE_TOPIC,
                                  sizeof(SEGD_CHANGE_REPLACE_TOPIC) - 1, -1, 0, 0);
}

int segd_change_is_replace(const segd_change_t *c)
{
    const size_t len = sizeof(SEGD_CHANGE_REPLACE_TOPIC) - 1;
    if (c->kind != SEGD_CHANGE_DELTA)
        return 0;
    for (size_t i = 0; i < c->n_sources; i++)
        if (c->sources[i].topic_len == len &&
            !memcmp(c->sources[i].topic, SEGD_CHANGE_REPLACE_TOPIC, len))
            return 1;
    return 0;
}

segd_err_t segd_change_add_retirement(segd_change_t *c, int64_t segment_id, int64_t before_ms)
{
    segd_retirement_t *a =
        segd_array_grow(c->retirements, &c->cap_retirements, c->n_retirements + 1, sizeof(*a));
    if (!a)
        return SEGD_ERR_NOMEM;
    c->retirements = a;
    c->retirements[c->n_retirements++] = (segd_retirement_t){segment_id, before_ms};
    return SEGD_OK;
}

/* ---------- Avro binary primitives (wire/avro_bin.h) ---------- */

/* Reads an array block header; a negative count is followed by the block's
 * byte size (skipped: items are decoded one by one). */
static int64_t get_block_count(segd_avro_reader_t *r, size_t min_item_bytes)
{
    int64_t n = segd_avro_get_long(r);
    if (n < 0) {
        if (n == INT64_MIN) {
            r->bad = 1;
            return 0;
        }
        n = -n;
        segd_avro_get_long(r);
    }
    if (r->bad || (uint64_t)n > (uint64_t)(r->end - r->p) / min_item_bytes) {
        r->bad = 1;
        return 0;
    }
    return n;
}

/* ---------- segments (shared by both records) ---------- */

#define MAX_SEGMENT_BYTES (5 * 10 + 2)

static void put_segments(segd_buf_t *b, const segd_profile_t *p)
{
    if (p->n) {
        segd_avro_put_long(b, (int64_t)p->n);
        for (size_t i = 0; i < p->n; i++) {
            const segd_entry_t *e = &p->entries[i];
            segd_avro_put_long(b, e->segment_id);
            segd_avro_put_long(b, e->expiry_s);
            segd_avro_put_long(b, e->ts_ms);
            segd_avro_put_long(b, e->flags);
            segd_avro_put_long(b, e->partner_id);
        }
    }
    segd_avro_put_long(b, 0);
}

size_t segd_change_entry_bytes(const segd_entry_t *e)
{
    uint8_t tmp[SEGD_ZZ_MAX];
    return segd_zz_put(tmp, e->segment_id) + segd_zz_put(tmp, e->expiry_s) +
           segd_zz_put(tmp, e->ts_ms) + segd_zz_put(tmp, e->flags) +
           segd_zz_put(tmp, e->partner_id);
}

/* Replaces p's entries; its erase marker (read before) stays. */
static segd_err_t get_segments(segd_avro_reader_t *r, segd_profile_t *p)
{
    p->n = 0;
    for (;;) {
        int64_t n = get_block_count(r, MIN_SEGMENT_BYTES);
        if (r->bad)
            return SEGD_ERR_CORRUPT;
        if (n == 0)
            return SEGD_OK;
        if (segd_profile_reserve(p, p->n + (size_t)n))
            return SEGD_ERR_NOMEM;
        for (int64_t i = 0; i < n; i++) {
            segd_entry_t e;
            e.segment_id = segd_avro_get_long(r);
            e.expiry_s = segd_avro_get_long(r);
            e.ts_ms = segd_avro_get_long(r);
            e.flags = segd_avro_get_int(r);
            e.partner_id = segd_avro_get_int(r);
            if (r->bad || e.segment_id < 0 || e.expiry_s < 0 ||
                (p->n && p->entries[p->n - 1].segment_id >= e.segment_id))
                return SEGD_ERR_CORRUPT;
            p->entries[p->n++] = e;
        }
    }
}

/* ---------- ChangeEvent ---------- */

segd_err_t segd_change_encode(const segd_change_t *c, segd_buf_t *out)
{
    size_t need = 4 * 10 + c->user_id_len + 10 + c->profile.n * MAX_SEGMENT_BYTES +
                  c->n_retirements * 20 + 30 + 10;
    for (size_t i = 0; i < c->n_sources; i++)
        need += c->sources[i].topic_len + 40;
    if (segd_buf_reserve(out, need))
        return SEGD_ERR_NOMEM;
    segd_avro_put_long(out, c->kind);
    segd_avro_put_bytes(out, c->user_id, c->user_id_len);
    segd_avro_put_long(out, c->bucket);
    segd_avro_put_long(out, c->buckets);
    segd_avro_put_long(out, c->profile.erased_before_ms);
    put_segments(out, &c->profile);
    if (c->n_retirements) {
        segd_avro_put_long(out, (int64_t)c->n_retirements);
        for (size_t i = 0; i < c->n_retirements; i++) {
            segd_avro_put_long(out, c->retirements[i].segment_id);
            segd_avro_put_long(out, c->retirements[i].retired_before_ms);
        }
    }
    segd_avro_put_long(out, 0);
    if (c->n_sources) {
        segd_avro_put_long(out, (int64_t)c->n_sources);
        for (size_t i = 0; i < c->n_sources; i++) {
            const segd_source_range_t *s = &c->sources[i];
            segd_avro_put_bytes(out, s->topic, s->topic_len);
            segd_avro_put_long(out, s->partition);
            segd_avro_put_long(out, s->first_offset);
            segd_avro_put_long(out, s->last_offset);
        }
    }
    segd_avro_put_long(out, 0);
    segd_avro_put_long(out, c->committed_at_ms);
    return SEGD_OK;
}

static segd_err_t get_retirements(segd_avro_reader_t *r, segd_change_t *c)
{
    for (;;) {
        int64_t n = get_block_count(r, MIN_RETIREMENT_BYTES);
        if (r->bad)
            return SEGD_ERR_CORRUPT;
        if (n == 0)
            return SEGD_OK;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = segd_avro_get_long(r), before = segd_avro_get_long(r);
            if (r->bad || !segd_retire_key_valid(id))
                return SEGD_ERR_CORRUPT;
            if (segd_change_add_retirement(c, id, before))
                return SEGD_ERR_NOMEM;
        }
    }
}

static segd_err_t get_sources(segd_avro_reader_t *r, segd_change_t *c)
{
    for (;;) {
        int64_t n = get_block_count(r, MIN_SOURCE_BYTES);
        if (r->bad)
            return SEGD_ERR_CORRUPT;
        if (n == 0)
            return SEGD_OK;
        for (int64_t i = 0; i < n; i++) {
            size_t tlen = 0;
            const char *topic = segd_avro_get_bytes(r, &tlen);
            int32_t part = segd_avro_get_int(r);
            int64_t first = segd_avro_get_long(r), last = segd_avro_get_long(r);
            if (r->bad)
                return SEGD_ERR_CORRUPT;
            if (segd_change_add_source(c, topic, tlen, part, first, last))
                return SEGD_ERR_NOMEM;
        }
    }
}

segd_err_t segd_change_decode(const uint8_t *data, size_t len, segd_change_t *c)
{
    segd_avro_reader_t r = {data, data + len, 0};
    segd_change_reset(c);
    int64_t kind = segd_avro_get_long(&r);
    if (r.bad || (kind != SEGD_CHANGE_DELTA && kind != SEGD_CHANGE_RETIRE))
        return SEGD_ERR_CORRUPT;
    c->kind = (segd_change_kind_t)kind;
    c->user_id = segd_avro_get_bytes(&r, &c->user_id_len);
    c->bucket = segd_avro_get_int(&r);
    c->buckets = segd_avro_get_int(&r);
    c->profile.erased_before_ms = segd_avro_get_long(&r);
    if (r.bad)
        return SEGD_ERR_CORRUPT;
    segd_err_t err = get_segments(&r, &c->profile);
    if (!err)
        err = get_retirements(&r, c);
    if (!err)
        err = get_sources(&r, c);
    if (err)
        return err;
    c->committed_at_ms = segd_avro_get_long(&r);
    return r.bad || r.p != r.end ? SEGD_ERR_CORRUPT : SEGD_OK;
}

/* ---------- SnapshotRecord ---------- */

segd_err_t segd_snaprec_encode(const char *user, size_t user_len, const segd_profile_t *p,
                               segd_buf_t *out)
{
    if (segd_buf_reserve(out, user_len + 30 + p->n * MAX_SEGMENT_BYTES))
        return SEGD_ERR_NOMEM;
    segd_avro_put_bytes(out, user, user_len);
    segd_avro_put_long(out, p->erased_before_ms);
    put_segments(out, p);
    return SEGD_OK;
}

segd_err_t segd_snaprec_decode(const uint8_t **pos, const uint8_t *end, const char **user,
                               size_t *user_len, segd_profile_t *p)
{
    segd_avro_reader_t r = {*pos, end, 0};
    *user = segd_avro_get_bytes(&r, user_len);
    p->erased_before_ms = segd_avro_get_long(&r);
    /* Avro strings are UTF-8: stock readers refuse a bucket holding another
     * user id, so `snapshot verify` and cache loads refuse it too */
    if (r.bad || !segd_utf8_valid(*user, *user_len))
        return SEGD_ERR_CORRUPT;
    segd_err_t err = get_segments(&r, p);
    if (err)
        return err;
    *pos = r.p;
    return SEGD_OK;
}
