/* MemberEvent (schemas/member_event.avsc): an identity membership change
 * (id -> master) on the change stream, DESIGN §5 and §10. Hand-encoded Avro
 * binary like change.h; decoders take untrusted bytes and never read
 * outside them; strings of a decoded value point into the input (borrowed).
 *
 * A MemberEvent has its own schema (and single-object fingerprint, and
 * Confluent subject `<topic>-segd.MemberEvent`) instead of a new ChangeEvent
 * kind: a new enum symbol would change change_event.avsc's fingerprint and
 * make every deployed cache skip every delta. Its body starts with the int
 * tag -1 (byte 0x01), which no ChangeEvent body starts with, so readers that
 * only have the bytes dispatch on it (segd_member_is_body). */
#ifndef SEGD_MEMBER_H
#define SEGD_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define SEGD_MEMBER_TAG (-1)

typedef struct segd_member {
    const char *id; /* borrowed, not NUL-terminated, 1..256 bytes */
    size_t id_len;
    const char *master; /* borrowed; equal to id when id is its own master */
    size_t master_len;
    int64_t master_first_seen_ms;
    int64_t epoch_ms; /* 0 until the first rebuild; then the last rebuild's */
    int32_t bucket;   /* the change partition of id (encode: set by the publisher) */
    int32_t buckets;
    int64_t committed_at_ms;
} segd_member_t;

/* Whether x beats y in an id's master register (x and y are about the same
 * id). The larger epoch_ms wins, because a rebuild starts a new epoch and
 * may split components. Within an epoch the smaller (master_first_seen_ms,
 * master bytewise) wins: online components only grow and the master rule
 * keeps the oldest, so an id's online masters only decrease. Equal keys
 * give 0, which keeps applying idempotent. bucket, buckets and
 * committed_at_ms take no part. */
int segd_member_wins(const segd_member_t *x, const segd_member_t *y);

/* Appends the Avro binary body of m (tag first) to out. SEGD_ERR_INVALID
 * for an empty id or master. */
segd_err_t segd_member_encode(const segd_member_t *m, segd_buf_t *out);
/* Decodes one body that must fill [data, data+len) exactly; the tag must be
 * SEGD_MEMBER_TAG, id and master non-empty strict UTF-8 of at most 256
 * bytes. SEGD_ERR_DECODE otherwise. */
segd_err_t segd_member_decode(const uint8_t *data, size_t len, segd_member_t *m);
/* Decodes the body starting at *pos (records back to back, as in a
 * container file's block) and moves *pos past it; the same rules. */
segd_err_t segd_member_decode_next(const uint8_t **pos, const uint8_t *end, segd_member_t *m);
/* Whether an unframed body is a MemberEvent's (its first byte is the tag),
 * not a ChangeEvent's. */
int segd_member_is_body(const uint8_t *data, size_t len);

/* The schema's JSON text, as installed in schemas/ (borrowed, static). */
const char *segd_member_schema_json(void);

#endif
