/* Avro object container files for the file reader (reader_int.h). The
 * producer reads the header and groups the container blocks into units of
 * about OCF_UNIT bytes; a worker decompresses each block (deflate or
 * zstandard) and decodes its records with SegmentEvent's own schema. A
 * container written with another schema or codec takes the fallback path
 * instead, where avro-c resolves the schema on the producer thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/reader_int.h"

/* ---------- producer: framing the container ---------- */

/* A buffered cursor over the source for the container's framing. */
typedef struct br {
    segd_source_t *src;
    uint8_t buf[64 * 1024];
    size_t pos, len;
    int err; /* 1 = source error (why set), 2 = end of input */
    char why[256];
} br_t;

static int br_fill(br_t *b)
{
    if (b->pos < b->len)
        return 0;
    ssize_t r = segd_source_read(b->src, b->buf, sizeof(b->buf), b->why, sizeof(b->why));
    if (r <= 0) {
        b->err = r < 0 ? 1 : 2;
        return -1;
    }
    b->pos = 0;
    b->len = (size_t)r;
    return 0;
}

static int br_read(br_t *b, void *dst, size_t n)
{
    uint8_t *d = dst;
    while (n) {
        if (br_fill(b))
            return -1;
        size_t k = b->len - b->pos < n ? b->len - b->pos : n;
        memcpy(d, b->buf + b->pos, k);
        b->pos += k;
        d += k;
        n -= k;
    }
    return 0;
}

static int br_long(br_t *b, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t c;
        if (br_read(b, &c, 1))
            return -1;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    b->err = 3; /* malformed */
    return -1;
}

/* The header's metadata map: avro.schema (malloc'd) and avro.codec. */
static int read_meta(br_t *b, char **schema, char *codec, size_t codec_cap)
{
    for (;;) {
        int64_t count, size;
        if (br_long(b, &count))
            return -1;
        if (count == 0)
            return 0;
        if (count < 0) {
            if (count == INT64_MIN || br_long(b, &size))
                return -1;
            count = -count;
        }
        for (int64_t i = 0; i < count; i++) {
            int64_t klen, vlen;
            char key[64];
            if (br_long(b, &klen) || klen < 0 || klen > 1 << 20)
                return -1;
            size_t kl = (size_t)klen < sizeof(key) - 1 ? (size_t)klen : sizeof(key) - 1;
            if (br_read(b, key, kl))
                return -1;
            key[kl] = 0;
            for (int64_t k = (int64_t)kl; k < klen; k++) { /* a long key: not ours */
                char drop;
                if (br_read(b, &drop, 1))
                    return -1;
            }
            if (br_long(b, &vlen) || vlen < 0 || vlen > 16 << 20)
                return -1;
            char *v = malloc((size_t)vlen + 1);
            if (!v || br_read(b, v, (size_t)vlen)) {
                free(v);
                return -1;
            }
            v[vlen] = 0;
            if (!strcmp(key, "avro.schema") && !*schema) {
                *schema = v;
                continue;
            }
            if (!strcmp(key, "avro.codec"))
                snprintf(codec, codec_cap, "%s", v);
            free(v);
        }
    }
}

typedef struct legacy {
    loader_t *l;
    const char *path;
    slot_t *s;
    int failed;
} legacy_t;

static int legacy_flush(legacy_t *g)
{
    if (!g->s)
        return 0;
    segd_loader_finish_chunk(g->s);
    segd_loader_push_done(g->l, g->s);
    g->s = NULL;
    return 0;
}

/* The fallback for a container whose writer schema is not SegmentEvent's
 * own (resolved by avro-c): decoded here on the producer thread. */
static int legacy_cb(void *ctx, const segd_event_t *ev, long rec, const char *decode_error)
{
    legacy_t *g = ctx;
    worker_t *w = &g->l->producer_w;
    if (!g->s && !(g->s = segd_loader_take_free(g->l)))
        return 1;
    g->s->kind = UNIT_READY;
    g->s->file = g->path;
    if (decode_error) {
        segd_loader_report(w, g->s, rec, decode_error);
    } else {
        segd_event_reset(&w->ev);
        if (segd_event_set_user(&w->ev, ev->user_id, ev->user_id_len)) {
            segd_loader_report(w, g->s, rec, "user_id too long");
        } else {
            w->ev.ts_ms = ev->ts_ms;
            w->ev.op = ev->op;
            memcpy(w->ev.source, ev->source, sizeof(ev->source));
            for (size_t i = 0; i < ev->n_segments; i++)
                if (segd_event_add_segment(&w->ev, &ev->segments[i]))
                    return g->failed = 1;
            if (segd_loader_add_event(w, g->s, rec))
                return g->failed = 1;
        }
    }
    if (g->s->n_items + g->s->skipped >= LEGACY_CHUNK)
        legacy_flush(g);
    return 0;
}

static int produce_legacy(loader_t *l, const char *path, uint64_t size)
{
    legacy_t g = {l, path, NULL, 0};
    char err[512];
    if (segd_avro_file_foreach(path, legacy_cb, &g, err, sizeof(err)) != SEGD_OK &&
        !g.failed) {
        /* an unreadable tail: what was read is applied, the rest reported */
        fprintf(l->o->errors, "%s: %s\n", path, err);
        segd_loader_count_skip(l);
    }
    if (!g.s && !g.failed)
        g.s = segd_loader_take_free(l);
    if (g.s) {
        g.s->kind = UNIT_READY;
        g.s->file = path;
        g.s->bytes = size;
        g.s->failed = g.failed;
        legacy_flush(&g);
    }
    return g.failed ? -1 : 0;
}

static void ocf_tail_error(loader_t *l, const char *path, br_t *b, int64_t rec,
                           const char *what)
{
    fprintf(l->o->errors, "%s: %s after record %lld%s%s\n", path, what, (long long)rec,
            b->err == 1 ? ": " : "", b->err == 1 ? b->why : "");
    segd_loader_count_skip(l);
}

/* The container's blocks, grouped into units of about OCF_UNIT bytes. */
static int produce_ocf_blocks(loader_t *l, br_t *b, const char *path, ocf_codec_t codec,
                              const uint8_t sync[16], uint64_t *accounted)
{
    int64_t rec = 0;
    slot_t *s = NULL;
    int rc = 0;
    for (;;) {
        int64_t count, size;
        uint8_t mark[16];
        if (br_long(b, &count)) {
            if (b->err != 2) /* a clean end is the end of input here */
                ocf_tail_error(l, path, b, rec, "unreadable container block");
            break;
        }
        /* a record takes at least a byte of the (at most OCF_MAX_BLOCK)
         * decompressed block: a larger count is damage, and would overflow
         * the record numbers */
        if (br_long(b, &size) || count < 0 || count > OCF_MAX_BLOCK || size < 0 ||
            size > OCF_MAX_BLOCK) {
            ocf_tail_error(l, path, b, rec, b->err == 2 ? "truncated container block"
                                                         : "corrupt container block");
            break;
        }
        if (s && s->in_len + (size_t)size > OCF_UNIT) {
            segd_loader_push_work(l, s);
            s = NULL;
        }
        if (!s) {
            if (!(s = segd_loader_take_free(l))) {
                rc = -1;
                break;
            }
            s->kind = UNIT_OCF;
            s->file = path;
            s->codec = codec;
        }
        ocf_block_t *blocks =
            segd_array_grow(s->blocks, &s->cap_blocks, s->n_blocks + 1, sizeof(*blocks));
        if (!blocks || segd_loader_grow_in(s, s->in_len + (size_t)size)) {
            fprintf(l->o->errors, "%s: out of memory\n", path);
            segd_loader_count_skip(l);
            rc = -1;
            break;
        }
        s->blocks = blocks;
        if (br_read(b, s->in + s->in_len, (size_t)size) || br_read(b, mark, 16)) {
            ocf_tail_error(l, path, b, rec, "truncated container block");
            break;
        }
        if (memcmp(mark, sync, 16)) {
            ocf_tail_error(l, path, b, rec, "sync marker mismatch (corrupt file)");
            break;
        }
        s->blocks[s->n_blocks++] = (ocf_block_t){count, rec + 1, s->in_len, (size_t)size};
        s->in_len += (size_t)size;
        rec += count;
        uint64_t consumed = segd_source_consumed(b->src);
        s->bytes += consumed - *accounted;
        *accounted = consumed;
    }
    if (s && s->n_blocks)
        segd_loader_push_work(l, s);
    else if (s)
        segd_loader_give_back(l, s);
    return rc;
}

static int produce_ocf(loader_t *l, segd_source_t *src, const char *path, uint64_t *accounted)
{
    br_t *b = calloc(1, sizeof(*b));
    char *schema = NULL, codec_name[32] = "null";
    uint8_t magic[4], sync[16];
    uint64_t fp = 0;
    int rc = 0;
    if (!b) {
        fprintf(l->o->errors, "%s: out of memory\n", path);
        segd_loader_count_skip(l);
        return -1;
    }
    b->src = src;
    if (br_read(b, magic, 4) || read_meta(b, &schema, codec_name, sizeof(codec_name)) ||
        br_read(b, sync, 16) || !schema) {
        fprintf(l->o->errors, "%s: not a readable Avro container file%s%s\n", path,
                b->err == 1 ? ": " : "", b->err == 1 ? b->why : "");
        segd_loader_count_skip(l);
        goto out_free;
    }
    ocf_codec_t codec = !strcmp(codec_name, "null")      ? OCF_NULL
                        : !strcmp(codec_name, "deflate")   ? OCF_DEFLATE
                        : !strcmp(codec_name, "zstandard") ? OCF_ZSTD
                                                           : (ocf_codec_t)-1;
    if (segd_avro_fingerprint(schema, &fp) != SEGD_OK || fp != l->local_fp ||
        codec == (ocf_codec_t)-1) {
        /* another writer schema (resolved by avro-c) or codec: the old path */
        if (segd_source_kind(src) == SEGD_SOURCE_PLAIN) {
            rc = produce_legacy(l, path, segd_source_size(src));
            *accounted = segd_source_size(src);
        } else {
            fprintf(l->o->errors, "%s: a compressed container file must use SegmentEvent's "
                    "own schema and the null, deflate or zstandard codec (decompress it "
                    "to have the schema resolved)\n", path);
            segd_loader_count_skip(l);
        }
        goto out_free;
    }
    rc = produce_ocf_blocks(l, b, path, codec, sync, accounted);
out_free:
    free(schema);
    free(b);
    return rc;
}

/* ---------- workers: decompressing and decoding blocks ---------- */

/* A container block's bytes, decompressed into w->scratch when needed. */
static int inflate_block(worker_t *w, slot_t *s, const ocf_block_t *b, const uint8_t **out,
                         size_t *out_len, char *why, size_t n)
{
    const uint8_t *src = s->in + b->off;
    if (s->codec == OCF_NULL) {
        *out = src;
        *out_len = b->len;
        return 0;
    }
    w->scratch.len = 0;
    if (s->codec == OCF_DEFLATE) {
        if (!w->z_ready) {
            if (inflateInit2(&w->z, -15) != Z_OK)
                return -1;
            w->z_ready = 1;
        }
        inflateReset(&w->z);
        w->z.next_in = (uint8_t *)src;
        w->z.avail_in = (uInt)b->len;
    } else if (!w->zd && !(w->zd = ZSTD_createDCtx())) {
        return -1;
    } else {
        ZSTD_DCtx_reset(w->zd, ZSTD_reset_session_only);
    }
    ZSTD_inBuffer ib = {src, b->len, 0};
    for (;;) {
        if (w->scratch.len >= OCF_MAX_BLOCK) {
            snprintf(why, n, "block decompresses beyond %u bytes", OCF_MAX_BLOCK);
            return 1;
        }
        if (segd_buf_reserve(&w->scratch, 256 * 1024))
            return -1;
        uint8_t *dst = w->scratch.data + w->scratch.len;
        size_t room = w->scratch.cap - w->scratch.len;
        if (s->codec == OCF_DEFLATE) {
            w->z.next_out = dst;
            w->z.avail_out = (uInt)(room > UINT32_MAX ? UINT32_MAX : room);
            int rc = inflate(&w->z, Z_NO_FLUSH);
            w->scratch.len += (size_t)(w->z.next_out - dst);
            if (rc == Z_STREAM_END)
                break;
            if (rc != Z_OK && !(rc == Z_BUF_ERROR && w->z.avail_out == 0)) {
                snprintf(why, n, "corrupt deflate block: %s", w->z.msg ? w->z.msg : "truncated");
                return 1;
            }
        } else {
            ZSTD_outBuffer ob = {dst, room, 0};
            size_t rc = ZSTD_decompressStream(w->zd, &ob, &ib);
            w->scratch.len += ob.pos;
            if (ZSTD_isError(rc)) {
                snprintf(why, n, "corrupt zstandard block: %s", ZSTD_getErrorName(rc));
                return 1;
            }
            if (rc == 0 && ib.pos == ib.size)
                break;
            if (ob.pos == 0 && ib.pos == ib.size) {
                snprintf(why, n, "corrupt zstandard block: truncated");
                return 1;
            }
        }
    }
    *out = w->scratch.data;
    *out_len = w->scratch.len;
    return 0;
}

/* Records of container blocks written with SegmentEvent's own schema. A
 * record that cannot be framed loses the rest of its block (reported). */
static int decode_ocf(worker_t *w, slot_t *s)
{
    char why[256];
    for (size_t bi = 0; bi < s->n_blocks; bi++) {
        const ocf_block_t *b = &s->blocks[bi];
        const uint8_t *p, *end;
        size_t len;
        int rc = inflate_block(w, s, b, &p, &len, why, sizeof(why));
        if (rc < 0)
            return -1;
        if (rc > 0) {
            fprintf(w->l->o->errors, "%s:#%lld: %s (its %lld records skipped)\n", s->file,
                    (long long)b->first_rec, why, (long long)b->count);
            s->skipped += (uint64_t)b->count;
            continue;
        }
        end = p + len;
        int framed = 1;
        for (int64_t i = 0; i < b->count && framed; i++) {
            size_t used = 0;
            int64_t no = b->first_rec + i;
            segd_err_t e =
                segd_avro_decode_local_prefix(w->codec, p, (size_t)(end - p), &used, &w->ev,
                                              why, sizeof(why));
            if (e == SEGD_ERR_NOMEM)
                return -1;
            if (e && !used) {
                fprintf(w->l->o->errors, "%s:#%lld: %s (the %lld records after it in its "
                        "block skipped)\n", s->file, (long long)no, why,
                        (long long)(b->count - i - 1));
                s->skipped += (uint64_t)(b->count - i);
                framed = 0;
                break;
            }
            p += used;
            if (e)
                segd_loader_report(w, s, no, why);
            else if (segd_loader_add_event(w, s, no))
                return -1;
        }
        if (framed && p != end) {
            fprintf(w->l->o->errors, "%s:#%lld: container block has %zu bytes after its "
                    "%lld records\n", s->file, (long long)(b->first_rec + b->count - 1),
                    (size_t)(end - p), (long long)b->count);
            s->skipped++;
        }
    }
    return 0;
}

const reader_format_t segd_loader_format_ocf = {.produce = produce_ocf, .decode = decode_ocf};
