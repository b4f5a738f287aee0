/* Dead-letter sinks; see dlq.h. The topic sink is the one segd run always
 * had (moved out of pipeline.c unchanged); the file sink serves replay. */
#define _GNU_SOURCE
#include "consumer/dlq.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "transport/kconf.h"

/* librdkafka's default message.max.bytes is 1000000: a dead letter larger
 * than this would be refused forever and stall its partition. Longer ones
 * keep their head; segd.source points at the original, still in the topic.
 * The file sink keeps whole values: a file has no such limit. */
#define DLQ_MAX_VALUE 900000

/* A letter waiting to be delivered before its offset is written. One in
 * flight is never produced again: librdkafka retries it itself until its
 * delivery report, and a second copy would be a duplicate dead letter. */
enum { DL_PENDING, DL_IN_FLIGHT, DL_DELIVERED };
typedef struct dead_letter {
    char *key, *value; /* NULL when the message had none */
    size_t klen, vlen;
    char reason[32];  /* the class (file sink) */
    char why[256];    /* segd.error */
    char topic[256];
    int32_t partition;
    int64_t offset;
    char original_size[24]; /* set when the value was truncated */
    int state;              /* DL_PENDING, DL_IN_FLIGHT, DL_DELIVERED (delivery report) */
} dead_letter_t;

struct segd_dlq {
    const segd_config_t *cfg; /* topic sink */
    volatile sig_atomic_t *stop;
    segd_backoff_t *backoff;
    rd_kafka_t *producer;
    int is_file;              /* the file sink (--dlq-file) */
    int fd;                   /* file sink; -1 once closed or for the topic */
    char path[4096];
    dead_letter_t *arr;
    size_t n, cap;
};

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk, (void)opaque;
    if (m->_private) /* a failed one is produced again by the next attempt */
        ((dead_letter_t *)m->_private)->state = m->err ? DL_PENDING : DL_DELIVERED;
}

static segd_err_t make_producer(segd_dlq_t *d, char *errstr, size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", d->cfg->brokers, "enable.idempotence",
                                    "true", "linger.ms", "5", "compression.codec", "lz4", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* ours, then the consumer's connection settings (TLS, SASL): its
     * consumer-only ones would make the producer warn */
    segd_err_t err = segd_kconf_apply(conf, "dead-letter producer", defaults, errstr, n);
    if (!err)
        err = segd_config_apply_connection(d->cfg, conf, "dead-letter producer", errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    segd_kconf_set_logger(conf, d->cfg->log);
    d->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errbuf, sizeof(errbuf));
    if (!d->producer) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "producer: %s", errbuf);
    }
    return SEGD_OK;
}

segd_err_t segd_dlq_new_topic(segd_dlq_t **out, const segd_config_t *cfg,
                              volatile sig_atomic_t *stop, segd_backoff_t *backoff,
                              char *errstr, size_t n)
{
    segd_dlq_t *d = calloc(1, sizeof(*d));
    if (!d)
        return SEGD_ERR_NOMEM;
    d->cfg = cfg;
    d->stop = stop;
    d->backoff = backoff;
    d->fd = -1;
    segd_err_t err = make_producer(d, errstr, n);
    if (err) {
        free(d);
        return err;
    }
    *out = d;
    return SEGD_OK;
}

rd_kafka_t *segd_dlq_producer(segd_dlq_t *d) { return d->is_file ? NULL : d->producer; }

segd_err_t segd_dlq_new_file(segd_dlq_t **out, const char *path, char *errstr, size_t n)
{
    if (strlen(path) >= sizeof(((segd_dlq_t *)0)->path))
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "dead-letter file name too long");
    segd_dlq_t *d = calloc(1, sizeof(*d));
    if (!d)
        return SEGD_ERR_NOMEM;
    d->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (d->fd < 0) {
        free(d);
        return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", path, strerror(errno));
    }
    snprintf(d->path, sizeof(d->path), "%s", path);
    d->is_file = 1;
    *out = d;
    return SEGD_OK;
}

static char *copy_bytes(const void *p, size_t len)
{
    char *c = malloc(len ? len : 1); /* non-NULL even when empty: NULL means absent */
    if (c && len)
        memcpy(c, p, len);
    return c;
}

segd_err_t segd_dlq_add(segd_dlq_t *d, const char *topic, int32_t partition, int64_t offset,
                        const void *key, size_t klen, const void *value, size_t vlen,
                        const char *reason, const char *why)
{
    dead_letter_t *arr = segd_array_grow(d->arr, &d->cap, d->n + 1, sizeof(*arr));
    if (!arr)
        return SEGD_ERR_NOMEM;
    d->arr = arr;
    dead_letter_t *l = &d->arr[d->n];
    memset(l, 0, sizeof(*l));
    size_t keep = !d->is_file && vlen > DLQ_MAX_VALUE ? DLQ_MAX_VALUE : vlen;
    if (keep < vlen)
        snprintf(l->original_size, sizeof(l->original_size), "%zu", vlen);
    l->key = key ? copy_bytes(key, klen) : NULL;
    l->value = value ? copy_bytes(value, keep) : NULL;
    if ((key && !l->key) || (value && !l->value)) {
        free(l->key);
        free(l->value);
        return SEGD_ERR_NOMEM;
    }
    l->klen = key ? klen : 0;
    l->vlen = value ? keep : 0;
    snprintf(l->reason, sizeof(l->reason), "%s", reason);
    snprintf(l->why, sizeof(l->why), "%s", why);
    snprintf(l->topic, sizeof(l->topic), "%s", topic);
    l->partition = partition;
    l->offset = offset;
    d->n++;
    return SEGD_OK;
}

size_t segd_dlq_count(const segd_dlq_t *d)
{
    return d->n;
}

/* ---------- topic sink ---------- */

static void produce_letter(segd_dlq_t *d, dead_letter_t *l)
{
    char source[300];
    snprintf(source, sizeof(source), "%s/%" PRId32 "/%" PRId64, l->topic, l->partition,
             l->offset);
    rd_kafka_headers_t *h = rd_kafka_headers_new(3);
    rd_kafka_header_add(h, "segd.error", -1, l->why, -1);
    rd_kafka_header_add(h, "segd.source", -1, source, -1);
    if (l->original_size[0])
        rd_kafka_header_add(h, "segd.original_size", -1, l->original_size, -1);
    if (rd_kafka_producev(d->producer, RD_KAFKA_V_TOPIC(d->cfg->dlq_topic),
                          RD_KAFKA_V_KEY(l->key, l->klen), RD_KAFKA_V_VALUE(l->value, l->vlen),
                          RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END))
        rd_kafka_headers_destroy(h); /* not enqueued: retried by the caller */
    else
        l->state = DL_IN_FLIGHT;
}

/* Produces every undelivered dead letter and waits for the broker's acks. */
static segd_err_t deliver_topic(segd_dlq_t *d, char *errstr, size_t n)
{
    int64_t wait = 100;
    for (;;) {
        size_t undelivered = 0;
        for (size_t i = 0; i < d->n; i++) {
            dead_letter_t *l = &d->arr[i];
            if (l->state == DL_DELIVERED)
                continue;
            undelivered++;
            if (l->state == DL_PENDING)
                produce_letter(d, l);
        }
        if (!undelivered)
            return SEGD_OK;
        rd_kafka_flush(d->producer, 10000);
        int all = 1;
        for (size_t i = 0; i < d->n; i++)
            all &= d->arr[i].state == DL_DELIVERED;
        if (all)
            return SEGD_OK;
        if (*d->stop)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "dead-letter topic %s unreachable",
                             d->cfg->dlq_topic);
        wait = segd_backoff_wait(d->backoff, wait, d->cfg->retry_max_ms,
                                 "dead-letter produce failed");
    }
}

/* ---------- file sink ---------- */

static json_t *b64(const char *p, size_t len)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!p)
        return json_null();
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)p;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < len ? s[i + 2] : 0);
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = i + 1 < len ? tab[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? tab[v & 63] : '=';
    }
    json_t *j = json_stringn(out, o);
    free(out);
    return j;
}

/* JSON strings must be UTF-8: a decoder's message may quote raw input bytes,
 * which are replaced by '?' (the exact bytes are in value_b64). */
static json_t *text(const char *s)
{
    size_t len = strlen(s);
    if (segd_utf8_valid(s, len))
        return json_stringn(s, len);
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c >= 0x80)
            *c = '?';
    return json_string(buf);
}

static segd_err_t append_line(segd_buf_t *out, const dead_letter_t *l)
{
    json_t *o = json_object();
    if (!o)
        return SEGD_ERR_NOMEM;
    int bad = json_object_set_new(o, "topic", text(l->topic)) ||
              json_object_set_new(o, "partition", json_integer(l->partition)) ||
              json_object_set_new(o, "offset", json_integer(l->offset)) ||
              json_object_set_new(o, "reason", json_string(l->reason)) ||
              json_object_set_new(o, "error", text(l->why)) ||
              json_object_set_new(o, "key_b64", b64(l->key, l->klen)) ||
              json_object_set_new(o, "value_b64", b64(l->value, l->vlen));
    char *s = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s)
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_buf_append(out, s, strlen(s));
    if (!err)
        err = segd_buf_append(out, "\n", 1);
    free(s);
    return err;
}

static segd_err_t write_all(int fd, const uint8_t *p, size_t len)
{
    errno = 0;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return SEGD_ERR_IO;
        p += w;
        len -= (size_t)w;
    }
    return SEGD_OK;
}

/* All pending lines in one write, then fsync: a batch counts as done only
 * once its letters are on disk. A failure cuts the file back, so a retry
 * never leaves a half line or a duplicate. */
static segd_err_t deliver_file(segd_dlq_t *d, char *errstr, size_t n)
{
    segd_buf_t out = {0};
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < d->n; i++)
        if (d->arr[i].state != DL_DELIVERED)
            err = append_line(&out, &d->arr[i]);
    if (err || !out.len) {
        segd_buf_free(&out);
        return err ? segd_errf(err, errstr, n, "dead-letter file: out of memory") : SEGD_OK;
    }
    struct stat st;
    if (fstat(d->fd, &st)) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "dead-letter file %s: %s", d->path,
                        strerror(errno));
    } else if (write_all(d->fd, out.data, out.len) || fsync(d->fd)) {
        int saved = errno ? errno : EIO;
        if (ftruncate(d->fd, st.st_size) == 0)
            (void)fsync(d->fd);
        err = segd_errf(SEGD_ERR_IO, errstr, n, "dead-letter file %s: %s", d->path,
                        strerror(saved));
    } else {
        for (size_t i = 0; i < d->n; i++)
            d->arr[i].state = DL_DELIVERED;
    }
    segd_buf_free(&out);
    return err;
}

segd_err_t segd_dlq_deliver(segd_dlq_t *d, char *errstr, size_t n)
{
    if (d->is_file ? d->fd < 0 : !d->producer)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "dead-letter queue closed");
    return d->is_file ? deliver_file(d, errstr, n) : deliver_topic(d, errstr, n);
}

void segd_dlq_clear(segd_dlq_t *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->arr[i].key);
        free(d->arr[i].value);
    }
    d->n = 0;
}

void segd_dlq_close(segd_dlq_t *d)
{
    if (d->producer) {
        rd_kafka_flush(d->producer, 5000);
        rd_kafka_destroy(d->producer);
        d->producer = NULL;
    }
    if (d->fd >= 0) {
        close(d->fd);
        d->fd = -1;
    }
}

void segd_dlq_destroy(segd_dlq_t *d)
{
    if (!d)
        return;
    segd_dlq_close(d);
    segd_dlq_clear(d);
    free(d->arr);
    free(d);
}
