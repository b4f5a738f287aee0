/* LinkEvent (schemas/link_event.avsc, DESIGN §10.1) on the wire: Avro binary
 * in the framings of DESIGN §2 and JSON lines, both ways. The writer schema
 * of a Confluent or single-object frame must be the local schema (by its
 * CRC-64-AVRO fingerprint): link events are not resolved across schema
 * evolutions yet, so any other writer schema is refused as incompatible.
 * Decoded ids point into the caller's buffer (no copy). */
#ifndef SEGD_LINK_EVENT_WIRE_H
#define SEGD_LINK_EVENT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "wire/avro_codec.h"

typedef enum segd_wire_link_op { SEGD_WIRE_LINK = 0, SEGD_WIRE_UNLINK = 1 } segd_wire_link_op_t;

/* A link event as read; id_a, id_b and source borrow the decoded buffer
 * (JSON: the decoder's own copy, valid until the next decode). */
typedef struct segd_wire_link {
    const char *id_a, *id_b, *source; /* source NULL = null */
    size_t id_a_len, id_b_len, source_len;
    segd_wire_link_op_t op;
    int64_t ts_ms;
    double weight;
} segd_wire_link_t;

typedef struct segd_link_codec segd_link_codec_t;

/* registry may be NULL (Confluent frames then fail); copied, ctx borrowed. */
segd_err_t segd_link_codec_new(segd_link_codec_t **out, const segd_schema_source_t *registry,
                               char *errstr, size_t errstr_size);
void segd_link_codec_destroy(segd_link_codec_t *c);

/* Decodes one message. SEGD_ERR_DECODE with a short stable reason for bad
 * bytes, SEGD_ERR_SCHEMA for an unknown or other writer schema,
 * SEGD_ERR_HTTP while the registry is unreachable (retry). Never reads
 * outside [buf, buf + len); the ids are not checked here (see
 * segd_link_event_check in store/identity.h). */
segd_err_t segd_link_decode(segd_link_codec_t *c, segd_framing_t framing, const void *buf,
                            size_t len, segd_wire_link_t *ev, char *errstr,
                            size_t errstr_size);

/* One JSON object {"id_a","id_b","op","ts_ms","weight"?,"source"?}. */
segd_err_t segd_link_json_parse(segd_link_codec_t *c, const char *line, size_t len,
                                segd_wire_link_t *ev, char *errstr, size_t errstr_size);

/* Encodes ev with the local schema in framing (RAW, SINGLE_OBJECT, or
 * CONFLUENT with schema_id) into out, replacing its contents. */
segd_err_t segd_link_encode(const segd_wire_link_t *ev, segd_framing_t framing,
                            int32_t schema_id, segd_buf_t *out);

#endif
