/* The Avro codec for SegmentEvent (see avro_codec.h): a codec's lifetime,
 * the framings (raw, Confluent, single-object) and the writer-schema lookup
 * by registry id or fingerprint, with a bounded negative cache so a flood of
 * unknown ids does not cost a registry round trip each. Resolvers live in
 * avro_resolver.c, the local schema's fast decoder in avro_fast.c. */
#include <avro.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "wire/avro_codec_int.h"

#include "segd_schemas.h"

segd_err_t segd_avro_codec_new(segd_avro_codec_t **out, const char *reader_json,
                               const segd_schema_source_t *registry, char *errstr,
                               size_t n)
{
    segd_avro_codec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return SEGD_ERR_NOMEM;
    if (registry)
        c->registry = *registry;
    c->max_segments = SIZE_MAX;
    /* compiled in: an installed binary has no schemas directory */
    c->reader_json = strdup(reader_json ? reader_json : SEGD_SCHEMA_SEGMENT_EVENT);
    segd_err_t err = SEGD_ERR_NOMEM;
    if (!c->reader_json)
        goto out_fail;
    static const char empty[1];
    c->mem = avro_reader_memory(empty, 0);
    c->out = avro_writer_memory(empty, 0);
    segd_avro_load_defaults(c);
    if ((err = segd_avro_resolver_init(&c->local, c->reader_json, c->reader_json, errstr, n)))
        goto out_fail;
    *out = c;
    return SEGD_OK;
out_fail:
    segd_avro_codec_destroy(c);
    return err;
}

void segd_avro_codec_destroy(segd_avro_codec_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->ncache; i++)
        segd_avro_resolver_free(&c->cache[i]);
    free(c->cache);
    segd_avro_resolver_free(&c->local);
    if (c->mem)
        avro_reader_free(c->mem);
    if (c->out)
        avro_writer_free(c->out);
    free(c->reader_json);
    free(c);
}

const char *segd_avro_codec_reader_json(const segd_avro_codec_t *c) { return c->reader_json; }

void segd_avro_codec_set_limits(segd_avro_codec_t *c, const segd_limits_t *lim)
{
    c->max_segments = lim->max_segments;
}

static resolver_t *cache_slot(segd_avro_codec_t *c)
{
    resolver_t *r = segd_array_grow(c->cache, &c->capcache, c->ncache + 1, sizeof(*r));
    if (!r)
        return NULL;
    c->cache = r;
    return &c->cache[c->ncache];
}

segd_err_t segd_avro_codec_add_schema(segd_avro_codec_t *c, const char *writer_json,
                                      char *errstr, size_t n)
{
    resolver_t *r = cache_slot(c);
    if (!r)
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_avro_resolver_init(r, c->reader_json, writer_json, errstr, n);
    if (!err)
        c->ncache++;
    return err;
}

/* The resolver for a Confluent schema id, fetched and built on first use. */
static segd_err_t by_id(segd_avro_codec_t *c, int32_t id, resolver_t **out, char *errstr,
                        size_t n)
{
    if (id < 0) /* registry ids are positive; -1 marks the local schemas in the cache */
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    for (size_t i = 0; i < c->ncache; i++)
        if (c->cache[i].id == id) {
            *out = &c->cache[i];
            return c->cache[i].incompatible
                       ? segd_errf(SEGD_ERR_SCHEMA, errstr, n,
                                   "incompatible writer schema id %d", id)
                       : SEGD_OK;
        }
    if (!c->registry.lookup)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d (no registry)", id);
    int64_t now = segd_mono_ms();
    for (size_t i = 0; i < UNKNOWN_IDS; i++)
        if (c->unknown[i].until_ms > now && c->unknown[i].id == id)
            return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    const char *json;
    segd_err_t err = c->registry.lookup(c->registry.ctx, id, &json, errstr, n);
    if (err == SEGD_ERR_NOTFOUND) {
        c->unknown[c->unknown_next].id = id;
        c->unknown[c->unknown_next].until_ms = now + UNKNOWN_TTL_MS;
        c->unknown_next = (c->unknown_next + 1) % UNKNOWN_IDS;
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    }
    if (err)
        return err;
    resolver_t *r = cache_slot(c);
    if (!r)
        return SEGD_ERR_NOMEM;
    err = segd_avro_resolver_init(r, c->reader_json, json, errstr, n);
    r->id = id;
    r->incompatible = err != SEGD_OK; /* segd_avro_resolver_init left it empty */
    *out = &c->cache[c->ncache++];
    if (err)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "incompatible writer schema id %d", id);
    return SEGD_OK;
}

static segd_err_t by_fingerprint(segd_avro_codec_t *c, uint64_t fp, resolver_t **out,
                                 char *errstr, size_t n)
{
    if (c->local.fp == fp) {
        *out = &c->local;
        return SEGD_OK;
    }
    for (size_t i = 0; i < c->ncache; i++)
        if (c->cache[i].id < 0 && c->cache[i].fp == fp) {
            *out = &c->cache[i];
            return SEGD_OK;
        }
    return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema fingerprint %016llx",
                     (unsigned long long)fp);
}

static segd_err_t frame(segd_avro_codec_t *c, segd_framing_t framing, const uint8_t *b,
                        size_t len, resolver_t **r, size_t *skip, char *errstr, size_t n)
{
    if (framing == SEGD_FRAMING_AUTO)
        framing = len >= 1 && b[0] == 0 ? SEGD_FRAMING_CONFLUENT
                  : len >= 2 && b[0] == 0xC3 && b[1] == 0x01 ? SEGD_FRAMING_SINGLE_OBJECT
                                                             : SEGD_FRAMING_RAW;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        if (len < 1 || b[0] != 0)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        if (len < 5)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated confluent header");
        *skip = 5;
        return by_id(c, (int32_t)((uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 |
                                  (uint32_t)b[3] << 8 | b[4]), r, errstr, n);
    }
    if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        if (len < 2 || b[0] != 0xC3 || b[1] != 0x01)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        if (len < 10)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated single-object header");
        uint64_t fp = 0;
        for (int i = 9; i >= 2; i--)
            fp = fp << 8 | b[i];
        *skip = 10;
        return by_fingerprint(c, fp, r, errstr, n);
    }
    *skip = 0;
    *r = &c->local;
    return SEGD_OK;
}

uint64_t segd_avro_codec_fingerprint(const segd_avro_codec_t *c) { return c->local.fp; }

void segd_avro_codec_set_generic_only(segd_avro_codec_t *c, int on) { c->generic_only = on; }

segd_err_t segd_avro_decode(segd_avro_codec_t *c, segd_framing_t framing, const void *buf,
                            size_t len, segd_event_t *ev, char *errstr, size_t n)
{
    resolver_t *r = NULL;
    size_t skip = 0;
    const uint8_t *b = buf;
    segd_err_t err = frame(c, framing, b, len, &r, &skip, errstr, n);
    if (err)
        return err;
    if (r == &c->local && !c->generic_only)
        return segd_avro_fast_decode(b + skip, len - skip, c->max_segments, ev, errstr, n);
    /* Validate by skipping first: avro-c's reader leaks a string buffer when a
     * datum ends inside it, and skipping allocates nothing. */
    const char *body = (const char *)b + skip;
    avro_reader_memory_set_source(c->mem, body, (int64_t)(len - skip));
    if (avro_skip_data(c->mem, r->writer))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    char extra; /* the memory reader's is_eof always says no: probe one byte */
    if (avro_read(c->mem, &extra, 1) == 0)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "trailing bytes");
    avro_reader_memory_set_source(c->mem, body, (int64_t)(len - skip));
    avro_value_reset(&r->value);
    if (avro_value_read(c->mem, r->resolver_iface ? &r->wvalue : &r->value))
        err = segd_errf(SEGD_ERR_DECODE, errstr, n, "malformed avro");
    else
        err = segd_avro_extract(c, r, &r->value, ev, errstr, n);
    /* Emptied again at once: strings left in avro-c's value between messages
     * are invisible to LeakSanitizer from a long-lived codec (the fuzz replay
     * reported them), and a big event's buffers are not kept. */
    avro_value_reset(&r->value);
    return err;
}

segd_err_t segd_avro_encode(segd_avro_codec_t *c, segd_framing_t framing, int32_t schema_id,
                            const segd_event_t *ev, segd_buf_t *out)
{
    size_t size, head = framing == SEGD_FRAMING_CONFLUENT       ? 5
                        : framing == SEGD_FRAMING_SINGLE_OBJECT ? 10
                                                                : 0;
    segd_err_t err = SEGD_ERR_INVALID;
    out->len = 0;
    if (segd_avro_fill_value(&c->local.value, ev) || avro_value_sizeof(&c->local.value, &size))
        goto out_reset_value;
    /* the memory writer never grows: size the buffer first */
    if ((err = segd_buf_reserve(out, head + size)))
        goto out_reset_value;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        out->data[0] = 0;
        for (int i = 0; i < 4; i++)
            out->data[1 + i] = (uint8_t)((uint32_t)schema_id >> (24 - 8 * i));
    } else if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        out->data[0] = 0xC3;
        out->data[1] = 0x01;
        for (int i = 0; i < 8; i++)
            out->data[2 + i] = (uint8_t)(c->local.fp >> (8 * i));
    }
    avro_writer_memory_set_dest(c->out, (const char *)out->data + head, (int64_t)size);
    err = avro_value_write(c->out, &c->local.value) ? SEGD_ERR_INVALID : SEGD_OK;
    if (!err)
        out->len = head + size;
out_reset_value:
    avro_value_reset(&c->local.value); /* as in decode: keep no strings */
    return err;
}
