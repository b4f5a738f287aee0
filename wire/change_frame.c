/* Change-event framings; see change_frame.h. The single-object
 * fingerprint needs the schema's canonical form, hence avro-c: kept out of
 * change.c so that an embedded cache decoding bodies does not link it. */
#include "wire/change_frame.h"

#include <pthread.h>

#include "segd_schemas.h"
#include "wire/avro_codec.h"
#include "wire/member.h"

static uint64_t fps[2]; /* by segd_frame_kind_t */

static void compute_fps(void)
{
    segd_avro_fingerprint(SEGD_SCHEMA_CHANGE_EVENT, &fps[SEGD_FRAME_CHANGE]);
    segd_avro_fingerprint(SEGD_SCHEMA_MEMBER_EVENT, &fps[SEGD_FRAME_MEMBER]);
}

/* The schemas are compiled in, so their fingerprints are constants computed
 * once (a schema parse per message would dominate the encoder). */
static uint64_t fingerprint(segd_frame_kind_t kind)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, compute_fps);
    return fps[kind];
}

static uint64_t change_fingerprint(void) { return fingerprint(SEGD_FRAME_CHANGE); }

segd_err_t segd_change_frame(segd_change_framing_t f, int32_t schema_id, segd_buf_t *out)
{
    return segd_frame(SEGD_FRAME_CHANGE, f, schema_id, out);
}

segd_err_t segd_frame(segd_frame_kind_t kind, segd_change_framing_t f, int32_t schema_id,
                      segd_buf_t *out)
{
    if (segd_buf_reserve(out, 10))
        return SEGD_ERR_NOMEM;
    uint8_t *p = out->data + out->len;
    if (f == SEGD_CHANGE_CONFLUENT) {
        p[0] = 0;
        for (int i = 0; i < 4; i++)
            p[1 + i] = (uint8_t)((uint32_t)schema_id >> (24 - 8 * i));
        out->len += 5;
        return SEGD_OK;
    }
    uint64_t fp = fingerprint(kind);
    p[0] = 0xC3;
    p[1] = 0x01;
    for (int i = 0; i < 8; i++)
        p[2 + i] = (uint8_t)(fp >> (8 * i));
    out->len += 10;
    return SEGD_OK;
}

segd_err_t segd_change_unframe(const uint8_t *data, size_t len, int32_t expected_id,
                               const uint8_t **body, size_t *body_len)
{
    if (len >= 10 && data[0] == 0xC3 && data[1] == 0x01) {
        uint64_t fp = 0;
        for (int i = 0; i < 8; i++)
            fp |= (uint64_t)data[2 + i] << (8 * i);
        if (fp != change_fingerprint())
            return SEGD_ERR_DECODE;
        *body = data + 10;
        *body_len = len - 10;
        return SEGD_OK;
    }
    if (len >= 5 && data[0] == 0) {
        int32_t id = (int32_t)((uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 |
                               (uint32_t)data[3] << 8 | data[4]);
        if (expected_id >= 0 && id != expected_id)
            return SEGD_ERR_DECODE;
        *body = data + 5;
        *body_len = len - 5;
        return SEGD_OK;
    }
    return SEGD_ERR_DECODE;
}

segd_err_t segd_change_unframe_kind(const uint8_t *data, size_t len, int32_t change_id,
                                    int32_t member_id, const uint8_t **body, size_t *body_len,
                                    segd_frame_kind_t *kind)
{
    const uint8_t *b;
    size_t n;
    segd_frame_kind_t k;
    if (len >= 10 && data[0] == 0xC3 && data[1] == 0x01) {
        uint64_t fp = 0;
        for (int i = 0; i < 8; i++)
            fp |= (uint64_t)data[2 + i] << (8 * i);
        if (fp == fingerprint(SEGD_FRAME_CHANGE))
            k = SEGD_FRAME_CHANGE;
        else if (fp == fingerprint(SEGD_FRAME_MEMBER))
            k = SEGD_FRAME_MEMBER;
        else
            return SEGD_ERR_DECODE;
        b = data + 10, n = len - 10;
    } else if (len >= 5 && data[0] == 0) {
        int32_t id = (int32_t)((uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 |
                               (uint32_t)data[3] << 8 | data[4]);
        b = data + 5, n = len - 5;
        int is_member = segd_member_is_body(b, n);
        if (change_id >= 0 && id == change_id)
            k = SEGD_FRAME_CHANGE;
        else if (member_id >= 0 && id == member_id)
            k = SEGD_FRAME_MEMBER;
        else if ((change_id < 0 && !is_member) || (member_id < 0 && is_member))
            k = is_member ? SEGD_FRAME_MEMBER : SEGD_FRAME_CHANGE;
        else
            return SEGD_ERR_DECODE;
    } else {
        return SEGD_ERR_DECODE;
    }
    if ((k == SEGD_FRAME_MEMBER) != segd_member_is_body(b, n))
        return SEGD_ERR_DECODE;
    *body = b;
    *body_len = n;
    *kind = k;
    return SEGD_OK;
}
