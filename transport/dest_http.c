/* The HTTP and S3 kinds of snapshot destination: one request on the
 * destination's curl easy handle (kept alive between requests), signed with
 * SigV4 for S3, retried with backoff on transport errors and 5xx answers
 * (curl_retry.h), error answers quoted in errstr. */
#define _GNU_SOURCE
#include "transport/curl_retry.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/dest_int.h"

/* ---------- HTTP and S3 requests ---------- */

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
    return segd_dest_sink_write(s, data, len) ? 0 : len;
}

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
    if (segd_dest_sink_reset(rq->sink))
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
segd_err_t segd_dest_request(segd_dest_t *d, const char *dir, const char *name, request_t *rq,
                             char *errstr, size_t n)
{
    segd_err_t err = segd_dest_check_object(dir, name, errstr, n);
    if (err)
        return err;
    char *url = segd_dest_object_path(d, dir, name);
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
