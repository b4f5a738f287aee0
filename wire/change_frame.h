/* The change stream's message framings (DESIGN §5): single-object (0xC3
 * 0x01 + the CRC-64-AVRO fingerprint of the body's schema, little endian)
 * or Confluent (0x00 + u32 big-endian registry id) before a ChangeEvent
 * body (change.h) or a MemberEvent body (member.h, DESIGN §10.6). */
#ifndef SEGD_CHANGE_FRAME_H
#define SEGD_CHANGE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef enum segd_change_framing {
    SEGD_CHANGE_SINGLE_OBJECT, /* 0xC3 0x01 + CRC-64-AVRO fingerprint (LE) */
    SEGD_CHANGE_CONFLUENT,     /* 0x00 + u32 BE registry id */
} segd_change_framing_t;

typedef enum segd_frame_kind {
    SEGD_FRAME_CHANGE, /* change_event.avsc */
    SEGD_FRAME_MEMBER, /* member_event.avsc */
} segd_frame_kind_t;

/* Writes the framing header into out (appending): the single-object
 * fingerprint of change_event.avsc, or 0x00 + schema_id for Confluent. */
segd_err_t segd_change_frame(segd_change_framing_t f, int32_t schema_id, segd_buf_t *out);
/* The same for a body of either kind. Single-object framing writes that
 * kind's schema fingerprint; Confluent writes schema_id, which must be the
 * id registered for that kind. */
segd_err_t segd_frame(segd_frame_kind_t kind, segd_change_framing_t f, int32_t schema_id,
                      segd_buf_t *out);
/* Skips either header (detected by its first bytes) and checks the
 * fingerprint or (when expected_id >= 0) the Confluent id. *body points
 * into data. */
segd_err_t segd_change_unframe(const uint8_t *data, size_t len, int32_t expected_id,
                               const uint8_t **body, size_t *body_len);
/* The reader of a change topic that carries both kinds: skips either
 * header and says which schema the body is of. A single-object header may
 * carry either fingerprint. A Confluent id must equal change_id or
 * member_id; an expected id of -1 (not looked up) accepts any id other
 * than the other kind's, and then the body's first byte
 * (segd_member_is_body) decides. In every case the kind must agree with
 * that byte, else the result is SEGD_ERR_DECODE. */
segd_err_t segd_change_unframe_kind(const uint8_t *data, size_t len, int32_t change_id,
                                    int32_t member_id, const uint8_t **body, size_t *body_len,
                                    segd_frame_kind_t *kind);

#endif
