/* Snapshot destinations and sources: a local directory, an http(s):// base
 * URL (PUT / GET / DELETE, e.g. nginx WebDAV) or s3://bucket/prefix (AWS
 * SigV4 signed by libcurl's CURLOPT_AWS_SIGV4). Objects are named relative to
 * the base ("manifest.json", "bucket-00007.avro"). Every remote operation
 * retries transport errors and 5xx answers with exponential backoff; 4xx
 * answers fail at once. S3 credentials come from the environment only
 * (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN,
 * AWS_REGION / AWS_DEFAULT_REGION, default us-east-1; SEGD_S3_ENDPOINT for an
 * S3-compatible server, path-style; buckets with dots or capitals are
 * addressed path-style on AWS too), never from argv. Not thread-safe: one
 * handle per thread; a program with threads calls curl_global_init() once
 * before opening remote destinations (libcurl's lazy init is not
 * thread-safe) and curl_global_cleanup() at exit.
 * Names are one path component (no '/', not "." or "..", no control bytes;
 * anything else is SEGD_ERR_INVALID): they come from manifests, i.e. from
 * outside. Remote names are percent-encoded in URLs. */
#ifndef SEGD_DEST_H
#define SEGD_DEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/buf.h"

typedef struct segd_dest segd_dest_t;

typedef struct segd_dest_opts {
    const char *ca_file; /* CA bundle for https; NULL = system default */
    int insecure;        /* skip TLS verification (tests only) */
    long timeout_ms;     /* per attempt, whole transfer; 0 = none; default 60000 */
    int max_retries;     /* default 5 */
    long backoff_ms;     /* first retry delay, doubled each time; default 200 */
} segd_dest_opts_t;

void segd_dest_opts_default(segd_dest_opts_t *o);

/* url: a directory path (created if missing), "http://...", "https://..." or
 * "s3://bucket/prefix". opts may be NULL. A broken URL or missing S3
 * credentials fail here with SEGD_ERR_CONFIG. */
segd_err_t segd_dest_open(segd_dest_t **out, const char *url, const segd_dest_opts_t *opts,
                          char *errstr, size_t errstr_size);
void segd_dest_close(segd_dest_t *d);

/* Whether url names an http(s):// or s3:// destination (else a directory). */
int segd_dest_is_remote(const char *url);
/* base + "/" + name into out, without doubling a trailing slash of base. */
void segd_dest_join(char *out, size_t cap, const char *base, const char *name);

/* Stores the local file under name. For a directory the file is written to a
 * temporary name and renamed, so a reader never sees a partial object. */
segd_err_t segd_dest_put_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t errstr_size);
segd_err_t segd_dest_put_mem(segd_dest_t *d, const char *name, const void *data, size_t len,
                             char *errstr, size_t errstr_size);

/* Fetches name into out (replacing its contents; emptied on failure).
 * SEGD_ERR_NOTFOUND when absent; but S3 answers 403 (SEGD_ERR_HTTP) for a
 * missing object when the credentials lack s3:ListBucket. Both getters. */
segd_err_t segd_dest_get_mem(segd_dest_t *d, const char *name, segd_buf_t *out,
                             char *errstr, size_t errstr_size);
/* As segd_dest_get_mem, for the object name in the folder dir under the
 * base (dir NULL: at the base; dir is checked as names are). One handle
 * then reads a whole snapshot: topology.json at the base and each unit's
 * files in its folder p-PPPPP. */
segd_err_t segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                segd_buf_t *out, char *errstr, size_t errstr_size);
/* Fetches name into a local file (through a temporary name beside it, so a
 * failure leaves local_path as it was). SEGD_ERR_NOTFOUND when absent. */
segd_err_t segd_dest_get_file(segd_dest_t *d, const char *name, const char *local_path,
                              char *errstr, size_t errstr_size);

/* Removes name; absent is success. */
segd_err_t segd_dest_delete(segd_dest_t *d, const char *name, char *errstr,
                            size_t errstr_size);

/* Retries performed so far (for tests and logs). */
uint64_t segd_dest_retries(const segd_dest_t *d);

#endif
