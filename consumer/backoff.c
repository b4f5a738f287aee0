/* Consumer fault waits; see backoff.h. */
#include "consumer/backoff.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"

int64_t segd_backoff_wait(segd_backoff_t *b, int64_t wait_ms, int64_t max_ms,
                          const char *fault)
{
    if (strcmp(b->last_fault, fault) != 0) {
        if (b->log)
            segd_log(b->log, SEGD_LOG_WARN, "pipeline",
                     "waiting: %s (retrying with backoff, nothing committed)", fault);
        else
            fprintf(stderr, "segd: waiting: %s (retrying with backoff, nothing committed)\n",
                    fault);
        snprintf(b->last_fault, sizeof(b->last_fault), "%s", fault);
    }
    b->retries++;
    segd_sleep_ms(wait_ms);
    wait_ms *= 2;
    return wait_ms > max_ms ? max_ms : wait_ms;
}

void segd_backoff_cleared(segd_backoff_t *b)
{
    if (b->last_fault[0]) {
        if (b->log)
            segd_log(b->log, SEGD_LOG_INFO, "pipeline", "resumed after: %s", b->last_fault);
        else
            fprintf(stderr, "segd: resumed after: %s\n", b->last_fault);
        b->last_fault[0] = 0;
    }
}
