/* Snapshot destinations (dest.h): a directory, an HTTP base URL or an S3
 * prefix behind one put / get / delete interface; called by
 * publisher/snapshot.c. Remote kinds share one curl easy handle per
 * destination (connections stay alive between requests) and one retry loop.
 * Object names are checked (dest_name.c) because callers pass names read
 * from manifests, i.e. from outside. This file opens a destination and
 * runs the operations; the kinds are dest_dir.c and dest_http.c. */
#define _GNU_SOURCE
#include "transport/dest.h"
#include "transport/dest_int.h"
#include "wire/digest.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void segd_dest_opts_default(segd_dest_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 60000;
    o->max_retries = 5;
    o->backoff_ms = 200;
}

uint64_t segd_dest_retries(const segd_dest_t *d) { return d->retries; }

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
    char *pfx = segd_dest_escape(prefix, plen, 1), *ep = NULL;
    segd_err_t err = SEGD_OK;
    const char *sep = plen ? "/" : "";
    if (!pfx)
        goto out;
    if (endpoint && *endpoint) { /* an S3-compatible server: path-style */
        err = segd_dest_check_base_url(endpoint, errstr, n);
        if (err || !(ep = segd_dest_strip_slashes(endpoint)))
            goto out;
        d->base = segd_dest_printf("%s/%s%s%s", ep, bucket, sep, pfx);
    } else if (!only(bucket, 63, LOWER_DIGITS "-")) {
        /* dots would not match the TLS wildcard *.s3.REGION.amazonaws.com */
        d->base = segd_dest_printf("https://s3.%s.amazonaws.com/%s%s%s", region, bucket, sep, pfx);
    } else {
        d->base = segd_dest_printf("https://%s.s3.%s.amazonaws.com%s%s", bucket, region, sep, pfx);
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
        !(d->sigv4 = segd_dest_printf("aws:amz:%s:s3", region)) ||
        (token && *token && !(d->token = segd_dest_printf("x-amz-security-token: %s", token))))
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
    segd_err_t err = segd_dest_check_base_url(url, errstr, n);
    if (!err && !(d->base = segd_dest_strip_slashes(url)))
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
        if (!(d->base = segd_dest_strip_slashes(url)))
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        else
            err = segd_dest_mkdir_p(d->base, errstr, n);
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
        return segd_dest_dir_put(d, name, data, len, NULL, errstr, n);
    char hex[65];
    if (d->kind == DEST_S3)
        segd_sha256_hex(data, len, hex);
    body_t b = {.data = data, .len = len};
    sink_t s = {0};
    request_t rq = {"PUT", &b, d->kind == DEST_S3 ? hex : NULL, &s};
    return segd_dest_request(d, NULL, name, &rq, errstr, n);
}

segd_err_t segd_dest_put_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return segd_dest_dir_put(d, name, NULL, 0, local_path, errstr, n);
    char hex[65];
    struct stat st;
    body_t b = {0};
    sink_t s = {0};
    request_t rq = {"PUT", &b, d->kind == DEST_S3 ? hex : NULL, &s};
    segd_err_t err = SEGD_OK;
    errno = 0;
    FILE *f = fopen(local_path, "rb");
    if (!f || fstat(fileno(f), &st) || (d->kind == DEST_S3 && segd_sha256_file_hex(f, hex))) {
        err = segd_dest_io_errf(errstr, n, "read", local_path);
        goto out;
    }
    b.file = f;
    b.len = (size_t)st.st_size;
    err = segd_dest_request(d, NULL, name, &rq, errstr, n);
out:
    if (f)
        fclose(f);
    return err;
}

static segd_err_t fetch(segd_dest_t *d, const char *dir, const char *name, sink_t *s,
                        char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return segd_dest_dir_get(d, dir, name, s, errstr, n);
    request_t rq = {"GET", NULL, NULL, s};
    return segd_dest_request(d, dir, name, &rq, errstr, n);
}

segd_err_t segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name, segd_buf_t *out,
                                char *errstr, size_t n)
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
    char *tmp = segd_dest_printf("%s.tmp.%d", local_path, (int)getpid());
    if (!tmp)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    segd_err_t err = SEGD_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        err = segd_dest_io_errf(errstr, n, "create", tmp);
        goto out;
    }
    sink_t s = {.file = f};
    err = fetch(d, NULL, name, &s, errstr, n);
    if (fclose(f) && !err)
        err = segd_dest_io_errf(errstr, n, "write", tmp);
    if (!err && rename(tmp, local_path))
        err = segd_dest_io_errf(errstr, n, "rename", tmp);
    if (err)
        unlink(tmp);
out:
    free(tmp);
    return err;
}

segd_err_t segd_dest_delete(segd_dest_t *d, const char *name, char *errstr, size_t n)
{
    if (d->kind == DEST_DIR)
        return segd_dest_dir_delete(d, name, errstr, n);
    sink_t s = {0};
    request_t rq = {"DELETE", NULL, NULL, &s};
    return segd_dest_request(d, NULL, name, &rq, errstr, n);
}
