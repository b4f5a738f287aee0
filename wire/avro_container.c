/* Avro container files (OCF): reading every record of a file through a
 * resolver built from the file's own writer schema, and writing events to a
 * new file in the local schema. The file's blocks are checked before libavro
 * reads them, because libavro trusts a block's declared size. */
#define _GNU_SOURCE
#include <avro.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire/avro_codec_int.h"
#include "wire/avro_file.h"

/* libavro trusts a block's size and allocates it: a damaged file could ask
 * for terabytes. Its blocks are walked first (mapped, not read). */
static segd_err_t check_container(const char *path, char *errstr, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        segd_err_t err = segd_errf(SEGD_ERR_DECODE, errstr, n, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return err;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "%s: %s", path, strerror(errno));
    char why[256];
    segd_err_t err = segd_ocf_check_blocks(map, len, why, sizeof(why));
    if (err)
        segd_errf(SEGD_ERR_DECODE, errstr, n, "not a readable Avro container file: %s", why);
    if (len)
        munmap(map, len);
    return err ? SEGD_ERR_DECODE : SEGD_OK;
}

segd_err_t segd_avro_file_foreach(const char *path,
                                  int (*cb)(void *ctx, const segd_event_t *ev, long record_no,
                                            const char *decode_error),
                                  void *ctx, char *errstr, size_t n)
{
    segd_err_t checked = check_container(path, errstr, n);
    if (checked)
        return checked;
    avro_file_reader_t fr;
    if (avro_file_reader(path, &fr))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "not an Avro container file: %s",
                         avro_strerror());
    segd_avro_codec_t *c = NULL;
    segd_event_t ev;
    segd_event_init(&ev);
    resolver_t r = {0};
    char *wjson = NULL;
    size_t wlen = 0;
    FILE *m = open_memstream(&wjson, &wlen);
    avro_writer_t jw = NULL;
    segd_err_t err = m ? segd_avro_codec_new(&c, NULL, NULL, errstr, n) : SEGD_ERR_NOMEM;
    if (!err) { /* the writer schema as JSON, to build a resolver */
        char buf[65536];
        jw = avro_writer_memory(buf, sizeof(buf));
        if (avro_schema_to_json(avro_file_reader_get_writer_schema(fr), jw)) {
            err = segd_errf(SEGD_ERR_DECODE, errstr, n, "unreadable writer schema");
        } else {
            fwrite(buf, 1, (size_t)avro_writer_tell(jw), m);
            fclose(m);
            m = NULL;
            err = segd_avro_resolver_init(&r, c->reader_json, wjson, errstr, n);
        }
    }
    long rec = 0;
    while (!err) {
        avro_value_reset(&r.value);
        int rc = avro_file_reader_read_value(fr, r.resolver_iface ? &r.wvalue : &r.value);
        if (rc == EOF)
            break;
        rec++;
        if (rc) {
            err = segd_errf(SEGD_ERR_DECODE, errstr, n, "record %ld: %s", rec, avro_strerror());
            break;
        }
        char why[256];
        if (cb(ctx, &ev, rec,
               segd_avro_extract(c, &r, &r.value, &ev, why, sizeof(why)) ? why : NULL))
            break;
    }
    if (m)
        fclose(m);
    if (jw)
        avro_writer_free(jw);
    free(wjson);
    segd_avro_resolver_free(&r);
    segd_avro_codec_destroy(c);
    segd_event_free(&ev);
    avro_file_reader_close(fr);
    return err;
}

struct segd_avro_file_writer {
    avro_file_writer_t fw;
    segd_avro_codec_t *codec;
};

segd_err_t segd_avro_file_writer_open(segd_avro_file_writer_t **out, const char *path,
                                      char *errstr, size_t n)
{
    segd_avro_file_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_avro_codec_new(&w->codec, NULL, NULL, errstr, n);
    if (!err && avro_file_writer_create_with_codec(path, w->codec->local.reduced, &w->fw,
                                                   "deflate", 0))
        err = segd_errf(SEGD_ERR_IO, errstr, n, "create %s: %s", path, avro_strerror());
    if (err) {
        segd_avro_codec_destroy(w->codec);
        free(w);
        return err;
    }
    *out = w;
    return SEGD_OK;
}

segd_err_t segd_avro_file_writer_append(segd_avro_file_writer_t *w, const segd_event_t *ev)
{
    int rc = segd_avro_fill_value(&w->codec->local.value, ev) ||
             avro_file_writer_append_value(w->fw, &w->codec->local.value);
    avro_value_reset(&w->codec->local.value); /* as in decode: keep no strings */
    return rc ? SEGD_ERR_IO : SEGD_OK;
}

segd_err_t segd_avro_file_writer_close(segd_avro_file_writer_t *w)
{
    int rc = avro_file_writer_close(w->fw);
    segd_avro_codec_destroy(w->codec);
    free(w);
    return rc ? SEGD_ERR_IO : SEGD_OK;
}
