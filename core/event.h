/* SegmentEvent (schemas/segment_event.avsc) in memory, its validation against
 * the DESIGN §2 limits, and its translation into a store merge operand.
 * Decoders (JSON lines, Avro) fill a segd_event_t; everything after them
 * works on validated events only. */
#ifndef SEGD_EVENT_H
#define SEGD_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/profile.h"

#define SEGD_MAX_USER_ID 256

typedef enum segd_op {
    SEGD_OP_UPSERT = 0,
    SEGD_OP_REMOVE = 1,
    SEGD_OP_ERASE_USER = 2,
} segd_op_t;

/* The user id reserved for store-wide retirements through the log (DESIGN
 * 3.2, consumer/apply.h): valid only with op REMOVE. */
#define SEGD_CONTROL_RETIRE_USER "segd.control:retire"
/* Likewise for partner retirements: each segment entry's partner_id names a
 * retired partner (its segment_id is ignored). */
#define SEGD_CONTROL_RETIRE_PARTNER_USER "segd.control:retire-partner"

typedef struct segd_seg_update {
    int64_t segment_id;
    int32_t ttl_s;
    int32_t flags;
    int32_t partner_id;
} segd_seg_update_t;

typedef struct segd_event {
    char user_id[SEGD_MAX_USER_ID + 1]; /* NUL-terminated copy */
    size_t user_id_len;
    int64_t ts_ms;
    segd_op_t op;
    segd_seg_update_t *segments; /* owned, grows; reused across events */
    size_t n_segments;
    size_t cap_segments;
    char source[128]; /* "" when null */
} segd_event_t;

typedef struct segd_limits {
    size_t max_segments;   /* default 4096 */
    size_t max_user_id;    /* default 256 */
    size_t max_message;    /* default 1 MiB */
    int64_t max_clock_skew_ms; /* ts_ms above now + this is refused; default 10 min */
} segd_limits_t;

void segd_limits_default(segd_limits_t *l);

void segd_event_init(segd_event_t *ev);
void segd_event_free(segd_event_t *ev);
/* Resets for reuse, keeping the segments allocation. */
void segd_event_reset(segd_event_t *ev);
segd_err_t segd_event_set_user(segd_event_t *ev, const char *id, size_t len);
segd_err_t segd_event_add_segment(segd_event_t *ev, const segd_seg_update_t *u);

/* Checks DESIGN §2: user id 1..max bytes of strict UTF-8 without NUL, ts_ms > 0, segment ids >= 0,
 * UPSERT ttl_s > 0, at most max_segments, ERASE_USER without segments.
 * Returns SEGD_ERR_LIMIT or SEGD_ERR_INVALID with a reason in errstr. */
segd_err_t segd_event_validate(const segd_event_t *ev, const segd_limits_t *lim,
                               char *errstr, size_t errstr_size);

/* Builds the merge operand profile of a validated event (entries sorted,
 * duplicates in one event joined). granularity_s is the expiry rounding. */
segd_err_t segd_event_to_profile(const segd_event_t *ev, int64_t granularity_s,
                                 segd_profile_t *out);

const char *segd_op_name(segd_op_t op);
int segd_op_parse(const char *s, segd_op_t *op);

#endif
