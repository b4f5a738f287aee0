/* MemberEvent Avro binary; see member.h. Field order is the schema's. */
#include "wire/member.h"

#include <string.h>

#include "segd_schemas.h"
#include "base/utf8.h"
#include "base/varint.h"

#define MEMBER_MAX_ID 256

const char *segd_member_schema_json(void) { return SEGD_SCHEMA_MEMBER_EVENT; }

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

int segd_member_wins(const segd_member_t *x, const segd_member_t *y)
{
    if (x->epoch_ms != y->epoch_ms)
        return x->epoch_ms > y->epoch_ms;
    if (x->master_first_seen_ms != y->master_first_seen_ms)
        return x->master_first_seen_ms < y->master_first_seen_ms;
    return bytes_cmp(x->master, x->master_len, y->master, y->master_len) < 0;
}

int segd_member_is_body(const uint8_t *data, size_t len)
{
    /* zigzag(-1) = 1: one byte 0x01 */
    return len > 0 && data[0] == 0x01;
}

static void put_long(segd_buf_t *b, int64_t v) { b->len += segd_zz_put(b->data + b->len, v); }

static void put_string(segd_buf_t *b, const char *s, size_t n)
{
    put_long(b, (int64_t)n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

segd_err_t segd_member_encode(const segd_member_t *m, segd_buf_t *out)
{
    if (!m->id_len || !m->master_len)
        return SEGD_ERR_INVALID;
    /* 6 longs/ints of at most 10 bytes, two strings with their lengths */
    if (segd_buf_reserve(out, 8 * 10 + m->id_len + m->master_len))
        return SEGD_ERR_NOMEM;
    put_long(out, SEGD_MEMBER_TAG);
    put_string(out, m->id, m->id_len);
    put_string(out, m->master, m->master_len);
    put_long(out, m->master_first_seen_ms);
    put_long(out, m->epoch_ms);
    put_long(out, m->bucket);
    put_long(out, m->buckets);
    put_long(out, m->committed_at_ms);
    return SEGD_OK;
}

typedef struct reader {
    const uint8_t *p, *end;
    int bad;
} reader_t;

static int64_t get_long(reader_t *r)
{
    int64_t v = 0;
    if (!r->bad && segd_zz_get(&r->p, r->end, &v))
        r->bad = 1;
    return v;
}

static int32_t get_int(reader_t *r)
{
    int64_t v = get_long(r);
    if (v < INT32_MIN || v > INT32_MAX)
        r->bad = 1;
    return (int32_t)v;
}

/* A non-empty strict UTF-8 id without NUL (as the graph's ids, DESIGN §10.1). */
static const char *get_id(reader_t *r, size_t *len)
{
    int64_t n = get_long(r);
    if (r->bad || n < 1 || n > MEMBER_MAX_ID || n > r->end - r->p) {
        r->bad = 1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    if (memchr(s, 0, (size_t)n) || !segd_utf8_valid(s, (size_t)n)) {
        r->bad = 1;
        return NULL;
    }
    r->p += n;
    *len = (size_t)n;
    return s;
}

segd_err_t segd_member_decode_next(const uint8_t **pos, const uint8_t *end, segd_member_t *m)
{
    reader_t r = {*pos, end, 0};
    memset(m, 0, sizeof(*m));
    if (get_long(&r) != SEGD_MEMBER_TAG || r.bad)
        return SEGD_ERR_DECODE;
    m->id = get_id(&r, &m->id_len);
    m->master = get_id(&r, &m->master_len);
    m->master_first_seen_ms = get_long(&r);
    m->epoch_ms = get_long(&r);
    m->bucket = get_int(&r);
    m->buckets = get_int(&r);
    m->committed_at_ms = get_long(&r);
    if (r.bad)
        return SEGD_ERR_DECODE;
    *pos = r.p;
    return SEGD_OK;
}

segd_err_t segd_member_decode(const uint8_t *data, size_t len, segd_member_t *m)
{
    const uint8_t *pos = data;
    segd_err_t err = segd_member_decode_next(&pos, data + len, m);
    return err || pos != data + len ? SEGD_ERR_DECODE : SEGD_OK;
}
