/* Snapshot destinations (dest.h): a directory, an HTTP base URL or an S3
 * prefix behind one put / get / delete interface; called by
 * publisher/snapshot.c. Remote kinds share one curl easy handle per
 * destination (connections stay alive between requests) and one retry loop.
 * Object names are checked here because callers pass names read from
 * manifests, i.e. from outside. */
#define _GNU_SOURCE
#include "transport/dest.h"
#include "transport/curl_retry.h"
#include "wire/digest.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_CAP_MS 30000L
#define NAME_MAX_LEN 255
#define ERR_BODY_MAX 200 /* bytes of an error answer quoted in errstr */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef enum { DEST_DIR, DEST_HTTP, DEST_S3 } dest_kind_t;

struct segd_dest {
    dest_kind_t kind;
    segd_dest_opts_t o;
    char *base;   /* directory path, or URL prefix without a trailing '/' */
    CURL *curl;   /* remote kinds */
    char *key;    /* S3 access key id */
    char *secret; /* S3 secret access key */
    char *sigv4;  /* CURLOPT_AWS_SIGV4: "aws:amz:REGION:s3" */
    char *token;  /* "x-amz-security-token: ..." header line, or NULL */
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

/* asprintf returning the string or NULL (asprintf leaves its pointer
 * undefined on failure). Freed by the caller. */
static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* errno is read first: anything called later may change it. */
static segd_err_t io_errf(char *errstr, size_t n, const char *what, const char *path)
{
    int e = errno ? errno : EIO;
    return segd_errf(SEGD_ERR_IO, errstr, n, "%s %s: %s", what, path, strerror(e));
}

/* ---------- names and URLs ---------- */

/* One path component of printable bytes: a name can neither leave the base
 * (a manifest could say "../x") nor break a URL or a header line. */
static segd_err_t check_name(const char *name, char *errstr, size_t n)
{
    size_t len = name ? strlen(name) : 0;
    int ok = len > 0 && len <= NAME_MAX_LEN && strcmp(name, ".") && strcmp(name, "..");
    for (size_t i = 0; ok && i < len; i++)
        ok = name[i] != '/' && (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
    if (!ok)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "bad object name \"%.64s\"",
                         name ? name : "(null)");
    return SEGD_OK;
}

static int unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/* Percent-encodes all but RFC 3986 unreserved bytes (and '/' when
 * keep_slash): the form SigV4 signs as S3's canonical URI. libcurl 7.88
 * signs the path exactly as sent and 8.9+ canonicalises it while leaving
 * %XX alone, so an encoded path signs right on both. Freed by the caller. */
static char *escape(const char *s, size_t len, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(3 * len + 1), *p = out;
    for (size_t i = 0; out && i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            *p++ = (char)c;
        } else {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        }
    }
    if (out)
        *p = 0;
    return out;
}

/* An object is a name at the base or, for reads, a name in a folder dir
 * under it: both are checked as one path component each. */
static segd_err_t check_object(const char *dir, const char *name, char *errstr, size_t n)
{
    segd_err_t err = dir ? check_name(dir, errstr, n) : SEGD_OK;
    return err ? err : check_name(name, errstr, n);
}

/* One path component as a path or URL carries it. Freed by the caller. */
static char *component(const segd_dest_t *d, const char *s)
{
    return d->kind == DEST_DIR ? strdup(s) : escape(s, strlen(s), 0);
}

/* The object's path or URL: base/name, or base/dir/name (both already
 * checked). Freed by the caller. */
static char *object_path(const segd_dest_t *d, const char *dir, const char *name)
{
    char *ed = dir ? component(d, dir) : NULL, *en = component(d, name), *s = NULL;
    if (en && !dir)
        s = str_printf("%s/%s", d->base, en);
    else if (en && ed)
        s = str_printf("%s/%s/%s", d->base, ed, en);
    free(ed);
    free(en);
    return s;
}

/* An http(s) URL with a host and no query or fragment (names are appended). */
static segd_err_t check_base_url(const char *url, char *errstr, size_t n)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *query = NULL, *frag = NULL;
    if (!u)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
    segd_err_t err = SEGD_OK;
    if (rc)
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: %s", url, curl_url_strerror(rc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
             (strcmp(scheme, "http") && strcmp(scheme, "https")))
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: not an http(s) URL", url);
    else if (!curl_url_get(u, CURLUPART_QUERY, &query, 0) ||
             !curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0))
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: a base URL takes no query or fragment",
                        url);
    curl_free(scheme);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    return err;
}

/* A copy of s without trailing slashes (but keeping "/" itself). */
static char *strip_slashes(const char *s)
{
    char *c = strdup(s);
    size_t l = c ? strlen(c) : 0;
    while (l > 1 && c[l - 1] == '/')
        c[--l] = 0;
    return c;
}

/* ---------- directory ---------- */

static segd_err_t make_dir(const char *path, char *errstr, size_t n)
{
    struct stat st;
    if (!mkdir(path, 0755))
        return SEGD_OK;
    if (errno == EEXIST && !stat(path, &st) && S_ISDIR(st.st_mode))
        return SEGD_OK;
    if (errno == EEXIST)
        errno = ENOTDIR;
    return io_errf(errstr, n, "mkdir", path);
}

/* mkdir -p: existing directories are fine. */
static segd_err_t mkdir_p(const char *path, char *errstr, size_t n)
{
    char *buf = strdup(path);
    if (!buf)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    segd_err_t err = SEGD_OK;
    for (char *p = buf + 1; *p && !err; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        err = make_dir(buf, errstr, n);
        *p = '/';
    }
    if (!err)
        err = make_dir(buf, errstr, n);
    free(buf);
    return err;
}

/* 0, or -1 with errno set. */
static int write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* 0, or -1 with errno set. */
static int copy_into(int fd, const char *src_path)
{
    int in = open(src_path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    char buf[1 << 16];
    ssize_t r;
    int rc = 0;
    while (!rc && (r = read(in, buf, sizeof(buf))) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        rc = r < 0 ? -1 : write_all(fd, buf, (size_t)r);
    }
    int e = errno;
    close(in);
    errno = e;
    return rc;
}

/* A rename is durable only once its directory is synced. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Writes data (or the file src_path) to "name.tmp.<pid>" beside the target,
 * syncs it and renames it over the target: a reader sees the old object or
 * the whole new one, and a crash leaves at most a temporary file. */
static segd_err_t dir_put(segd_dest_t *d, const char *name, const void *data, size_t len,
                          const char *src_path, char *errstr, size_t n)
{
    segd_err_t err = check_name(name, errstr, n);
    if (err)
        return err;
    char *final = object_path(d, NULL, name);
    char *tmp = final ? str_printf("%s.tmp.%d", final, (int)getpid()) : NULL;
    int fd = -1;
    if (!tmp) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = io_errf(errstr, n, "create", tmp);
        goto out;
    }
    if (src_path ? copy_into(fd, src_path) : write_all(fd, data, len)) {
        err = io_errf(errstr, n, src_path ? "copy to" : "write", tmp);
        goto out_unlink;
    }
    int rc = fsync(fd);
    rc = close(fd) || rc;
    fd = -1;
    if (rc || rename(tmp, final)) {
        err = io_errf(errstr, n, "write", final);
        goto out_unlink;
    }
    if (fsync_dir(d->base))
        err = io_errf(errstr, n, "fsync", d->base);
    goto out;
out_unlink:
    unlink(tmp);
out:
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(final);
    return err;
}

static segd_err_t dir_delete(segd_dest_t *d, const char *name, char *errstr, size_t n)
{
    segd_err_t err = check_name(name, errstr, n);
    if (err)
        return err;
    char *path = object_path(d, NULL, name);
    if (!path)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (unlink(path) && errno != ENOENT)
        err = io_errf(errstr, n, "delete", path);
    free(path);
    return err;
}

/* ---------- where fetched bytes go ---------- */

/* A GET's body goes to a buffer or a file; error answers are kept apart
 * (their head is quoted in errstr) so that they never reach either. */
typedef struct sink {
    segd_buf_t *buf;
    FILE *file;
    CURL *curl;     /* to tell a 2xx body from an error answer */
    segd_err_t err; /* a local failure (NOMEM, IO): not retried */
    char errbody[ERR_BODY_MAX + 1];
    size_t errlen;
} sink_t;

static segd_err_t sink_write(sink_t *s, const void *data, size_t len)
{
    if (s->file) {
        if (fwrite(data, 1, len, s->file) != len)
            s->err = SEGD_ERR_IO;
    } else if (s->buf) {
        if (segd_buf_reserve(s->buf, len)) {
            s->err = SEGD_ERR_NOMEM;
        } else {
            memcpy(s->buf->data + s->buf->len, data, len);
            s->buf->len += len;
        }
    }
    return s->err;
}

/* Every attempt starts from empty: a retried GET must not append. */
static segd_err_t sink_reset(sink_t *s)
{
    s->errlen = 0;
    s->errbody[0] = 0;
    if (s->buf)
        s->buf->len = 0;
    if (s->file && (fseek(s->file, 0, SEEK_SET) || ftruncate(fileno(s->file), 0)))
        s->err = SEGD_ERR_IO;
    return s->err;
}

static segd_err_t dir_get(segd_dest_t *d, const char *dir, const char *name, sink_t *s,
                          char *errstr, size_t n)
{
    segd_err_t err = check_object(dir, name, errstr, n);
    if (err)
        return err;
    char *path = object_path(d, dir, name);
    if (!path)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    FILE *f = fopen(path, "rb");
    if (!f) {
        err = errno == ENOENT ? segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: not found", path)
                              : io_errf(errstr, n, "open", path);
        goto out;
    }
    char buf[1 << 16];
    size_t r;
    while (!err && (r = fread(buf, 1, sizeof(buf), f)) > 0)
        err = sink_write(s, buf, r);
    if (!err && ferror(f))
        err = io_errf(errstr, n, "read", path);
    else if (err)
        segd_errf(err, errstr, n, "copy %s: %s", path, segd_err_str(err));
    fclose(f);
out:
    free(path);
    return err;
}

/* ---------- HTTP and S3 requests ---------- */

typedef struct body {
    const uint8_t *data; /* in memory, or */
    FILE *file;          /* streamed from a file */
    size_t len, pos;
    segd_err_t err;      /* the file could not be read: not retried */
} body_t;

static size_t read_cb(char *buf, size_t size, size_t nitems, void *arg)
{
    body_t *b = arg;
    size_t want = size * nitems, left = b->len - b->pos;
    size_t k = want < left ? want : left;
    if (b->file) {
        k = fread(buf, 1, k, b->file);
        if (k == 0 && left) { /* shrank or unreadable: never send a short body */
            b->err = SEGD_ERR_IO;
            return CURL_READFUNC_ABORT;
        }
    } else if (k) {
        memcpy(buf, b->data + b->pos, k);
    }
    b->pos += k;
    return k;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    sink_t *s = arg;
    size_t len = size * nmemb;
    long status = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) {
        size_t k = ERR_BODY_MAX - s->errlen;
        k = len < k ? len : k;
        memcpy(s->errbody + s->errlen, data, k);
        s->errlen += k;
        s->errbody[s->errlen] = 0;
        return len;
    }
    return sink_write(s, data, len) ? 0 : len;
}

typedef struct request {
    const char *method; /* "PUT", "GET" or "DELETE" */
    body_t *body;       /* PUT */
    const char *sha256; /* S3: hex SHA-256 of the body; NULL = empty body */
    sink_t *sink;       /* always: GET bodies and error answers go there */
} request_t;

typedef segd_curl_result_t attempt_t;

static int add_header(struct curl_slist **h, const char *line)
{
    struct curl_slist *t = curl_slist_append(*h, line);
    if (!t)
        return -1;
    *h = t;
    return 0;
}

static void set_transport(segd_dest_t *d, const char *url, char *cerr)
{
    CURL *c = d->curl;
    long connect_ms = d->o.timeout_ms > 0 && d->o.timeout_ms < 10000 ? d->o.timeout_ms : 10000;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: callers run threads */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, d->o.timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    if (d->o.ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, d->o.ca_file);
    if (d->o.insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

/* libcurl's SigV4 signs every CURLOPT_HTTPHEADER entry, so the payload hash
 * and the session token go there. libcurl 7.88 (Debian 12) does not add
 * x-amz-content-sha256 itself (8.0+ does, as UNSIGNED-PAYLOAD for uploads)
 * and would sign the hash of an empty body for a callback upload; we send
 * the real hash, which S3 also checks against the bytes it receives. */
static int set_s3(segd_dest_t *d, const request_t *rq, struct curl_slist **h)
{
    char line[96];
    snprintf(line, sizeof(line), "x-amz-content-sha256: %s",
             rq->sha256 ? rq->sha256 : EMPTY_SHA256);
    curl_easy_setopt(d->curl, CURLOPT_AWS_SIGV4, d->sigv4);
    /* not CURLOPT_USERPWD: a ':' inside a key would split it wrongly */
    curl_easy_setopt(d->curl, CURLOPT_USERNAME, d->key);
    curl_easy_setopt(d->curl, CURLOPT_PASSWORD, d->secret);
    return add_header(h, line) || (d->token && add_header(h, d->token));
}

static int set_method(segd_dest_t *d, const request_t *rq, struct curl_slist **h)
{
    CURL *c = d->curl;
    if (!strcmp(rq->method, "DELETE"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    if (strcmp(rq->method, "PUT"))
        return 0; /* GET is the default */
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(c, CURLOPT_READDATA, rq->body);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->body->len);
    /* The 100-continue handshake costs up to 1 s per PUT with servers that
     * ignore it. Plain HTTP drops the header ("Expect:"); S3 keeps it and
     * waits less, because libcurl < 8.3 signs that removal entry as an empty
     * header which it then does not send: every signature would be wrong. */
    if (d->kind == DEST_S3) {
        curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
        return 0;
    }
    return add_header(h, "Expect:");
}

static segd_err_t local_err(const request_t *rq)
{
    if (rq->sink->err)
        return rq->sink->err;
    return rq->body ? rq->body->err : SEGD_OK;
}

/* One attempt. Setup failures and unreadable bodies are recorded in the
 * request's body / sink as local errors, which are not retried. */
static attempt_t perform(segd_dest_t *d, request_t *rq, const char *url, char *cerr)
{
    attempt_t a = {CURLE_OK, 0, 0};
    struct curl_slist *h = NULL;
    body_t *b = rq->body;
    curl_easy_reset(d->curl); /* keeps the connection cache */
    cerr[0] = 0;
    rq->sink->curl = d->curl;
    if (sink_reset(rq->sink))
        return a;
    if (b) { /* a retried PUT sends the whole body again */
        b->pos = 0;
        if (b->file && fseek(b->file, 0, SEEK_SET)) {
            b->err = SEGD_ERR_IO;
            return a;
        }
    }
    set_transport(d, url, cerr);
    if ((d->kind == DEST_S3 && set_s3(d, rq, &h)) || set_method(d, rq, &h)) {
        rq->sink->err = SEGD_ERR_NOMEM;
        goto out;
    }
    curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, rq->sink);
    a.rc = curl_easy_perform(d->curl);
    curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &a.status);
out:
    curl_slist_free_all(h);
    return a;
}

/* The error answer's head, on one line. */
static const char *err_body(sink_t *s)
{
    for (size_t i = 0; i < s->errlen; i++)
        if ((unsigned char)s->errbody[i] < 0x20 || s->errbody[i] == 0x7f)
            s->errbody[i] = ' ';
    return s->errbody;
}

static segd_err_t outcome(request_t *rq, const attempt_t *a, int tries, const char *url,
                          const char *cerr, char *errstr, size_t n)
{
    const char *m = rq->method;
    char after[48] = "";
    if (tries)
        snprintf(after, sizeof(after), " (after %d retries)", tries);
    segd_err_t local = local_err(rq);
    if (local)
        return segd_errf(local, errstr, n, "%s %s: %s", m, url,
                         local == SEGD_ERR_NOMEM ? "out of memory" : "local file I/O failed");
    if (a->rc != CURLE_OK)
        return segd_errf(SEGD_ERR_HTTP, errstr, n, "%s %s: %s%s", m, url,
                         cerr[0] ? cerr : curl_easy_strerror(a->rc), after);
    if (a->status >= 200 && a->status <= 299)
        return SEGD_OK;
    if (a->status == 404 && !strcmp(m, "DELETE"))
        return SEGD_OK;
    if (a->status == 404 && !strcmp(m, "GET"))
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: not found", url);
    return segd_errf(SEGD_ERR_HTTP, errstr, n, "%s %s: HTTP %ld%s%s%s", m, url, a->status, after,
                     rq->sink->errlen ? ": " : "", err_body(rq->sink));
}


typedef struct attempt_ctx {
    segd_dest_t *d;
    request_t *rq;
    const char *url;
    char cerr[CURL_ERROR_SIZE];
} attempt_ctx_t;

static attempt_t attempt(void *ctx)
{
    attempt_ctx_t *ac = ctx;
    attempt_t a = perform(ac->d, ac->rq, ac->url, ac->cerr);
    a.local_error = local_err(ac->rq) != SEGD_OK;
    return a;
}

/* Transport errors and 5xx answers are retried with exponential backoff;
 * other answers and local failures end the request at once (curl_retry.h). */
static segd_err_t request(segd_dest_t *d, const char *dir, const char *name, request_t *rq,
                          char *errstr, size_t n)
{
    segd_err_t err = check_object(dir, name, errstr, n);
    if (err)
        return err;
    char *url = object_path(d, dir, name);
    if (!url)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    attempt_ctx_t ac = {d, rq, url, {0}};
    segd_curl_backoff_t b = {d->o.max_retries, d->o.backoff_ms, BACKOFF_CAP_MS};
    int tries = 0;
    attempt_t a = segd_curl_retry(&b, attempt, &ac, &tries);
    d->retries += (uint64_t)tries;
    err = outcome(rq, &a, tries, url, ac.cerr, errstr, n);
    free(url);
    return err;
}

/* ---------- opening ---------- */

static segd_err_t check_opts(const segd_dest_opts_t *o, char *errstr, size_t n)
{
    if (o->max_retries < 0 || o->backoff_ms < 0 || o->timeout_ms < 0)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "destination: retries, backoff and timeout must not be negative");
    return SEGD_OK;
}

/* Every byte in set, 1..max bytes. */
static int only(const char *s, size_t max, const char *set)
{
    size_t l = strlen(s);
    return l > 0 && l <= max && strspn(s, set) == l;
}

#define LOWER_DIGITS "abcdefghijklmnopqrstuvwxyz0123456789"

/* The region and the bucket end up in a host name and in the SigV4 scope. */
static segd_err_t s3_base(segd_dest_t *d, const char *bucket, const char *prefix, size_t plen,
                          const char *region, char *errstr, size_t n)
{
    const char *endpoint = getenv("SEGD_S3_ENDPOINT");
    if (!only(bucket, 255, LOWER_DIGITS "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-_"))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "s3: bad bucket name \"%.64s\"", bucket);
    if (!only(region, 64, LOWER_DIGITS "-"))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "s3: bad region \"%.64s\"", region);
    char *pfx = escape(prefix, plen, 1), *ep = NULL;
    segd_err_t err = SEGD_OK;
    const char *sep = plen ? "/" : "";
    if (!pfx)
        goto out;
    if (endpoint && *endpoint) { /* an S3-compatible server: path-style */
        err = check_base_url(endpoint, errstr, n);
        if (err || !(ep = strip_slashes(endpoint)))
            goto out;
        d->base = str_printf("%s/%s%s%s", ep, bucket, sep, pfx);
    } else if (!only(bucket, 63, LOWER_DIGITS "-")) {
        /* dots would not match the TLS wildcard *.s3.REGION.amazonaws.com */
        d->base = str_printf("https://s3.%s.amazonaws.com/%s%s%s", region, bucket, sep, pfx);
    } else {
        d->base = str_printf("https://%s.s3.%s.amazonaws.com%s%s", bucket, region, sep, pfx);
    }
out:
    if (!err && !d->base)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    free(pfx);
    free(ep);
    return err;
}

static segd_err_t s3_credentials(segd_dest_t *d, const char *region, char *errstr, size_t n)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    if (!key || !*key || !secret || !*secret)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
    if (strpbrk(key, "\r\n") || strpbrk(secret, "\r\n") || (token && strpbrk(token, "\r\n")))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "s3: credentials contain a line break");
    if (!(d->key = strdup(key)) || !(d->secret = strdup(secret)) ||
        !(d->sigv4 = str_printf("aws:amz:%s:s3", region)) ||
        (token && *token && !(d->token = str_printf("x-amz-security-token: %s", token))))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return SEGD_OK;
}

static segd_err_t open_s3(segd_dest_t *d, const char *url, char *errstr, size_t n)
{
    const char *region = getenv("AWS_REGION");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region)
        region = "us-east-1";
    const char *rest = url + strlen("s3://");
    size_t blen = strcspn(rest, "/");
    const char *prefix = rest + blen;
    while (*prefix == '/')
        prefix++;
    size_t plen = strlen(prefix);
    while (plen && prefix[plen - 1] == '/')
        plen--;
    char *bucket = strndup(rest, blen);
    if (!bucket)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    segd_err_t err = s3_base(d, bucket, prefix, plen, region, errstr, n);
    if (!err)
        err = s3_credentials(d, region, errstr, n);
    free(bucket);
    return err;
}

static segd_err_t open_http(segd_dest_t *d, const char *url, char *errstr, size_t n)
{
    segd_err_t err = check_base_url(url, errstr, n);
    if (!err && !(d->base = strip_slashes(url)))
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return err;
}

static segd_err_t open_curl(segd_dest_t *d, char *errstr, size_t n)
{
    if (!(d->curl = curl_easy_init()))
        return segd_errf(SEGD_ERR_HTTP, errstr, n, "curl_easy_init failed");
    if (d->kind == DEST_S3 && curl_easy_setopt(d->curl, CURLOPT_AWS_SIGV4, d->sigv4) != CURLE_OK)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "s3: this libcurl cannot sign (SigV4)");
    return SEGD_OK;
}

segd_err_t segd_dest_open(segd_dest_t **out, const char *url, const segd_dest_opts_t *opts,
                          char *errstr, size_t n)
{
    *out = NULL;
    segd_dest_t *d = calloc(1, sizeof(*d));
    if (!d)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (opts)
        d->o = *opts;
    else
        segd_dest_opts_default(&d->o);
    segd_err_t err = check_opts(&d->o, errstr, n);
    if (!err && (!url || !*url))
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "empty destination");
    if (err)
        goto out;
    if (!strncmp(url, "s3://", 5)) {
        d->kind = DEST_S3;
        err = open_s3(d, url, errstr, n);
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        d->kind = DEST_HTTP;
        err = open_http(d, url, errstr, n);
    } else if (strstr(url, "://")) {
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n,
                        "%s: want a directory, http(s):// or s3:// destination", url);
    } else {
        d->kind = DEST_DIR;
        if (!(d->base = strip_slashes(url)))
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        else
            err = mkdir_p(d->base, errstr, n);
    }
    if (!err && d->kind != DEST_DIR)
        err = open_curl(d, errstr, n);
out:
    if (err)
        segd_dest_close(d);
    else
        *out = d;
    return err;
}

static void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

int segd_dest_is_remote(const char *url)
{
    return !strncmp(url, "http://", 7) || !strncmp(url, "https://", 8) ||
           !strncmp(url, "s3://", 5);
}

void segd_dest_join(char *out, size_t cap, const char *base, const char *name)
{
    size_t len = strlen(base);
    while (len > 1 && base[len - 1] == '/')
        len--;
    snprintf(out, cap, "%.*s/%s", (int)len, base, name);
}

void segd_dest_close(segd_dest_t *d)
{
    if (!d)
        return;
    if (d->curl)
        curl_easy_cleanup(d->curl);
    free(d->base);
    free(d->key);
    free_secret(d->secret);
    free(d->sigv4);
    free_secret(d->token);
    free(d);
}

/* ---------- operations ---------- */

segd_err_t segd_dest_put_mem(segd_dest_t *d, const char *name, const void *data, size_t len,
                             char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_put(d, name, data, len, NULL, errstr, n);
    char hex[65];
    if (d->kind == DEST_S3)
        segd_sha256_hex(data, len, hex);
    body_t b = {.data = data, .len = len};
    sink_t s = {0};
    request_t rq = {"PUT", &b, d->kind == DEST_S3 ? hex : NULL, &s};
    return request(d, NULL, name, &rq, errstr, n);
}

segd_err_t segd_dest_put_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_put(d, name, NULL, 0, local_path, errstr, n);
    char hex[65];
    struct stat st;
    body_t b = {0};
    sink_t s = {0};
    request_t rq = {"PUT", &b, d->kind == DEST_S3 ? hex : NULL, &s};
    segd_err_t err = SEGD_OK;
    errno = 0;
    FILE *f = fopen(local_path, "rb");
    if (!f || fstat(fileno(f), &st) || (d->kind == DEST_S3 && segd_sha256_file_hex(f, hex))) {
        err = io_errf(errstr, n, "read", local_path);
        goto out;
    }
    b.file = f;
    b.len = (size_t)st.st_size;
    err = request(d, NULL, name, &rq, errstr, n);
out:
    if (f)
        fclose(f);
    return err;
}

static segd_err_t fetch(segd_dest_t *d, const char *dir, const char *name, sink_t *s,
                        char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_get(d, dir, name, s, errstr, n);
    request_t rq = {"GET", NULL, NULL, s};
    return request(d, dir, name, &rq, errstr, n);
}

segd_err_t segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                segd_buf_t *out, char *errstr, size_t n)
{
    sink_t s = {.buf = out};
    out->len = 0;
    segd_err_t err = fetch(d, dir, name, &s, errstr, n);
    if (err)
        out->len = 0;
    return err;
}

segd_err_t segd_dest_get_mem(segd_dest_t *d, const char *name, segd_buf_t *out, char *errstr,
                             size_t n)
{
    return segd_dest_get_mem_in(d, NULL, name, out, errstr, n);
}

/* Fetched into "local_path.tmp.<pid>" and renamed: a failure leaves
 * local_path as it was. */
segd_err_t segd_dest_get_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t n)
{
    char *tmp = str_printf("%s.tmp.%d", local_path, (int)getpid());
    if (!tmp)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    segd_err_t err = SEGD_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        err = io_errf(errstr, n, "create", tmp);
        goto out;
    }
    sink_t s = {.file = f};
    err = fetch(d, NULL, name, &s, errstr, n);
    if (fclose(f) && !err)
        err = io_errf(errstr, n, "write", tmp);
    if (!err && rename(tmp, local_path))
        err = io_errf(errstr, n, "rename", tmp);
    if (err)
        unlink(tmp);
out:
    free(tmp);
    return err;
}

segd_err_t segd_dest_delete(segd_dest_t *d, const char *name, char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return dir_delete(d, name, errstr, n);
    sink_t s = {0};
    request_t rq = {"DELETE", NULL, NULL, &s};
    return request(d, NULL, name, &rq, errstr, n);
}
