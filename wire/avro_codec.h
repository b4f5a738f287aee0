/* SegmentEvent Avro binary <-> segd_event_t, in the three framings of DESIGN
 * §2 (Confluent, single-object, raw), with writer-schema resolution against
 * the local reader schema (schemas/segment_event.avsc): one cached resolver
 * per writer schema, and reader defaults filled for fields a writer lacks
 * (avro-c's resolver refuses those). Also Avro object container files of
 * SegmentEvent for backfill. Built on avro-c's generic value API. */
#ifndef SEGD_AVRO_CODEC_H
#define SEGD_AVRO_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/event.h"
#include "core/record.h"

typedef enum segd_framing {
    SEGD_FRAMING_CONFLUENT,     /* 0x00 + u32 BE schema id + binary */
    SEGD_FRAMING_SINGLE_OBJECT, /* 0xC3 0x01 + u64 LE CRC-64-AVRO fingerprint + binary */
    SEGD_FRAMING_RAW,           /* binary against the local schema */
    SEGD_FRAMING_AUTO,          /* by the first bytes */
} segd_framing_t;

typedef struct segd_avro_codec segd_avro_codec_t;

/* Where Confluent schema ids are resolved: the registry client
 * (segd_registry_lookup in transport/registry.h) or a test's table. lookup
 * fills *json, which stays borrowed for the source's life. It returns
 * SEGD_ERR_NOTFOUND for an unknown id and SEGD_ERR_HTTP while the registry
 * is unreachable, which the caller retries later. */
typedef segd_err_t (*segd_schema_lookup_fn)(void *ctx, int32_t id, const char **json,
                                            char *errstr, size_t errstr_size);
typedef struct segd_schema_source {
    segd_schema_lookup_fn lookup;
    void *ctx;
} segd_schema_source_t;

/* reader_json NULL = schemas/segment_event.avsc, compiled in. registry may be
 * NULL (then Confluent frames fail to decode); it is copied, its ctx
 * borrowed. Not thread-safe. */
segd_err_t segd_avro_codec_new(segd_avro_codec_t **out, const char *reader_json,
                               const segd_schema_source_t *registry, char *errstr,
                               size_t errstr_size);
void segd_avro_codec_destroy(segd_avro_codec_t *c);

/* Decoding stops with SEGD_ERR_LIMIT ("more than N segments") once an event
 * has more than lim->max_segments segments; without this call there is no
 * such limit and segd_event_validate is the only check. lim is copied. */
void segd_avro_codec_set_limits(segd_avro_codec_t *c, const segd_limits_t *lim);

/* The reader schema's JSON (borrowed). */
const char *segd_avro_codec_reader_json(const segd_avro_codec_t *c);

/* Makes a writer schema known to single-object decoding by its fingerprint. */
segd_err_t segd_avro_codec_add_schema(segd_avro_codec_t *c, const char *writer_json,
                                      char *errstr, size_t errstr_size);

/* Decodes one message into ev, which is reset first. Bad input is
 * SEGD_ERR_DECODE with a short, stable reason that becomes the DLQ's
 * segd.error ("bad magic byte", "truncated confluent header", "truncated or
 * malformed avro", "trailing bytes"). A schema problem is SEGD_ERR_SCHEMA
 * ("unknown schema id 42", "unknown schema fingerprint <hex>",
 * "incompatible writer schema id 42"). Too many segments, or a user id over
 * SEGD_MAX_USER_ID bytes, is SEGD_ERR_LIMIT. SEGD_ERR_HTTP means the
 * registry is down; that is not bad input, and the caller retries later.
 * With AUTO framing, a first byte 0x00 means Confluent, 0xC3 0x01 single
 * object, anything else raw. The event's contents are not validated here
 * (segd_event_validate does that), but the Avro body must be consumed
 * exactly. Never reads outside [buf, buf + len). */
segd_err_t segd_avro_decode(segd_avro_codec_t *c, segd_framing_t framing, const void *buf,
                            size_t len, segd_event_t *ev, char *errstr, size_t errstr_size);

/* Decodes, on the fast path, the record at the start of [buf, buf + len)
 * that was written with the local schema itself (a container file whose
 * writer schema has the local fingerprint). *used is the record's size in
 * bytes whenever it could be read through, which includes SEGD_ERR_LIMIT
 * for a too long user id, so the caller can go on with the next record.
 * Otherwise *used is 0, because the rest of the block cannot be framed. */
segd_err_t segd_avro_decode_local_prefix(segd_avro_codec_t *c, const void *buf, size_t len,
                                         size_t *used, segd_event_t *ev, char *errstr,
                                         size_t errstr_size);
/* CRC-64-AVRO fingerprint of the local (reader) schema. */
uint64_t segd_avro_codec_fingerprint(const segd_avro_codec_t *c);

/* Tests: decode the local schema through avro-c's generic values instead of
 * the hand-written fast path, to compare the two. */
void segd_avro_codec_set_generic_only(segd_avro_codec_t *c, int on);

/* Encodes ev with the reader schema into out (replacing its contents). */
segd_err_t segd_avro_encode(segd_avro_codec_t *c, segd_framing_t framing, int32_t schema_id,
                            const segd_event_t *ev, segd_buf_t *out);

/* CRC-64-AVRO of the schema's Parsing Canonical Form. */
segd_err_t segd_avro_fingerprint(const char *schema_json, uint64_t *fp);

/* Calls cb for each record of an Avro container file of SegmentEvent
 * (numbered from 1) with decode_error NULL, or set (and ev unusable) when the
 * record does not map to a SegmentEvent; cb returns non-zero to stop. */
segd_err_t segd_avro_file_foreach(const char *path,
                                  int (*cb)(void *ctx, const segd_event_t *ev, long record_no,
                                            const char *decode_error),
                                  void *ctx, char *errstr, size_t errstr_size);

typedef struct segd_avro_file_writer segd_avro_file_writer_t;
segd_err_t segd_avro_file_writer_open(segd_avro_file_writer_t **out, const char *path,
                                      char *errstr, size_t errstr_size);
segd_err_t segd_avro_file_writer_append(segd_avro_file_writer_t *w, const segd_event_t *ev);
segd_err_t segd_avro_file_writer_close(segd_avro_file_writer_t *w);

#endif
