/* The retry rules every libcurl client in segd follows (the schema registry
 * and the snapshot destinations). A transport error on the network's or the
 * server's side, or a 5xx answer, is retried with exponential backoff.
 * Our own failures (callbacks, options, out of memory, local files), TLS
 * trust settings and any other answer end the request at once, because
 * retrying them would only delay the same error. */
#ifndef SEGD_CURL_RETRY_H
#define SEGD_CURL_RETRY_H

#include <curl/curl.h>

typedef struct segd_curl_result {
    CURLcode rc;
    long status;     /* HTTP status; 0 when no answer came */
    int local_error; /* the attempt failed on our side: never retried */
} segd_curl_result_t;

typedef struct segd_curl_backoff {
    int max_retries; /* retries after the first attempt */
    long backoff_ms; /* first wait, doubled each time ... */
    long cap_ms;     /* ... up to this */
} segd_curl_backoff_t;

/* 1 when a transport error is worth another attempt. */
int segd_curl_transient(CURLcode rc);
/* 1 when r is worth another attempt (transient error or 5xx). */
int segd_curl_should_retry(const segd_curl_result_t *r);

/* Calls attempt(ctx) until its result is not worth retrying or the retries
 * are used up, sleeping between attempts. Returns the last result; *tries
 * (may be NULL) receives the number of retries made. */
typedef segd_curl_result_t (*segd_curl_attempt_fn)(void *ctx);
segd_curl_result_t segd_curl_retry(const segd_curl_backoff_t *b, segd_curl_attempt_fn attempt,
                                   void *ctx, int *tries);

#endif
