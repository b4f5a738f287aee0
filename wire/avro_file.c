/* Avro object container files; see avro_file.h. Layout: "Obj\x01", a
 * metadata map (avro.schema, avro.codec), a 16-byte sync marker, then blocks
 * of (record count, byte size, data, sync). Deflate here means raw RFC 1951
 * (no zlib header), as the Avro spec says. */
#define _GNU_SOURCE
#include "wire/avro_file.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/hex.h"
#include "base/varint.h"

/* Uncompressed bytes per block: large enough for deflate to find the
 * repetition inside a user's record, small enough to stay cache-friendly. */
#define BLOCK_TARGET (256 * 1024)
#define MAX_BLOCK (64 * 1024 * 1024)

static const uint8_t MAGIC[4] = {'O', 'b', 'j', 1};

struct segd_ocf_writer {
    FILE *f;
    char *path;
    segd_ocf_codec_t codec;
    int level;
    ZSTD_CCtx *zc;
    uint8_t sync[16];
    segd_buf_t block;    /* encoded records of the open block */
    size_t block_mark;   /* block.len before the record being appended */
    int64_t block_count;
    segd_buf_t zbuf;     /* compressed block */
    z_stream z;
    int z_ready;
    EVP_MD_CTX *sha;
    uint64_t records, bytes;
};

static segd_err_t emit(segd_ocf_writer_t *w, const void *p, size_t n, char *errstr,
                       size_t errstr_size)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return segd_errf(SEGD_ERR_IO, errstr, errstr_size, "%s: %s", w->path, strerror(errno));
    EVP_DigestUpdate(w->sha, p, n);
    w->bytes += n;
    return SEGD_OK;
}

static segd_err_t emit_long(segd_ocf_writer_t *w, int64_t v, char *errstr, size_t n)
{
    uint8_t b[10];
    return emit(w, b, segd_zz_put(b, v), errstr, n);
}

static segd_err_t emit_string(segd_ocf_writer_t *w, const char *s, char *errstr, size_t n)
{
    size_t len = strlen(s);
    segd_err_t err = emit_long(w, (int64_t)len, errstr, n);
    return err ? err : emit(w, s, len, errstr, n);
}

static segd_err_t write_header(segd_ocf_writer_t *w, const char *schema_json, char *errstr,
                               size_t n)
{
    segd_err_t err = emit(w, MAGIC, 4, errstr, n);
    if (!err)
        err = emit_long(w, 2, errstr, n);
    if (!err)
        err = emit_string(w, "avro.schema", errstr, n);
    if (!err)
        err = emit_string(w, schema_json, errstr, n);
    if (!err)
        err = emit_string(w, "avro.codec", errstr, n);
    if (!err)
        err = emit_string(w, segd_ocf_codec_name(w->codec), errstr, n);
    if (!err)
        err = emit_long(w, 0, errstr, n);
    if (!err)
        err = emit(w, w->sync, sizeof(w->sync), errstr, n);
    return err;
}

static void writer_free(segd_ocf_writer_t *w)
{
    if (w->f)
        fclose(w->f);
    if (w->z_ready)
        deflateEnd(&w->z);
    ZSTD_freeCCtx(w->zc);
    EVP_MD_CTX_free(w->sha);
    segd_buf_free(&w->block);
    segd_buf_free(&w->zbuf);
    free(w->path);
    free(w);
}

const char *segd_ocf_codec_name(segd_ocf_codec_t codec)
{
    return codec == SEGD_OCF_DEFLATE ? "deflate" : codec == SEGD_OCF_ZSTANDARD ? "zstandard"
                                                                              : "null";
}

static segd_err_t init_codec(segd_ocf_writer_t *w)
{
    if (w->codec == SEGD_OCF_DEFLATE) {
        if (deflateInit2(&w->z, w->level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return SEGD_ERR_NOMEM;
        w->z_ready = 1;
    } else if (w->codec == SEGD_OCF_ZSTANDARD) {
        w->zc = ZSTD_createCCtx();
        if (!w->zc || ZSTD_isError(ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel,
                                                           w->level)))
            return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

segd_err_t segd_ocf_writer_open(segd_ocf_writer_t **out, const char *path,
                                const char *schema_json, int level, char *errstr, size_t n)
{
    return segd_ocf_writer_open_codec(out, path, schema_json,
                                      level > 0 ? SEGD_OCF_DEFLATE : SEGD_OCF_NULL, level,
                                      errstr, n);
}

segd_err_t segd_ocf_writer_open_codec(segd_ocf_writer_t **out, const char *path,
                                      const char *schema_json, segd_ocf_codec_t codec,
                                      int level, char *errstr, size_t n)
{
    segd_ocf_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return SEGD_ERR_NOMEM;
    segd_err_t err = SEGD_OK;
    w->codec = codec;
    w->level = codec == SEGD_OCF_DEFLATE ? (level < 1 ? 1 : level > 9 ? 9 : level)
               : codec == SEGD_OCF_ZSTANDARD ? (level < 1 ? 1 : level > 19 ? 19 : level)
                                             : 0;
    w->path = strdup(path);
    w->sha = EVP_MD_CTX_new();
    if (!w->path || !w->sha || !EVP_DigestInit_ex(w->sha, EVP_sha256(), NULL) ||
        init_codec(w)) {
        err = SEGD_ERR_NOMEM;
        goto fail;
    }
    if (getrandom(w->sync, sizeof(w->sync), 0) != (ssize_t)sizeof(w->sync)) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "getrandom: %s", strerror(errno));
        goto fail;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", path, strerror(errno));
        goto fail;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    err = write_header(w, schema_json, errstr, n);
    if (err)
        goto fail;
    *out = w;
    return SEGD_OK;
fail:
    if (w->f)
        unlink(path);
    writer_free(w);
    return err;
}

segd_buf_t *segd_ocf_writer_buf(segd_ocf_writer_t *w)
{
    w->block_mark = w->block.len;
    return &w->block;
}

static segd_err_t deflate_block(segd_ocf_writer_t *w)
{
    uLong bound = deflateBound(&w->z, (uLong)w->block.len);
    w->zbuf.len = 0;
    if (segd_buf_reserve(&w->zbuf, bound))
        return SEGD_ERR_NOMEM;
    deflateReset(&w->z);
    w->z.next_in = w->block.data;
    w->z.avail_in = (uInt)w->block.len;
    w->z.next_out = w->zbuf.data;
    w->z.avail_out = (uInt)bound;
    if (deflate(&w->z, Z_FINISH) != Z_STREAM_END)
        return SEGD_ERR_IO;
    w->zbuf.len = bound - w->z.avail_out;
    return SEGD_OK;
}

static segd_err_t zstd_block(segd_ocf_writer_t *w)
{
    size_t bound = ZSTD_compressBound(w->block.len);
    w->zbuf.len = 0;
    if (segd_buf_reserve(&w->zbuf, bound))
        return SEGD_ERR_NOMEM;
    size_t r = ZSTD_compress2(w->zc, w->zbuf.data, bound, w->block.data, w->block.len);
    if (ZSTD_isError(r))
        return SEGD_ERR_IO;
    w->zbuf.len = r;
    return SEGD_OK;
}

static segd_err_t compress_block(segd_ocf_writer_t *w)
{
    return w->codec == SEGD_OCF_DEFLATE ? deflate_block(w) : zstd_block(w);
}

static segd_err_t flush_block(segd_ocf_writer_t *w, char *errstr, size_t n)
{
    if (!w->block_count)
        return SEGD_OK;
    const segd_buf_t *data = &w->block;
    if (w->codec != SEGD_OCF_NULL) {
        segd_err_t err = compress_block(w);
        if (err)
            return segd_errf(err, errstr, n, "%s: deflate failed", w->path);
        data = &w->zbuf;
    }
    segd_err_t err = emit_long(w, w->block_count, errstr, n);
    if (!err)
        err = emit_long(w, (int64_t)data->len, errstr, n);
    if (!err)
        err = emit(w, data->data, data->len, errstr, n);
    if (!err)
        err = emit(w, w->sync, sizeof(w->sync), errstr, n);
    w->block.len = 0;
    w->block_count = 0;
    return err;
}

segd_err_t segd_ocf_writer_commit(segd_ocf_writer_t *w, char *errstr, size_t n)
{
    w->block_count++;
    w->records++;
    return w->block.len >= BLOCK_TARGET ? flush_block(w, errstr, n) : SEGD_OK;
}

segd_err_t segd_ocf_writer_close(segd_ocf_writer_t *w, segd_ocf_info_t *info, char *errstr,
                                 size_t n)
{
    segd_err_t err = flush_block(w, errstr, n);
    if (!err && (fflush(w->f) || fsync(fileno(w->f))))
        err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", w->path, strerror(errno));
    if (!err && info) {
        uint8_t md[32];
        unsigned mdlen = 0;
        EVP_DigestFinal_ex(w->sha, md, &mdlen);
        segd_hex(md, 32, info->sha256);
        info->records = w->records;
        info->bytes = w->bytes;
    }
    if (fclose(w->f) && !err)
        err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", w->path, strerror(errno));
    w->f = NULL;
    writer_free(w);
    return err;
}

void segd_ocf_writer_abort(segd_ocf_writer_t *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        w->f = NULL;
        unlink(w->path);
    }
    writer_free(w);
}

/* ---------- reading ---------- */

typedef struct cursor {
    const uint8_t *p, *end;
} cursor_t;

static int read_long(cursor_t *c, int64_t *v) { return segd_zz_get(&c->p, c->end, v); }

static int read_bytes(cursor_t *c, const uint8_t **s, size_t *len)
{
    int64_t n;
    if (read_long(c, &n) || n < 0 || n > c->end - c->p)
        return -1;
    *s = c->p;
    *len = (size_t)n;
    c->p += n;
    return 0;
}

/* Parses the metadata map and returns the codec, or -1. With any_codec, a
 * codec we cannot decompress is accepted as SEGD_OCF_NULL, because block
 * walks only need the framing, not the records. */
static int read_meta(cursor_t *c, char **schema_json, int any_codec)
{
    int codec = 0;
    for (;;) {
        int64_t count;
        if (read_long(c, &count))
            return -1;
        if (count == 0)
            return codec;
        if (count < 0) {
            int64_t skip;
            if (count == INT64_MIN || read_long(c, &skip))
                return -1;
            count = -count;
        }
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *k, *v;
            size_t kl, vl;
            if (read_bytes(c, &k, &kl) || read_bytes(c, &v, &vl))
                return -1;
            if (kl == 10 && !memcmp(k, "avro.codec", 10)) {
                if (vl == 7 && !memcmp(v, "deflate", 7))
                    codec = SEGD_OCF_DEFLATE;
                else if (vl == 9 && !memcmp(v, "zstandard", 9))
                    codec = SEGD_OCF_ZSTANDARD;
                else if (!(vl == 4 && !memcmp(v, "null", 4)) && !any_codec)
                    return -1;
            } else if (kl == 11 && !memcmp(k, "avro.schema", 11) && schema_json) {
                free(*schema_json);
                *schema_json = strndup((const char *)v, vl);
            }
        }
    }
}

static segd_err_t inflate_block(const uint8_t *in, size_t len, segd_buf_t *out)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, -15) != Z_OK)
        return SEGD_ERR_NOMEM;
    out->len = 0;
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    segd_err_t err = SEGD_OK;
    for (;;) {
        if (segd_buf_reserve(out, len * 4 + 4096)) {
            err = SEGD_ERR_NOMEM;
            break;
        }
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)(out->cap - out->len);
        int rc = inflate(&z, Z_NO_FLUSH);
        out->len = out->cap - z.avail_out;
        if (rc == Z_STREAM_END)
            break;
        if ((rc != Z_OK && rc != Z_BUF_ERROR) || out->len > MAX_BLOCK ||
            (rc == Z_BUF_ERROR && z.avail_in == 0)) {
            err = SEGD_ERR_CORRUPT;
            break;
        }
    }
    inflateEnd(&z);
    return err;
}

static segd_err_t unzstd_block(const uint8_t *in, size_t len, segd_buf_t *out)
{
    unsigned long long size = ZSTD_getFrameContentSize(in, len);
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > MAX_BLOCK)
        return SEGD_ERR_CORRUPT;
    out->len = 0;
    if (segd_buf_reserve(out, size ? (size_t)size : 1))
        return SEGD_ERR_NOMEM;
    size_t r = ZSTD_decompress(out->data, (size_t)size, in, len);
    if (ZSTD_isError(r) || r != size)
        return SEGD_ERR_CORRUPT;
    out->len = r;
    return SEGD_OK;
}

segd_err_t segd_ocf_schema(const uint8_t *data, size_t len, char **schema_json, char *errstr,
                           size_t n)
{
    cursor_t c = {data, data + len};
    *schema_json = NULL;
    if (len < 4 || memcmp(data, MAGIC, 4))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "not an Avro container file");
    c.p += 4;
    if (read_meta(&c, schema_json, 1) < 0 || !*schema_json) {
        free(*schema_json);
        *schema_json = NULL;
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad container header");
    }
    return SEGD_OK;
}

segd_err_t segd_ocf_read(const uint8_t *data, size_t len, segd_ocf_block_cb cb, void *ctx,
                         char **schema_json, char *errstr, size_t n)
{
    cursor_t c = {data, data + len};
    if (schema_json)
        *schema_json = NULL;
    if (len < 4 || memcmp(data, MAGIC, 4))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "not an Avro container file");
    c.p += 4;
    int codec = read_meta(&c, schema_json, 0);
    if (codec < 0 || c.end - c.p < 16)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad container header");
    const uint8_t *sync = c.p;
    c.p += 16;
    segd_buf_t plain = {0};
    segd_err_t err = SEGD_OK;
    int64_t block_no = 0;
    while (c.p < c.end && !err) {
        int64_t count;
        const uint8_t *blk;
        size_t blen;
        if (read_long(&c, &count) || count < 0 || read_bytes(&c, &blk, &blen) ||
            c.end - c.p < 16 || memcmp(c.p, sync, 16)) {
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "block %" PRId64 " is damaged",
                            block_no);
            break;
        }
        c.p += 16;
        if (codec != SEGD_OCF_NULL) {
            err = codec == SEGD_OCF_DEFLATE ? inflate_block(blk, blen, &plain)
                                            : unzstd_block(blk, blen, &plain);
            if (err) {
                segd_errf(err, errstr, n, "block %" PRId64 " does not decompress", block_no);
                break;
            }
            blk = plain.data;
            blen = plain.len;
        }
        int rc = cb(ctx, blk, blen, count);
        if (rc)
            err = rc < 0 ? segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                                     "block %" PRId64 " holds bad records", block_no)
                         : SEGD_ERR_INVALID;
        block_no++;
    }
    segd_buf_free(&plain);
    if (err && schema_json) {
        free(*schema_json);
        *schema_json = NULL;
    }
    return err;
}

segd_err_t segd_ocf_check_blocks(const uint8_t *data, size_t len, char *errstr, size_t n)
{
    cursor_t c = {data, data + len};
    if (len < 4 || memcmp(data, MAGIC, 4))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "not an Avro container file");
    c.p += 4;
    if (read_meta(&c, NULL, 1) < 0 || c.end - c.p < 16)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad container header");
    const uint8_t *sync = c.p;
    c.p += 16;
    for (int64_t block_no = 0; c.p < c.end; block_no++) {
        const uint8_t *start = c.p, *blk;
        int64_t count;
        size_t blen;
        if (read_long(&c, &count) || count < 0 || count > INT32_MAX ||
            read_bytes(&c, &blk, &blen) || c.end - c.p < 16 || memcmp(c.p, sync, 16))
            return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                             "block %" PRId64 " at byte %td is damaged", block_no,
                             start - data);
        c.p += 16;
    }
    return SEGD_OK;
}
