/* LinkEvent Avro binary and JSON lines; see link_event.h. The local schema
 * is small and fixed, so its binary form is read and written by hand. */
#include "wire/link_event.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/varint.h"
#include "segd_schemas.h"

#define ID_CACHE 16 /* Confluent schema ids known to be the local schema */

struct segd_link_codec {
    uint64_t fp; /* the local schema's fingerprint */
    segd_schema_source_t registry;
    int has_registry;
    int32_t ok_ids[ID_CACHE];
    size_t n_ok;
    json_t *json; /* the last JSON line parsed: ev borrows its strings */
};

segd_err_t segd_link_codec_new(segd_link_codec_t **out, const segd_schema_source_t *registry,
                               char *errstr, size_t errstr_size)
{
    segd_link_codec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return SEGD_ERR_NOMEM;
    if (segd_avro_fingerprint(SEGD_SCHEMA_LINK_EVENT, &c->fp)) {
        free(c);
        return segd_errf(SEGD_ERR_SCHEMA, errstr, errstr_size, "link_event.avsc: bad schema");
    }
    if (registry) {
        c->registry = *registry;
        c->has_registry = 1;
    }
    *out = c;
    return SEGD_OK;
}

void segd_link_codec_destroy(segd_link_codec_t *c)
{
    if (!c)
        return;
    json_decref(c->json);
    free(c);
}

/* ---------- Avro binary of the local schema ---------- */

static int get_long(const uint8_t **p, const uint8_t *end, int64_t *v)
{
    uint64_t z;
    if (segd_uv_get(p, end, &z))
        return -1;
    *v = segd_unzigzag(z);
    return 0;
}

static int get_string(const uint8_t **p, const uint8_t *end, const char **s, size_t *len)
{
    int64_t n;
    if (get_long(p, end, &n) || n < 0 || n > end - *p)
        return -1;
    *s = (const char *)*p;
    *len = (size_t)n;
    *p += n;
    return 0;
}

static segd_err_t decode_body(const uint8_t *p, const uint8_t *end, segd_wire_link_t *ev,
                              char *errstr, size_t n)
{
    int64_t op, branch;
    uint8_t d[8];
    if (get_string(&p, end, &ev->id_a, &ev->id_a_len) ||
        get_string(&p, end, &ev->id_b, &ev->id_b_len) || get_long(&p, end, &op) ||
        get_long(&p, end, &ev->ts_ms) || end - p < 8)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (op != 0 && op != 1)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    ev->op = (segd_wire_link_op_t)op;
    for (int i = 0; i < 8; i++) /* Avro doubles are little-endian */
        d[i] = p[i];
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--)
        bits = bits << 8 | d[i];
    memcpy(&ev->weight, &bits, 8);
    p += 8;
    ev->source = NULL;
    ev->source_len = 0;
    if (get_long(&p, end, &branch) || (branch != 0 && branch != 1) ||
        (branch == 1 && get_string(&p, end, &ev->source, &ev->source_len)))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (p != end)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "trailing bytes");
    return SEGD_OK;
}

/* A Confluent schema id is accepted when its schema is the local one. */
static segd_err_t check_schema_id(segd_link_codec_t *c, int32_t id, char *errstr, size_t n)
{
    for (size_t i = 0; i < c->n_ok; i++)
        if (c->ok_ids[i] == id)
            return SEGD_OK;
    if (!c->has_registry)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", (int)id);
    const char *json = NULL;
    segd_err_t err = c->registry.lookup(c->registry.ctx, id, &json, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", (int)id);
    if (err)
        return err;
    uint64_t fp;
    if (segd_avro_fingerprint(json, &fp) || fp != c->fp)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "incompatible writer schema id %d",
                         (int)id);
    c->ok_ids[c->n_ok++ % ID_CACHE] = id;
    if (c->n_ok > ID_CACHE)
        c->n_ok = ID_CACHE;
    return SEGD_OK;
}

segd_err_t segd_link_decode(segd_link_codec_t *c, segd_framing_t framing, const void *buf,
                            size_t len, segd_wire_link_t *ev, char *errstr, size_t n)
{
    const uint8_t *p = buf, *end = p + len;
    if (framing == SEGD_FRAMING_AUTO)
        framing = len && p[0] == 0x00               ? SEGD_FRAMING_CONFLUENT
                  : len >= 2 && p[0] == 0xC3 && p[1] == 0x01 ? SEGD_FRAMING_SINGLE_OBJECT
                                                              : SEGD_FRAMING_RAW;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        if (len < 5)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated confluent header");
        if (p[0] != 0)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        int32_t id = (int32_t)((uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 8 | p[4]);
        segd_err_t err = check_schema_id(c, id, errstr, n);
        if (err)
            return err;
        p += 5;
    } else if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        if (len < 10 || p[0] != 0xC3 || p[1] != 0x01)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        uint64_t fp = 0;
        for (int i = 9; i >= 2; i--)
            fp = fp << 8 | p[i];
        if (fp != c->fp)
            return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema fingerprint %016llx",
                             (unsigned long long)fp);
        p += 10;
    }
    return decode_body(p, end, ev, errstr, n);
}

static segd_err_t put_long(segd_buf_t *out, int64_t v)
{
    uint8_t b[SEGD_ZZ_MAX];
    return segd_buf_append(out, b, segd_uv_put(b, segd_zigzag(v)));
}

static segd_err_t put_string(segd_buf_t *out, const char *s, size_t len)
{
    segd_err_t err = put_long(out, (int64_t)len);
    return err ? err : segd_buf_append(out, s, len);
}

segd_err_t segd_link_encode(const segd_wire_link_t *ev, segd_framing_t framing,
                            int32_t schema_id, segd_buf_t *out)
{
    out->len = 0;
    segd_err_t err = SEGD_OK;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        uint8_t h[5] = {0, (uint8_t)(schema_id >> 24), (uint8_t)(schema_id >> 16),
                        (uint8_t)(schema_id >> 8), (uint8_t)schema_id};
        err = segd_buf_append(out, h, 5);
    } else if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        uint64_t fp;
        uint8_t h[10] = {0xC3, 0x01};
        if (segd_avro_fingerprint(SEGD_SCHEMA_LINK_EVENT, &fp))
            return SEGD_ERR_SCHEMA;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)(fp >> (8 * i));
        err = segd_buf_append(out, h, 10);
    }
    uint64_t bits;
    uint8_t d[8];
    memcpy(&bits, &ev->weight, 8);
    for (int i = 0; i < 8; i++)
        d[i] = (uint8_t)(bits >> (8 * i));
    if (!err)
        err = put_string(out, ev->id_a, ev->id_a_len);
    if (!err)
        err = put_string(out, ev->id_b, ev->id_b_len);
    if (!err)
        err = put_long(out, ev->op);
    if (!err)
        err = put_long(out, ev->ts_ms);
    if (!err)
        err = segd_buf_append(out, d, 8);
    if (!err)
        err = put_long(out, ev->source ? 1 : 0);
    if (!err && ev->source)
        err = put_string(out, ev->source, ev->source_len);
    return err;
}

/* ---------- JSON lines ---------- */

static int json_str(json_t *o, const char *key, const char **s, size_t *len)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return -1;
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

segd_err_t segd_link_json_parse(segd_link_codec_t *c, const char *line, size_t len,
                                segd_wire_link_t *ev, char *errstr, size_t n)
{
    json_error_t jerr;
    json_decref(c->json);
    c->json = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!c->json || !json_is_object(c->json))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "not a JSON object: %s", jerr.text);
    const char *op;
    size_t op_len;
    json_t *ts = json_object_get(c->json, "ts_ms"), *w = json_object_get(c->json, "weight"),
           *src = json_object_get(c->json, "source");
    if (json_str(c->json, "id_a", &ev->id_a, &ev->id_a_len) ||
        json_str(c->json, "id_b", &ev->id_b, &ev->id_b_len) ||
        json_str(c->json, "op", &op, &op_len) || !json_is_integer(ts) ||
        (w && !json_is_number(w)) || (src && !json_is_null(src) && !json_is_string(src)))
        return segd_errf(SEGD_ERR_DECODE, errstr, n,
                         "needs id_a, id_b (strings), op, ts_ms (integer), optional weight "
                         "(number) and source (string or null)");
    if (strcmp(op, "LINK") == 0)
        ev->op = SEGD_WIRE_LINK;
    else if (strcmp(op, "UNLINK") == 0)
        ev->op = SEGD_WIRE_UNLINK;
    else
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "op must be LINK or UNLINK");
    ev->ts_ms = json_integer_value(ts);
    ev->weight = w ? json_number_value(w) : 1.0;
    ev->source = json_is_string(src) ? json_string_value(src) : NULL;
    ev->source_len = ev->source ? json_string_length(src) : 0;
    return SEGD_OK;
}
