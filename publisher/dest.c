/* Snapshot destinations; see dest.h. One curl easy handle per destination,
 * reused across requests (keep-alive). The S3 payload hash is computed here
 * and passed as x-amz-content-sha256: libcurl signs whatever value that
 * header carries, and cannot hash a body it streams from a read callback. */
#define _GNU_SOURCE
#include "dest.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "avro_file.h"

typedef enum { DEST_DIR, DEST_HTTP, DEST_S3 } dest_kind_t;

struct segd_dest {
    dest_kind_t kind;
    segd_dest_opts_t o;
    char *base;        /* directory path, or URL prefix ending without '/' */
    CURL *curl;
    char *userpwd;     /* S3 "key:secret" */
    char *sigv4;       /* "aws:amz:REGION:s3" */
    char *token;       /* x-amz-security-token header line, or NULL */
    uint64_t retries;
};

void segd_dest_opts_default(segd_dest_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 60000;
    o->max_retries = 5;
    o->backoff_ms = 200;
}

uint64_t segd_dest_retries(const segd_dest_t *d) { return d->retries; }

static char *join_path(const segd_dest_t *d, const char *name)
{
    char *s = NULL;
    return asprintf(&s, "%s/%s", d->base, name) < 0 ? NULL : s;
}

/* ---------- directory ---------- */

static segd_err_t mkdir_p(const char *path, char *errstr, size_t n)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return segd_errf(SEGD_ERR_IO, errstr, n, "mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return segd_errf(SEGD_ERR_IO, errstr, n, "mkdir %s: %s", buf, strerror(errno));
    return SEGD_OK;
}

static segd_err_t write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
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

/* Writes via a temporary name + fsync + rename: readers see all or nothing. */
static segd_err_t dir_put(segd_dest_t *d, const char *name, const void *data, size_t len,
                          const char *src_path, char *errstr, size_t n)
{
    char *final = join_path(d, name), *tmp = NULL;
    segd_err_t err = SEGD_OK;
    int fd = -1, in = -1;
    if (!final || asprintf(&tmp, "%s.tmp.%d", final, (int)getpid()) < 0) {
        tmp = NULL;
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    if (src_path) {
        in = open(src_path, O_RDONLY);
        char buf[1 << 16];
        ssize_t r = 0;
        while (in >= 0 && !err && (r = read(in, buf, sizeof(buf))) > 0)
            err = write_all(fd, buf, (size_t)r);
        if (in < 0 || r < 0)
            err = SEGD_ERR_IO;
    } else {
        err = write_all(fd, data, len);
    }
    if (!err && fsync(fd))
        err = SEGD_ERR_IO;
    if (close(fd) && !err)
        err = SEGD_ERR_IO;
    fd = -1;
    if (!err && rename(tmp, final))
        err = SEGD_ERR_IO;
    if (err)
        segd_errf(err, errstr, n, "write %s: %s", final, strerror(errno));
out:
    if (in >= 0)
        close(in);
    if (fd >= 0)
        close(fd);
    if (err && tmp)
        unlink(tmp);
    free(tmp);
    free(final);
    return err;
}

static segd_err_t dir_get(segd_dest_t *d, const char *name, segd_buf_t *out, FILE *to,
                          char *errstr, size_t n)
{
    char *path = join_path(d, name);
    if (!path)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    FILE *f = fopen(path, "rb");
    segd_err_t err = SEGD_OK;
    if (!f) {
        err = errno == ENOENT ? SEGD_ERR_NOTFOUND : SEGD_ERR_IO;
        segd_errf(err, errstr, n, "%s: %s", path, strerror(errno));
        free(path);
        return err;
    }
    if (out)
        out->len = 0;
    char buf[1 << 16];
    size_t r;
    while (!err && (r = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (to) {
            if (fwrite(buf, 1, r, to) != r)
                err = SEGD_ERR_IO;
        } else if (segd_buf_reserve(out, r)) {
            err = SEGD_ERR_NOMEM;
        } else {
            memcpy(out->data + out->len, buf, r);
            out->len += r;
        }
    }
    if (!err && ferror(f))
        err = SEGD_ERR_IO;
    if (err)
        segd_errf(err, errstr, n, "read %s: %s", path, segd_err_str(err));
    fclose(f);
    free(path);
    return err;
}

/* ---------- HTTP and S3 ---------- */

typedef struct body {
    const uint8_t *data; /* in memory, or */
    FILE *file;          /* streamed from a file */
    size_t len, pos;
} body_t;

static size_t read_cb(char *buf, size_t size, size_t nitems, void *arg)
{
    body_t *b = arg;
    size_t want = size * nitems;
    if (b->file)
        return fread(buf, 1, want, b->file);
    size_t left = b->len - b->pos;
    size_t k = want < left ? want : left;
    memcpy(buf, b->data + b->pos, k);
    b->pos += k;
    return k;
}

typedef struct sink {
    segd_buf_t *buf; /* or */
    FILE *file;
    int failed;
} sink_t;

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    sink_t *s = arg;
    size_t len = size * nmemb;
    if (s->file)
        return fwrite(data, 1, len, s->file);
    if (!s->buf)
        return len; /* error bodies are dropped */
    if (segd_buf_reserve(s->buf, len)) {
        s->failed = 1;
        return 0;
    }
    memcpy(s->buf->data + s->buf->len, data, len);
    s->buf->len += len;
    return len;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct request {
    const char *method; /* PUT, GET, DELETE */
    const char *name;
    body_t *body;       /* PUT */
    const char *sha256; /* payload hash hex (S3) */
    sink_t *sink;       /* GET */
} request_t;

/* One attempt; returns the HTTP status, or -1 for a transport error. */
static long perform(segd_dest_t *d, const request_t *rq, const char *url, char *cerr)
{
    CURL *c = d->curl;
    struct curl_slist *h = NULL;
    char hdr[128];
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, d->o.timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    if (d->o.ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, d->o.ca_file);
    if (d->o.insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (d->kind == DEST_S3) {
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, d->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, d->userpwd);
        snprintf(hdr, sizeof(hdr), "x-amz-content-sha256: %s",
                 rq->sha256 ? rq->sha256
                            : "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        h = curl_slist_append(h, hdr);
        if (d->token)
            h = curl_slist_append(h, d->token);
    }
    if (!strcmp(rq->method, "PUT")) {
        rq->body->pos = 0;
        if (rq->body->file)
            rewind(rq->body->file);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(c, CURLOPT_READDATA, rq->body);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->body->len);
        /* no 1 s wait for 100-continue; for S3 the header stays, because
         * libcurl signs an emptied "Expect:" it then does not send */
        if (d->kind == DEST_S3)
            curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
        else
            h = curl_slist_append(h, "Expect:");
    } else if (!strcmp(rq->method, "DELETE")) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    sink_t drop = {0};
    sink_t *sink = rq->sink ? rq->sink : &drop;
    if (sink->buf)
        sink->buf->len = 0;
    if (sink->file) {
        rewind(sink->file);
        if (ftruncate(fileno(sink->file), 0)) {
            curl_slist_free_all(h);
            return -1;
        }
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (!cerr[0])
        snprintf(cerr, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
    curl_slist_free_all(h);
    return status;
}

/* Transport errors and 5xx are retried with backoff; 4xx fail at once. */
static segd_err_t request(segd_dest_t *d, const request_t *rq, char *errstr, size_t n)
{
    char *url = join_path(d, rq->name);
    if (!url)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    long wait = d->o.backoff_ms, status = -1;
    char cerr[CURL_ERROR_SIZE];
    for (int attempt = 0;; attempt++) {
        cerr[0] = 0;
        status = perform(d, rq, url, cerr);
        if ((status >= 200 && status < 500) || attempt >= d->o.max_retries)
            break;
        d->retries++;
        sleep_ms(wait);
        wait *= 2;
    }
    segd_err_t err = SEGD_OK;
    if (status >= 200 && status < 300)
        err = rq->sink && rq->sink->failed ? SEGD_ERR_NOMEM : SEGD_OK;
    else if (status == 404)
        err = !strcmp(rq->method, "DELETE") ? SEGD_OK : SEGD_ERR_NOTFOUND;
    else
        err = SEGD_ERR_HTTP;
    if (err && err != SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s %s: %s", rq->method, url,
                  status < 0 ? cerr : status >= 500 ? "server error after retries"
                                                    : "refused");
    if (err == SEGD_ERR_HTTP && status > 0 && errstr)
        snprintf(errstr + strlen(errstr), n - strlen(errstr), " (HTTP %ld)", status);
    if (err == SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s: not found", url);
    free(url);
    return err;
}

static segd_err_t file_sha256(const char *path, char hex[65], size_t *len)
{
    segd_buf_t b = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return SEGD_ERR_IO;
    char buf[1 << 16];
    size_t r;
    segd_err_t err = SEGD_OK;
    while (!err && (r = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (segd_buf_reserve(&b, r))
            err = SEGD_ERR_NOMEM;
        else {
            memcpy(b.data + b.len, buf, r);
            b.len += r;
        }
    }
    if (!err && ferror(f))
        err = SEGD_ERR_IO;
    fclose(f);
    if (!err) {
        segd_sha256_hex(b.data, b.len, hex);
        *len = b.len;
    }
    segd_buf_free(&b);
    return err;
}

/* ---------- public ---------- */

static segd_err_t open_s3(segd_dest_t *d, const char *url, char *errstr, size_t n)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *region = getenv("AWS_REGION"), *token = getenv("AWS_SESSION_TOKEN");
    const char *endpoint = getenv("SEGD_S3_ENDPOINT");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region)
        region = "us-east-1";
    if (!key || !*key || !secret || !*secret)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
    const char *path = url + 5;
    size_t blen = strcspn(path, "/");
    if (blen == 0)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "s3: no bucket in %s", url);
    const char *prefix = path[blen] ? path + blen + 1 : "";
    size_t plen = strlen(prefix);
    while (plen && prefix[plen - 1] == '/')
        plen--;
    int ok;
    if (endpoint && *endpoint) /* S3-compatible servers: path-style */
        ok = asprintf(&d->base, "%s/%.*s%s%.*s", endpoint, (int)blen, path, plen ? "/" : "",
                      (int)plen, prefix);
    else
        ok = asprintf(&d->base, "https://%.*s.s3.%s.amazonaws.com%s%.*s", (int)blen, path,
                      region, plen ? "/" : "", (int)plen, prefix);
    if (ok < 0) {
        d->base = NULL;
        return SEGD_ERR_NOMEM;
    }
    if (asprintf(&d->userpwd, "%s:%s", key, secret) < 0 ||
        asprintf(&d->sigv4, "aws:amz:%s:s3", region) < 0 ||
        (token && *token && asprintf(&d->token, "x-amz-security-token: %s", token) < 0))
        return SEGD_ERR_NOMEM;
    return SEGD_OK;
}

segd_err_t segd_dest_open(segd_dest_t **out, const char *url, const segd_dest_opts_t *opts,
                          char *errstr, size_t n)
{
    *out = NULL;
    if (!url || !*url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "empty destination");
    segd_dest_t *d = calloc(1, sizeof(*d));
    if (!d)
        return SEGD_ERR_NOMEM;
    if (opts)
        d->o = *opts;
    else
        segd_dest_opts_default(&d->o);
    segd_err_t err = SEGD_OK;
    if (!strncmp(url, "s3://", 5)) {
        d->kind = DEST_S3;
        err = open_s3(d, url, errstr, n);
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        d->kind = DEST_HTTP;
        d->base = strdup(url);
        size_t l = d->base ? strlen(d->base) : 0;
        while (l > 8 && d->base[l - 1] == '/')
            d->base[--l] = 0;
    } else if (strstr(url, "://")) {
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n,
                        "%s: want a directory, http(s):// or s3:// destination", url);
    } else {
        d->kind = DEST_DIR;
        d->base = strdup(url);
        if (d->base)
            err = mkdir_p(d->base, errstr, n);
    }
    if (!err && !d->base)
        err = SEGD_ERR_NOMEM;
    if (!err && d->kind != DEST_DIR && !(d->curl = curl_easy_init()))
        err = segd_errf(SEGD_ERR_HTTP, errstr, n, "curl_easy_init failed");
    if (err) {
        segd_dest_close(d);
        return err;
    }
    *out = d;
    return SEGD_OK;
}

void segd_dest_close(segd_dest_t *d)
{
    if (!d)
        return;
    if (d->curl)
        curl_easy_cleanup(d->curl);
    free(d->base);
    free(d->userpwd);
    free(d->sigv4);
    free(d->token);
    free(d);
}

segd_err_t segd_dest_put_mem(segd_dest_t *d, const char *name, const void *data, size_t len,
                             char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_put(d, name, data, len, NULL, errstr, n);
    char hex[65];
    segd_sha256_hex(data, len, hex);
    body_t b = {.data = data, .len = len};
    request_t rq = {"PUT", name, &b, hex, NULL};
    return request(d, &rq, errstr, n);
}

segd_err_t segd_dest_put_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_put(d, name, NULL, 0, local_path, errstr, n);
    char hex[65];
    size_t len = 0;
    segd_err_t err = d->kind == DEST_S3 ? file_sha256(local_path, hex, &len) : SEGD_OK;
    FILE *f = err ? NULL : fopen(local_path, "rb");
    struct stat st;
    if (err || !f || fstat(fileno(f), &st)) {
        if (f)
            fclose(f);
        return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", local_path, strerror(errno));
    }
    body_t b = {.file = f, .len = (size_t)st.st_size};
    request_t rq = {"PUT", name, &b, d->kind == DEST_S3 ? hex : NULL, NULL};
    err = request(d, &rq, errstr, n);
    fclose(f);
    return err;
}

segd_err_t segd_dest_get_mem(segd_dest_t *d, const char *name, segd_buf_t *out, char *errstr,
                             size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_get(d, name, out, NULL, errstr, n);
    sink_t s = {.buf = out};
    request_t rq = {"GET", name, NULL, NULL, &s};
    return request(d, &rq, errstr, n);
}

segd_err_t segd_dest_get_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t n)
{
    FILE *f = fopen(local_path, "wb");
    if (!f)
        return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", local_path, strerror(errno));
    segd_err_t err;
    if (d->kind == DEST_DIR) {
        err = dir_get(d, name, NULL, f, errstr, n);
    } else {
        sink_t s = {.file = f};
        request_t rq = {"GET", name, NULL, NULL, &s};
        err = request(d, &rq, errstr, n);
    }
    if (fclose(f) && !err)
        err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", local_path, strerror(errno));
    if (err)
        unlink(local_path);
    return err;
}

segd_err_t segd_dest_delete(segd_dest_t *d, const char *name, char *errstr, size_t n)
{
    if (d->kind == DEST_DIR) {
        char *path = join_path(d, name);
        if (!path)
            return SEGD_ERR_NOMEM;
        int rc = unlink(path);
        segd_err_t err = rc && errno != ENOENT
                             ? segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", path, strerror(errno))
                             : SEGD_OK;
        free(path);
        return err;
    }
    request_t rq = {"DELETE", name, NULL, NULL, NULL};
    return request(d, &rq, errstr, n);
}
