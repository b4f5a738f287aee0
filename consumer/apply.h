/* Turns validated events into merge operands inside a store batch: the one
 * write path shared by backfill, the Kafka consumer and the benchmarks. */
#ifndef SEGD_APPLY_H
#define SEGD_APPLY_H

#include "event.h"
#include "store/store.h"

typedef struct segd_applier {
    segd_store_t *store;   /* borrowed */
    segd_batch_t *batch;   /* owned */
    segd_profile_t scratch;
    segd_buf_t operand;
    uint64_t events, segments; /* applied to the batch since creation */
} segd_applier_t;

segd_err_t segd_applier_init(segd_applier_t *a, segd_store_t *store);
void segd_applier_free(segd_applier_t *a);

/* Adds ev (already validated) as one merge operand to the batch. */
segd_err_t segd_applier_add(segd_applier_t *a, const segd_event_t *ev);

/* Writes the batch (with whatever offsets the caller set) and clears it. */
segd_err_t segd_applier_flush(segd_applier_t *a, char *errstr, size_t errstr_size);

#endif
