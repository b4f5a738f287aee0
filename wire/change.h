/* The wire records of segd's outputs, hand-encoded Avro binary (no avro-c on
 * these paths: they run once per changed user and per snapshot record):
 * ChangeEvent (schemas/change_event.avsc, the change stream of DESIGN §5) and
 * SnapshotRecord (schemas/snapshot_record.avsc, DESIGN §6), plus the bucket
 * function both use and the change stream's framings. Decoders take
 * untrusted bytes and never read outside them. Strings in decoded values
 * point into the input buffer (borrowed). */
#ifndef SEGD_CHANGE_H
#define SEGD_CHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "core/profile.h"

#define SEGD_DEFAULT_BUCKETS 32

typedef enum segd_change_kind { SEGD_CHANGE_DELTA = 0, SEGD_CHANGE_RETIRE = 1 } segd_change_kind_t;

typedef struct segd_source_range {
    const char *topic; /* borrowed, not NUL-terminated */
    size_t topic_len;
    int32_t partition;
    int64_t first_offset, last_offset;
} segd_source_range_t;

typedef struct segd_retirement {
    int64_t segment_id; /* or a partner's key, < 0 (core/profile.h) */
    int64_t retired_before_ms;
} segd_retirement_t;

typedef struct segd_change {
    segd_change_kind_t kind;
    const char *user_id; /* borrowed; "" for RETIRE */
    size_t user_id_len;
    int32_t bucket;      /* -1 for RETIRE */
    int32_t buckets;
    segd_profile_t profile; /* owned: erase marker + joined entries */
    segd_retirement_t *retirements; /* owned array */
    size_t n_retirements, cap_retirements;
    segd_source_range_t *sources;   /* owned array of borrowed strings */
    size_t n_sources, cap_sources;
    int64_t committed_at_ms;
} segd_change_t;


/* A DELTA that replaces the user's cached profile instead of joining into
 * it (DESIGN §5, "Replacing deltas"): written for every user a rebuild swap
 * changed, since a join can add to a cache but never take away what the
 * swapped-in store no longer holds. It is marked by a source range of this
 * topic, which no Kafka topic can be named (':' is not allowed there), and
 * not by a new ChangeKind: a new enum symbol would change
 * change_event.avsc's fingerprint and make every deployed cache skip every
 * delta, while a cache that does not know the marker joins the delta as
 * before. Only the first part of a delta cut into parts carries it. */
#define SEGD_CHANGE_REPLACE_TOPIC "segd.control:replace"

/* Adds the replace marker to c (a DELTA). */
segd_err_t segd_change_mark_replace(segd_change_t *c);
/* 1 when c is a replacing DELTA. */
int segd_change_is_replace(const segd_change_t *c);

/* bucket = xxh64(user_id, seed 0) & (buckets - 1); buckets a power of two. */
uint32_t segd_bucket_of(const char *user, size_t len, uint32_t buckets);

void segd_change_init(segd_change_t *c);
void segd_change_free(segd_change_t *c);
/* Empties c (kind DELTA, no entries) keeping its allocations. */
void segd_change_reset(segd_change_t *c);
segd_err_t segd_change_add_source(segd_change_t *c, const char *topic, size_t topic_len,
                                  int32_t partition, int64_t first, int64_t last);
segd_err_t segd_change_add_retirement(segd_change_t *c, int64_t segment_id,
                                      int64_t before_ms);

/* The bytes one entry of c->profile adds to c's encoding: producers cut
 * large deltas into parts that fit a message by this. */
size_t segd_change_entry_bytes(const segd_entry_t *e);

/* Appends the Avro binary body of c to out. */
segd_err_t segd_change_encode(const segd_change_t *c, segd_buf_t *out);
/* Decodes one body that must fill [data, data+len) exactly. */
segd_err_t segd_change_decode(const uint8_t *data, size_t len, segd_change_t *c);

/* The schemas' JSON text, as installed in schemas/ (borrowed, static). */
const char *segd_change_schema_json(void);
const char *segd_snapshot_schema_json(void);

/* SnapshotRecord: appends one record to out. */
segd_err_t segd_snaprec_encode(const char *user, size_t user_len, const segd_profile_t *p,
                               segd_buf_t *out);
/* Decodes one record starting at *pos (advanced past it, < end). *user
 * points into the input and must be strict UTF-8 (base/utf8.h). Entries
 * must be sorted by id with unique ids. */
segd_err_t segd_snaprec_decode(const uint8_t **pos, const uint8_t *end, const char **user,
                               size_t *user_len, segd_profile_t *p);

#endif
