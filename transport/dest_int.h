/* Snapshot destinations' internals, shared by transport/'s dest*.c
 * modules: dest.c (opening, the operations), dest_name.c (object names and
 * URLs), dest_dir.c (the directory kind), dest_http.c (HTTP and S3
 * requests) and dest_util.c (the sink fetched bytes go to, and the helpers
 * all of them use). Other folders use dest.h. */
#ifndef SEGD_DEST_INT_H
#define SEGD_DEST_INT_H

#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "transport/dest.h"

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

typedef struct body {
    const uint8_t *data; /* in memory, or */
    FILE *file;          /* streamed from a file */
    size_t len, pos;
    segd_err_t err;      /* the file could not be read: not retried */
} body_t;

typedef struct request {
    const char *method; /* "PUT", "GET" or "DELETE" */
    body_t *body;       /* PUT */
    const char *sha256; /* S3: hex SHA-256 of the body; NULL = empty body */
    sink_t *sink;       /* always: GET bodies and error answers go there */
} request_t;

/* dest_util.c: asprintf returning the string or NULL (freed by the caller);
 * an IO error from errno; the sink's writes. */
char *segd_dest_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
segd_err_t segd_dest_io_errf(char *errstr, size_t n, const char *what, const char *path);
segd_err_t segd_dest_sink_write(sink_t *s, const void *data, size_t len);
segd_err_t segd_dest_sink_reset(sink_t *s);

/* dest_name.c: names checked, escaped and joined into paths or URLs (the
 * strings returned are freed by the caller; NULL: out of memory). */
segd_err_t segd_dest_check_name(const char *name, char *errstr, size_t n);
segd_err_t segd_dest_check_object(const char *dir, const char *name, char *errstr, size_t n);
char *segd_dest_escape(const char *s, size_t len, int keep_slash);
char *segd_dest_object_path(const segd_dest_t *d, const char *dir, const char *name);
segd_err_t segd_dest_check_base_url(const char *url, char *errstr, size_t n);
char *segd_dest_strip_slashes(const char *s);

/* dest_dir.c: the directory kind. src_path NULL: data is the object. */
segd_err_t segd_dest_mkdir_p(const char *path, char *errstr, size_t n);
segd_err_t segd_dest_dir_put(segd_dest_t *d, const char *name, const void *data, size_t len,
                             const char *src_path, char *errstr, size_t n);
segd_err_t segd_dest_dir_delete(segd_dest_t *d, const char *name, char *errstr, size_t n);
segd_err_t segd_dest_dir_get(segd_dest_t *d, const char *dir, const char *name, sink_t *s,
                             char *errstr, size_t n);

/* dest_http.c: one request to the object dir/name (dir NULL: the base). */
segd_err_t segd_dest_request(segd_dest_t *d, const char *dir, const char *name, request_t *rq,
                             char *errstr, size_t n);

#endif
