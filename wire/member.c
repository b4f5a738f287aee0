/* MemberEvent Avro binary; see member.h. Field order is the schema's. */
#include "wire/member.h"

#include <string.h>

#include "segd_schemas.h"
#include "base/utf8.h"
#include "wire/avro_bin.h"

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

segd_err_t segd_member_encode(const segd_member_t *m, segd_buf_t *out)
{
    if (!m->id_len || !m->master_len)
        return SEGD_ERR_INVALID;
    /* 6 longs/ints of at most 10 bytes, two strings with their lengths */
    if (segd_buf_reserve(out, 8 * 10 + m->id_len + m->master_len))
        return SEGD_ERR_NOMEM;
    segd_avro_put_long(out, SEGD_MEMBER_TAG);
    segd_avro_put_bytes(out, m->id, m->id_len);
    segd_avro_put_bytes(out, m->master, m->master_len);
    segd_avro_put_long(out, m->master_first_seen_ms);
    segd_avro_put_long(out, m->epoch_ms);
    segd_avro_put_long(out, m->bucket);
    segd_avro_put_long(out, m->buckets);
    segd_avro_put_long(out, m->committed_at_ms);
    return SEGD_OK;
}

/* A non-empty strict UTF-8 id without NUL (as the graph's ids, DESIGN §10.1). */
static const char *get_id(segd_avro_reader_t *r, size_t *len)
{
    const char *s = segd_avro_get_bytes(r, len);
    if (s && (*len < 1 || *len > MEMBER_MAX_ID || memchr(s, 0, *len) ||
              !segd_utf8_valid(s, *len)))
        r->bad = 1;
    return r->bad ? NULL : s;
}

segd_err_t segd_member_decode_next(const uint8_t **pos, const uint8_t *end, segd_member_t *m)
{
    segd_avro_reader_t r = {*pos, end, 0};
    memset(m, 0, sizeof(*m));
    if (segd_avro_get_long(&r) != SEGD_MEMBER_TAG || r.bad)
        return SEGD_ERR_DECODE;
    m->id = get_id(&r, &m->id_len);
    m->master = get_id(&r, &m->master_len);
    m->master_first_seen_ms = segd_avro_get_long(&r);
    m->epoch_ms = segd_avro_get_long(&r);
    m->bucket = segd_avro_get_int(&r);
    m->buckets = segd_avro_get_int(&r);
    m->committed_at_ms = segd_avro_get_long(&r);
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
