/* The pipeline's writer thread (ingest.writer.thread, DESIGN §4): writes one
 * sealed batch (data, outbox entry and offsets in one WriteBatch,
 * consumer/apply.h) into the store while the pipeline's thread polls,
 * checks and builds the next one. It holds at most one batch, so ingest
 * holds at most two. The pipeline's thread hands a batch over with
 * segd_pwriter_start and takes it back with segd_pwriter_wait; in between
 * the applier is the writer's alone. The writer makes one attempt per
 * batch: what a failed write means (retries, what stays pending, when to
 * wait) is decided by its caller, consumer/pipeline_batch.c. */
#ifndef SEGD_PIPELINE_WRITER_H
#define SEGD_PIPELINE_WRITER_H

#include <stddef.h>

#include "consumer/apply.h"

typedef struct segd_pwriter segd_pwriter_t;

/* Starts the thread (named "segd:writer"). written, when not NULL, runs on
 * it after each successful write with ctx (the change publisher's kick). */
segd_err_t segd_pwriter_new(segd_pwriter_t **out, void (*written)(void *ctx), void *ctx,
                            char *errstr, size_t errstr_size);
/* Waits for a batch in its hands, stops and joins the thread. */
void segd_pwriter_destroy(segd_pwriter_t *w);

/* Hands a over to be written (segd_applier_flush): a must be sealed
 * (segd_applier_seal) and the writer must hold no batch. */
void segd_pwriter_start(segd_pwriter_t *w, segd_applier_t *a);
/* Waits until the started batch is written or its write failed, and gives
 * it back: SEGD_OK (also when none was started) or the write's error, its
 * message in errstr; *write_s the seconds the write took. */
segd_err_t segd_pwriter_wait(segd_pwriter_t *w, double *write_s, char *errstr,
                             size_t errstr_size);

#endif
