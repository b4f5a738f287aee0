/* Process figures read from /proc/self at scrape time: resident memory
 * (segd_process_resident_memory_bytes), CPU time
 * (segd_process_cpu_seconds_total), start time and open files.
 * segd_process_metrics_register adds a collector whose only state, the
 * families, lives in the registry, so there is nothing to free. It is as
 * thread-safe as the registry. */
#ifndef SEGD_METRICS_PROCESS_H
#define SEGD_METRICS_PROCESS_H

#include <stdint.h>

#include "metrics/registry.h"

/* The families and a collector with the registry as its context. */
segd_err_t segd_process_metrics_register(segd_metrics_t *m);

/* RSS in bytes from /proc/self/statm; 0 when unreadable. */
uint64_t segd_process_rss_bytes(void);

#endif
