/* Outbox entry encoding; see outbox.h. */
#include "wire/outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/varint.h"

void segd_outbox_builder_init(segd_outbox_builder_t *b) { memset(b, 0, sizeof(*b)); }

void segd_outbox_builder_free(segd_outbox_builder_t *b)
{
    segd_buf_free(&b->items);
    segd_outbox_builder_init(b);
}

void segd_outbox_builder_reset(segd_outbox_builder_t *b)
{
    b->n_sources = 0;
    b->items.len = 0;
    b->n_items = 0;
    b->event_ms = 0;
}

static void put(segd_buf_t *b, int64_t v) { b->len += segd_zz_put(b->data + b->len, v); }

static void put_bytes(segd_buf_t *b, const void *p, size_t n)
{
    put(b, (int64_t)n);
    if (n) /* a replacing delta of a user who is gone: an empty record, p may be NULL */
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* Index of (topic, partition) in the entry's source table; batches read few
 * partitions, so a linear search is the fast path. */
static int64_t source_index(segd_outbox_builder_t *b, const char *topic, int32_t partition)
{
    if (!topic)
        return -1;
    for (size_t i = 0; i < b->n_sources; i++)
        if (b->sources[i].partition == partition && !strcmp(b->sources[i].topic, topic))
            return (int64_t)i;
    if (b->n_sources == SEGD_OUTBOX_MAX_SOURCES)
        return -1; /* positions are informational: past the table they are dropped */
    segd_outbox_source_t *s = &b->sources[b->n_sources];
    snprintf(s->topic, sizeof(s->topic), "%s", topic);
    s->partition = partition;
    return (int64_t)b->n_sources++;
}

segd_err_t segd_outbox_add(segd_outbox_builder_t *b, const char *user, size_t user_len,
                           const uint8_t *operand, size_t operand_len, const char *topic,
                           int32_t partition, int64_t offset, int64_t event_ms)
{
    if (segd_buf_reserve(&b->items, user_len + operand_len + 4 * SEGD_ZZ_MAX))
        return SEGD_ERR_NOMEM;
    put_bytes(&b->items, user, user_len);
    put(&b->items, source_index(b, topic, partition));
    put(&b->items, offset);
    put_bytes(&b->items, operand, operand_len);
    b->n_items++;
    if (event_ms > 0 && (b->event_ms == 0 || event_ms < b->event_ms))
        b->event_ms = event_ms;
    return SEGD_OK;
}

static segd_err_t put_header(segd_buf_t *out, int kind, int64_t committed_at_ms,
                             int64_t event_ms, size_t extra)
{
    out->len = 0;
    if (segd_buf_reserve(out, 2 + 3 * SEGD_ZZ_MAX + extra))
        return SEGD_ERR_NOMEM;
    out->data[out->len++] = SEGD_OUTBOX_VERSION;
    out->data[out->len++] = (uint8_t)kind;
    put(out, committed_at_ms);
    put(out, event_ms);
    return SEGD_OK;
}

static segd_err_t finish_items(const segd_outbox_builder_t *b, int kind,
                               int64_t committed_at_ms, segd_buf_t *out)
{
    size_t extra = b->items.len + SEGD_ZZ_MAX * (2 + 2 * b->n_sources);
    for (size_t i = 0; i < b->n_sources; i++)
        extra += strlen(b->sources[i].topic);
    if (put_header(out, kind, committed_at_ms, b->event_ms, extra))
        return SEGD_ERR_NOMEM;
    put(out, (int64_t)b->n_sources);
    for (size_t i = 0; i < b->n_sources; i++) {
        put_bytes(out, b->sources[i].topic, strlen(b->sources[i].topic));
        put(out, b->sources[i].partition);
    }
    put(out, (int64_t)b->n_items);
    if (b->items.len) /* an empty builder has no buffer: memcpy from NULL is UB */
        memcpy(out->data + out->len, b->items.data, b->items.len);
    out->len += b->items.len;
    return SEGD_OK;
}

segd_err_t segd_outbox_finish(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                              segd_buf_t *out)
{
    return finish_items(b, SEGD_OUTBOX_DATA, committed_at_ms, out);
}

segd_err_t segd_outbox_finish_replace(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                                      segd_buf_t *out)
{
    return finish_items(b, SEGD_OUTBOX_REPLACE, committed_at_ms, out);
}

segd_err_t segd_outbox_retire_value(const segd_retirement_t *r, size_t n,
                                    int64_t committed_at_ms, segd_buf_t *out)
{
    if (put_header(out, SEGD_OUTBOX_RETIRE, committed_at_ms, 0, (n * 2 + 1) * SEGD_ZZ_MAX))
        return SEGD_ERR_NOMEM;
    put(out, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        put(out, r[i].segment_id);
        put(out, r[i].retired_before_ms);
    }
    return SEGD_OK;
}

segd_err_t segd_outbox_add_member(segd_outbox_builder_t *b, const char *id, size_t id_len,
                                  const char *master, size_t master_len,
                                  int64_t master_first_seen_ms, int64_t epoch_ms)
{
    if (segd_buf_reserve(&b->items, id_len + master_len + 4 * SEGD_ZZ_MAX))
        return SEGD_ERR_NOMEM;
    put_bytes(&b->items, id, id_len);
    put_bytes(&b->items, master, master_len);
    put(&b->items, master_first_seen_ms);
    put(&b->items, epoch_ms);
    b->n_items++;
    return SEGD_OK;
}

segd_err_t segd_outbox_finish_members(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                                      segd_buf_t *out)
{
    if (put_header(out, SEGD_OUTBOX_MEMBER, committed_at_ms, 0, b->items.len + SEGD_ZZ_MAX))
        return SEGD_ERR_NOMEM;
    put(out, (int64_t)b->n_items);
    memcpy(out->data + out->len, b->items.data, b->items.len);
    out->len += b->items.len;
    return SEGD_OK;
}

/* ---------- decoding ---------- */

void segd_outbox_entry_init(segd_outbox_entry_t *e) { memset(e, 0, sizeof(*e)); }

void segd_outbox_entry_free(segd_outbox_entry_t *e)
{
    free(e->sources);
    free(e->items);
    free(e->retirements);
    free(e->members);
    segd_outbox_entry_init(e);
}

typedef struct cur {
    const uint8_t *p, *end;
    int bad;
} cur_t;

static int64_t get(cur_t *c)
{
    int64_t v = 0;
    if (!c->bad && segd_zz_get(&c->p, c->end, &v))
        c->bad = 1;
    return v;
}

static const uint8_t *get_bytes(cur_t *c, size_t *len)
{
    int64_t n = get(c);
    if (c->bad || n < 0 || n > c->end - c->p) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *s = c->p;
    c->p += n;
    *len = (size_t)n;
    return s;
}

/* A count no larger than the bytes left could describe. */
static size_t get_count(cur_t *c)
{
    int64_t n = get(c);
    if (c->bad || n < 0 || n > c->end - c->p) {
        c->bad = 1;
        return 0;
    }
    return (size_t)n;
}

static segd_err_t decode_data(cur_t *c, segd_outbox_entry_t *e)
{
    size_t ns = get_count(c);
    if (c->bad)
        return SEGD_ERR_CORRUPT;
    e->sources = ns ? calloc(ns, sizeof(*e->sources)) : NULL;
    if (ns && !e->sources)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < ns; i++) {
        segd_outbox_source_ref_t *s = &e->sources[i];
        s->topic = (const char *)get_bytes(c, &s->topic_len);
        s->partition = (int32_t)get(c);
    }
    e->n_sources = ns;
    size_t ni = get_count(c);
    if (c->bad)
        return SEGD_ERR_CORRUPT;
    e->items = ni ? calloc(ni, sizeof(*e->items)) : NULL;
    if (ni && !e->items)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < ni; i++) {
        segd_outbox_item_t *it = &e->items[i];
        it->user = (const char *)get_bytes(c, &it->user_len);
        int64_t src = get(c);
        it->source = src >= 0 && (size_t)src < ns ? (uint32_t)src : UINT32_MAX;
        it->offset = get(c);
        it->operand = get_bytes(c, &it->operand_len);
    }
    e->n_items = ni;
    return c->bad ? SEGD_ERR_CORRUPT : SEGD_OK;
}

static segd_err_t decode_retire(cur_t *c, segd_outbox_entry_t *e)
{
    size_t n = get_count(c);
    if (c->bad)
        return SEGD_ERR_CORRUPT;
    e->retirements = n ? calloc(n, sizeof(*e->retirements)) : NULL;
    if (n && !e->retirements)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        e->retirements[i].segment_id = get(c);
        e->retirements[i].retired_before_ms = get(c);
    }
    e->n_retirements = n;
    return c->bad ? SEGD_ERR_CORRUPT : SEGD_OK;
}

static segd_err_t decode_member(cur_t *c, segd_outbox_entry_t *e)
{
    size_t n = get_count(c);
    if (c->bad)
        return SEGD_ERR_CORRUPT;
    e->members = n ? calloc(n, sizeof(*e->members)) : NULL;
    if (n && !e->members)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        segd_member_t *m = &e->members[i];
        m->id = (const char *)get_bytes(c, &m->id_len);
        m->master = (const char *)get_bytes(c, &m->master_len);
        m->master_first_seen_ms = get(c);
        m->epoch_ms = get(c);
        m->committed_at_ms = e->committed_at_ms;
        if (!c->bad && (!m->id_len || !m->master_len))
            c->bad = 1;
    }
    e->n_members = n;
    return c->bad ? SEGD_ERR_CORRUPT : SEGD_OK;
}

segd_err_t segd_outbox_decode(const uint8_t *data, size_t len, segd_outbox_entry_t *e)
{
    segd_outbox_entry_free(e);
    if (len < 2 || data[0] != SEGD_OUTBOX_VERSION)
        return SEGD_ERR_CORRUPT;
    cur_t c = {data + 2, data + len, 0};
    e->kind = data[1];
    e->committed_at_ms = get(&c);
    e->event_ms = get(&c);
    if (c.bad)
        return SEGD_ERR_CORRUPT;
    segd_err_t err = e->kind == SEGD_OUTBOX_DATA || e->kind == SEGD_OUTBOX_REPLACE
                         ? decode_data(&c, e)
                     : e->kind == SEGD_OUTBOX_RETIRE ? decode_retire(&c, e)
                     : e->kind == SEGD_OUTBOX_MEMBER ? decode_member(&c, e)
                                                     : SEGD_ERR_CORRUPT;
    if (!err && c.p != c.end)
        err = SEGD_ERR_CORRUPT;
    return err;
}
