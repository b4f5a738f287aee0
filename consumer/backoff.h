/* Fault waits on the consumer side (segd run's pipeline, segd replay): an
 * exponential backoff capped by the caller's retry.max.ms that reports a
 * fault once per change and says when it cleared, and counts the waits.
 * A zeroed segd_backoff_t is ready; one per consumer, used by one thread.
 * With log set (segd run) the reports are warn/info lines of component
 * "pipeline"; without (segd replay, an offline command) plain stderr text. */
#ifndef SEGD_BACKOFF_H
#define SEGD_BACKOFF_H

#include <stdint.h>

#include "base/log.h"

typedef struct segd_backoff {
    uint64_t retries;     /* waits so far */
    char last_fault[512]; /* reported and not yet cleared ("" = none) */
    const segd_log_t *log; /* borrowed; NULL = plain stderr lines */
} segd_backoff_t;

/* Sleeps wait_ms (a signal ends it early), reporting fault on stderr if it
 * differs from the last one; returns the next wait, doubled up to max_ms. */
int64_t segd_backoff_wait(segd_backoff_t *b, int64_t wait_ms, int64_t max_ms,
                          const char *fault);
/* Reports "resumed after ..." if a fault was reported since the last call. */
void segd_backoff_cleared(segd_backoff_t *b);

#endif
