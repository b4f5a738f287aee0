/* Turns validated events into merge operands inside a store batch: the one
 * write path shared by backfill, the Kafka consumer and the benchmarks. */
#ifndef SEGD_APPLY_H
#define SEGD_APPLY_H

#include "core/event.h"
#include "wire/outbox.h"
#include "store/store.h"

/* A SegmentEvent with SEGD_CONTROL_RETIRE_USER (core/event.h) is a control event, not a user's: a
 * store-wide retirement through the log (DESIGN 3.2), op REMOVE, ts_ms =
 * retired_before_ms, one segment per retired id; produced to every partition
 * by `segd segments retire --brokers`. With SEGD_CONTROL_RETIRE_PARTNER_USER
 * each segment entry's partner_id is a retired partner instead
 * (`segd segments retire --partner P --brokers`). */
int segd_event_is_control(const segd_event_t *ev);

typedef struct segd_applier {
    segd_store_t *store;   /* borrowed */
    segd_batch_t *batch;   /* owned */
    segd_profile_t scratch;
    segd_buf_t operand;
    uint64_t events, segments; /* applied to the batch since creation */
    int outbox;                /* record each batch's operands in the outbox */
    int outbox_in_batch;       /* the pending batch holds its outbox entry */
    int sync;                  /* flush syncs the WAL (segd_store_write_sync) */
    segd_outbox_builder_t ob;
    segd_buf_t outbox_value;
    segd_retirement_t *retired; /* control retirements in the pending batch: the */
    size_t n_retired, cap_retired; /* policy learns them once it is written */
    segd_buf_t retire_value;
} segd_applier_t;

segd_err_t segd_applier_init(segd_applier_t *a, segd_store_t *store);
void segd_applier_free(segd_applier_t *a);

/* From now on every written batch carries an outbox entry describing it
 * (DESIGN §5), so the publisher can turn it into change events. */
void segd_applier_enable_outbox(segd_applier_t *a);

/* Adds ev (already validated) as one merge operand to the batch. */
segd_err_t segd_applier_add(segd_applier_t *a, const segd_event_t *ev);
/* The same, recording where the event came from for the change stream:
 * topic (NULL = unknown), partition, offset and the input's timestamp
 * (0 = unknown). */
segd_err_t segd_applier_add_from(segd_applier_t *a, const segd_event_t *ev, const char *topic,
                                 int32_t partition, int64_t offset, int64_t event_ms);

/* The same for an operand encoded elsewhere (segd_record_encode of
 * segd_event_to_profile with this store's granularity, e.g. by the file
 * reader's threads): appends it to the batch and, with the outbox on, to
 * the batch's outbox entry. user and operand are copied. */
segd_err_t segd_applier_add_operand(segd_applier_t *a, const void *user, size_t user_len,
                                    const void *operand, size_t operand_len,
                                    size_t n_segments, const char *topic, int32_t partition,
                                    int64_t offset, int64_t event_ms);

/* Makes every flush sync the WAL before it returns: for offline writes an
 * operator is told are done (segd erase), not for the ingest path, whose
 * input stays in Kafka until its offsets are durable. */
void segd_applier_set_sync(segd_applier_t *a);

/* Makes the pending batch's outbox entry now, on the calling thread, which
 * must be the store's outbox appender (store.h): after it, segd_applier_flush
 * appends nothing, so another thread may write the batch (the pipeline's
 * writer thread, consumer/pipeline_writer.h). Idempotent until the flush. */
segd_err_t segd_applier_seal(segd_applier_t *a);

/* Writes the batch (with whatever offsets the caller set) and clears it.
 * On failure the batch stays as it was, for another try. */
segd_err_t segd_applier_flush(segd_applier_t *a, char *errstr, size_t errstr_size);

#endif
