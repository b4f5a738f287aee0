/* Identity membership changes into outbox entries (DESIGN §10.6): gathers
 * the changes store/identity.h reports and appends them to the batch they
 * belong to as entries of kind member, cut at SEGD_OUTBOX_MAX_MEMBERS
 * changes, so that the publisher sends them as MemberEvents exactly when the
 * batch lands. Shared by the links consumer, `segd identity rebuild` and
 * `segd identity backfill`. One writer thread. */
#ifndef SEGD_MEMBER_OUTBOX_H
#define SEGD_MEMBER_OUTBOX_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "store/identity.h"
#include "store/store.h"
#include "wire/outbox.h"

typedef struct segd_member_outbox {
    segd_outbox_builder_t gathered; /* not yet in an entry */
    segd_buf_t value;
    uint64_t appended; /* changes put into entries; the caller zeroes it */
} segd_member_outbox_t;

void segd_member_outbox_init(segd_member_outbox_t *m);
void segd_member_outbox_free(segd_member_outbox_t *m);
/* Forgets the changes gathered and appended (their batch was dropped). */
void segd_member_outbox_reset(segd_member_outbox_t *m);
/* Gathers c; a full entry goes into b. SEGD_ERR_NOMEM: b must be dropped. */
segd_err_t segd_member_outbox_add(segd_member_outbox_t *m, segd_batch_t *b,
                                  const segd_ident_change_t *c);
/* What was gathered as one entry of b (none gathered: none), before b is
 * written. */
segd_err_t segd_member_outbox_flush(segd_member_outbox_t *m, segd_batch_t *b);

#endif
