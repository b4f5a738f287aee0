/* The bulk load's two-thread write phase: a thread runs the external sort's
 * merge (segd_extsort_next: reading runs, decoding, the §3 join) and hands
 * the joined users over in two alternating batches of bounded size to the
 * caller's thread, which encodes and writes them. Same contract as
 * segd_extsort_next; the extsort belongs to the handoff's thread until
 * segd_handoff_stop. */
#ifndef SEGD_HANDOFF_H
#define SEGD_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/profile.h"
#include "load/extsort.h"

typedef struct segd_handoff segd_handoff_t;

/* batch_bytes bounds each of the two batches (entries + user bytes; one
 * user larger than that fills a batch alone). x is borrowed and must be
 * finished. */
segd_err_t segd_handoff_start(segd_handoff_t **out, segd_extsort_t *x, size_t batch_bytes,
                              char *errstr, size_t errstr_size);
/* As segd_extsort_next; the merge's error comes after the users before it. */
segd_err_t segd_handoff_next(segd_handoff_t *h, const char **user, size_t *user_len,
                             segd_profile_t **joined, uint64_t *items, int *done,
                             char *errstr, size_t errstr_size);
/* Stops the thread (at once, whatever is left) and frees h. */
void segd_handoff_stop(segd_handoff_t *h);

#endif
