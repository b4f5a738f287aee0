/* The hand-written decoder for the local schema. When the writer schema is
 * the reader schema (raw framing, or single-object with the local
 * fingerprint) the binary is parsed directly: about 10x faster than
 * avro-c's generic values, which would otherwise dominate ingest CPU. It
 * accepts exactly what avro-c accepts for this schema (tests compare both). */
#include <stdint.h>
#include <string.h>

#include "wire/avro_codec_int.h"

typedef struct cursor {
    const uint8_t *p, *end;
} cursor_t;

static int cur_long(cursor_t *c, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (c->p >= c->end)
            return -1;
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

static int cur_int(cursor_t *c, int32_t *out)
{
    int64_t v;
    if (cur_long(c, &v) || v < INT32_MIN || v > INT32_MAX)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int cur_bytes(cursor_t *c, const uint8_t **s, size_t *len)
{
    int64_t n;
    if (cur_long(c, &n) || n < 0 || n > c->end - c->p)
        return -1;
    *s = c->p;
    *len = (size_t)n;
    c->p += n;
    return 0;
}

/* 0 = ok, -1 = malformed, -2 = out of memory, -3 = more than max segments.
 * Past max the items are still read (not kept), so the cursor ends at the
 * array's end either way: a container block's next record starts there. */
static int fast_segments(cursor_t *c, segd_event_t *ev, size_t max)
{
    int over = 0;
    for (;;) {
        int64_t count, block_bytes;
        if (cur_long(c, &count))
            return -1;
        if (count == 0)
            return over ? -3 : 0;
        if (count < 0) { /* a block with its byte size */
            if (count == INT64_MIN || cur_long(c, &block_bytes) || block_bytes < 0)
                return -1;
            count = -count;
        }
        if (count > c->end - c->p) /* every item takes at least one byte */
            return -1;
        if (!over && (uint64_t)count > max - ev->n_segments)
            over = 1;
        for (int64_t i = 0; i < count; i++) {
            segd_seg_update_t u;
            if (cur_long(c, &u.segment_id) || cur_int(c, &u.ttl_s) || cur_int(c, &u.flags) ||
                cur_int(c, &u.partner_id))
                return -1;
            if (!over && segd_event_add_segment(ev, &u))
                return -2;
        }
    }
}

/* Decodes one record at c->p, leaving c->p after it. A user id over
 * SEGD_MAX_USER_ID bytes is SEGD_ERR_LIMIT once the record was read through
 * (so that a container block can go on with the next record). */
static segd_err_t fast_decode_at(cursor_t *c, size_t max_segments, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    const uint8_t *s;
    size_t slen;
    int32_t op;
    int64_t branch;
    int too_long;
    segd_event_reset(ev);
    if (cur_bytes(c, &s, &slen))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    too_long = segd_event_set_user(ev, (const char *)s, slen) != SEGD_OK;
    if (cur_long(c, &ev->ts_ms) || cur_int(c, &op))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (op < 0 || op > SEGD_OP_ERASE_USER)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    ev->op = (segd_op_t)op;
    int rc = fast_segments(c, ev, max_segments);
    if (rc == -2)
        return SEGD_ERR_NOMEM;
    if (rc == -1 || cur_long(c, &branch) || (branch != 0 && branch != 1) ||
        (branch == 1 && cur_bytes(c, &s, &slen)))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (branch == 1)
        snprintf(ev->source, sizeof(ev->source), "%.*s", (int)slen, (const char *)s);
    if (rc == -3) /* the whole record was read: a prefix decode may go on after it */
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "more than %zu segments", max_segments);
    if (too_long)
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "user_id longer than %d bytes",
                         SEGD_MAX_USER_ID);
    return SEGD_OK;
}

segd_err_t segd_avro_fast_decode(const uint8_t *b, size_t len, size_t max_segments,
                                 segd_event_t *ev, char *errstr, size_t n)
{
    cursor_t c = {b, b + len};
    segd_err_t err = fast_decode_at(&c, max_segments, ev, errstr, n);
    if (!err && c.p != c.end)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "trailing bytes");
    return err;
}

segd_err_t segd_avro_decode_local_prefix(segd_avro_codec_t *c, const void *buf, size_t len,
                                         size_t *used, segd_event_t *ev, char *errstr,
                                         size_t n)
{
    cursor_t cur = {buf, (const uint8_t *)buf + len};
    segd_err_t err = fast_decode_at(&cur, c->max_segments, ev, errstr, n);
    *used = !err || err == SEGD_ERR_LIMIT ? (size_t)(cur.p - (const uint8_t *)buf) : 0;
    return err;
}
