/* Retry classes and the retry loop of segd's HTTP clients; see curl_retry.h. */
#include "transport/curl_retry.h"

#include "base/clock.h"

int segd_curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_WRITE_ERROR:
    case CURLE_READ_ERROR:
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
        return 0;
    default:
        return 1;
    }
}

int segd_curl_should_retry(const segd_curl_result_t *r)
{
    if (r->local_error)
        return 0;
    return r->rc != CURLE_OK ? segd_curl_transient(r->rc) : r->status >= 500;
}

segd_curl_result_t segd_curl_retry(const segd_curl_backoff_t *b, segd_curl_attempt_fn attempt,
                                   void *ctx, int *tries)
{
    long wait = b->backoff_ms;
    int n = 0;
    segd_curl_result_t r;
    for (;;) {
        r = attempt(ctx);
        if (!segd_curl_should_retry(&r) || n >= b->max_retries)
            break;
        n++;
        segd_sleep_ms(wait);
        wait = wait > b->cap_ms / 2 ? b->cap_ms : wait * 2;
    }
    if (tries)
        *tries = n;
    return r;
}
