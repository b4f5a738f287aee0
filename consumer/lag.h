/* Consumer lag per assigned partition, for /readyz and the
 * segd_consumer_lag_messages gauge: the high watermark librdkafka last saw
 * in a fetch response (rd_kafka_get_watermark_offsets: cached, no broker
 * round trip, so the pipeline thread never blocks on it) less the next
 * offset to apply (the consumer's position; before the first message of a
 * partition, where the pipeline started or sought it: its stored offset,
 * or the low or high watermark for input.offset.reset). The store is not
 * read here: its fault-injection counts stay the pipeline's.
 *
 * Threads: refresh on the pipeline's thread; get from any thread (a mutex
 * guards the table). Ownership: the table owns its copy; get hands out a
 * malloc'd array the caller frees. */
#ifndef SEGD_LAG_H
#define SEGD_LAG_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "metrics/registry.h"

typedef struct segd_partition_lag {
    char topic[256];
    int32_t partition;
    int64_t high; /* high watermark; -1 = not seen yet */
    int64_t next; /* next offset to apply; -1 = unknown */
    int64_t lag;  /* high - next, at least 0; -1 = unknown (not ready) */
} segd_partition_lag_t;

typedef struct segd_lag segd_lag_t;

segd_lag_t *segd_lag_new(void); /* NULL when out of memory */
void segd_lag_destroy(segd_lag_t *l);

/* The group has assigned this member its partitions (possibly none): from
 * the next refresh on, which reads that assignment, segd_lag_get reports
 * assigned = 1. Pipeline thread. */
void segd_lag_assigned(segd_lag_t *l);

/* The member that held the assignment is gone (its consumer was rebuilt):
 * segd_lag_get reports assigned = 0 until the new member's assignment is
 * read, so /readyz says "unassigned" instead of ready over a table that
 * the next refresh empties. Pipeline thread. */
void segd_lag_unassigned(segd_lag_t *l);

/* Where the pipeline (re)started a partition: an offset, or librdkafka's
 * logical RD_KAFKA_OFFSET_BEGINNING / _END (anything else: unknown). Used
 * until the consumer has a position for it. Pipeline thread. */
segd_err_t segd_lag_start(segd_lag_t *l, const char *topic, int32_t partition, int64_t offset);

/* Recomputes the table from rk's assignment (rk borrowed for the call).
 * paused(ctx, topic, partition) says which partitions wait for their
 * offset (restoring, unreadable): their lag is unknown. gauge (may be NULL)
 * gets one series per assigned partition with a known lag; the series of
 * partitions no longer assigned are removed. Pipeline thread. */
void segd_lag_refresh(segd_lag_t *l, rd_kafka_t *rk,
                      int (*paused)(void *ctx, const char *topic, int32_t partition),
                      void *ctx, segd_metric_t *gauge);

/* A copy of the table: *out (malloc'd, the caller frees; NULL when empty),
 * *n entries; *assigned as set by segd_lag_assigned. SEGD_ERR_NOMEM. */
segd_err_t segd_lag_get(segd_lag_t *l, segd_partition_lag_t **out, size_t *n, int *assigned);
/* How old the table is (ms since the last refresh; INT64_MAX before the
 * first): a pipeline stalled in a fault wait (registry down, change stream
 * behind, store faults) stops refreshing it. Any thread. */
int64_t segd_lag_age_ms(segd_lag_t *l);

#endif
