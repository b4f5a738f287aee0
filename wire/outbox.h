/* The outbox entry format (DESIGN §4/§5): what one ingest batch changed,
 * written in the batch's own WriteBatch and turned into change events by the
 * publisher after the store has it. Keeping the merge operands themselves
 * (not the users' joined states) costs no read on the hot path; the
 * publisher joins them per user.
 *
 * Value, version 1 (varints are zigzag LEB128):
 *   u8 version, u8 kind (0 = data, 1 = retire), committed_at_ms, event_ms
 *   data:   n_sources, n_sources x (topic bytes, partition)
 *           n_items,   n_items x (user bytes, source index, offset, operand bytes)
 *   retire: n, n x (segment_id, retired_before_ms)
 *   member: n, n x (id bytes, master bytes, master_first_seen_ms, epoch_ms)
 *           (identity membership changes, DESIGN §10.6: the publisher sends
 *           each as a MemberEvent to the change partition of its id)
 * event_ms is the oldest input timestamp in the batch (0 = unknown): the
 * start of the event -> delta-published latency. */
#ifndef SEGD_OUTBOX_H
#define SEGD_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "wire/change.h"
#include "wire/member.h"
#include "base/err.h"
#include "core/record.h"

#define SEGD_OUTBOX_VERSION 1
#define SEGD_OUTBOX_MAX_SOURCES 256

/* SEGD_OUTBOX_REPLACE: laid out as a data entry, each item (no source) the
 * user's whole record after a rebuild swap (app/rebuild.h), or an empty
 * operand for a user the swapped-in store does not hold; the publisher
 * sends it as a replacing delta (wire/change.h). */
enum { SEGD_OUTBOX_DATA = 0, SEGD_OUTBOX_RETIRE = 1, SEGD_OUTBOX_MEMBER = 2,
       SEGD_OUTBOX_REPLACE = 3 };

typedef struct segd_outbox_source {
    char topic[256];
    int32_t partition;
} segd_outbox_source_t;

/* Accumulates one batch's entry. */
typedef struct segd_outbox_builder {
    segd_outbox_source_t sources[SEGD_OUTBOX_MAX_SOURCES];
    size_t n_sources;
    segd_buf_t items;
    uint64_t n_items;
    int64_t event_ms;
} segd_outbox_builder_t;

void segd_outbox_builder_init(segd_outbox_builder_t *b);
void segd_outbox_builder_free(segd_outbox_builder_t *b);
void segd_outbox_builder_reset(segd_outbox_builder_t *b);
/* topic NULL = no source. event_ms 0 = unknown. */
segd_err_t segd_outbox_add(segd_outbox_builder_t *b, const char *user, size_t user_len,
                           const uint8_t *operand, size_t operand_len, const char *topic,
                           int32_t partition, int64_t offset, int64_t event_ms);
/* Writes the entry's value into out (replacing its contents). */
segd_err_t segd_outbox_finish(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                              segd_buf_t *out);
/* The same as a SEGD_OUTBOX_REPLACE entry. */
segd_err_t segd_outbox_finish_replace(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                                      segd_buf_t *out);
segd_err_t segd_outbox_retire_value(const segd_retirement_t *r, size_t n,
                                    int64_t committed_at_ms, segd_buf_t *out);
/* A member entry is built in the same builder, but never mixed with data
 * items. It holds one item per membership change: id, master,
 * master_first_seen_ms and epoch_ms. bucket, buckets and committed_at_ms
 * are left for the publisher to fill in. */
segd_err_t segd_outbox_add_member(segd_outbox_builder_t *b, const char *id, size_t id_len,
                                  const char *master, size_t master_len,
                                  int64_t master_first_seen_ms, int64_t epoch_ms);
segd_err_t segd_outbox_finish_members(const segd_outbox_builder_t *b, int64_t committed_at_ms,
                                      segd_buf_t *out);
/* The most changes one member entry holds. One applied link event may
 * re-point identity.max.component ids, and a batch may hold many such
 * events. The publisher reads entries 64 at a time and must get a cycle's
 * events acknowledged in time, so writers cut entries at this size and put
 * several in one WriteBatch when needed. */
#define SEGD_OUTBOX_MAX_MEMBERS 10000

typedef struct segd_outbox_item {
    const char *user;
    size_t user_len;
    uint32_t source; /* index into sources; UINT32_MAX = none */
    int64_t offset;
    const uint8_t *operand;
    size_t operand_len;
} segd_outbox_item_t;

typedef struct segd_outbox_source_ref {
    const char *topic;
    size_t topic_len;
    int32_t partition;
} segd_outbox_source_ref_t;

/* A decoded entry; pointers borrow the value's bytes. */
typedef struct segd_outbox_entry {
    int kind;
    int64_t committed_at_ms, event_ms;
    segd_outbox_source_ref_t *sources;
    size_t n_sources;
    segd_outbox_item_t *items;
    size_t n_items, cap_items;
    segd_retirement_t *retirements;
    size_t n_retirements;
    segd_member_t *members; /* kind member: ids borrow the value's bytes */
    size_t n_members;
} segd_outbox_entry_t;

void segd_outbox_entry_init(segd_outbox_entry_t *e);
void segd_outbox_entry_free(segd_outbox_entry_t *e);
segd_err_t segd_outbox_decode(const uint8_t *data, size_t len, segd_outbox_entry_t *e);

#endif
