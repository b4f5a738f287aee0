/* SnapshotNativeRecord (schemas/snapshot_native.avsc, snapshot.format =
 * native, DESIGN §6): {user_id: string, record: bytes}, where record is the
 * store's own profile record encoding (core/record.h, docs/record-format.md),
 * hand-encoded Avro binary like change.h. The exporter writes exactly the
 * profile the avro format would carry; decoders take untrusted bytes, never
 * read outside them, and accept what segd_snaprec_decode accepts. */
#ifndef SEGD_SNAP_NATIVE_H
#define SEGD_SNAP_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "core/record.h"

/* Appends one record whose profile bytes are rec (already the record
 * encoding, copied). */
segd_err_t segd_snapnat_append(const char *user, size_t user_len, const uint8_t *rec,
                               size_t rec_len, segd_buf_t *out);

/* Appends one record holding segd_record_encode(p); tmp is scratch. */
segd_err_t segd_snapnat_encode(const char *user, size_t user_len, const segd_profile_t *p,
                               segd_buf_t *tmp, segd_buf_t *out);

/* An exporter lane's state for writing stored values as records. */
typedef struct segd_snapnat_writer {
    segd_prune_t rule;        /* the export's pruning rule (complete = 1) */
    int copy;                 /* copy values that need no pruning (default) */
    segd_profile_t p;         /* scratch */
    segd_buf_t tmp;           /* scratch */
    uint64_t copied, encoded; /* records written as read / re-encoded */
} segd_snapnat_writer_t;

void segd_snapnat_writer_init(segd_snapnat_writer_t *w, const segd_prune_t *rule, int copy);
void segd_snapnat_writer_free(segd_snapnat_writer_t *w);

/* Writes what an exporter writes for one stored value (the store's merged
 * bytes): the profile that segd_profile_prune(decode(value), rule) gives,
 * as one record, or nothing when that profile is empty (*written = 0).
 * *entries receives its entry count.
 * With w->copy, the value is written as read when its head proves that
 * pruning changes nothing (segd_record_head_unpruned), or when pruning the
 * decoded profile changed nothing. That is safe because the reader decodes
 * the same profile and segd_record_encode is deterministic, so the bytes
 * equal a re-encoding (tests/unit/wire/test_snap_native.c). Only a head-proven copy
 * skips the decode, and its checksum and head are still checked. A value
 * that does not decode is SEGD_ERR_CORRUPT. */
segd_err_t segd_snapnat_export(segd_snapnat_writer_t *w, const char *user, size_t user_len,
                               const uint8_t *value, size_t value_len, segd_buf_t *out,
                               uint64_t *entries, int *written);

/* Reads one record at *pos (advanced past it on success, < end) without
 * decoding its profile: *user (strict UTF-8, checked) and *rec point into
 * the input. */
segd_err_t segd_snapnat_decode_raw(const uint8_t **pos, const uint8_t *end, const char **user,
                                   size_t *user_len, const uint8_t **rec, size_t *rec_len);

/* Reads one record and decodes its profile into p. On SEGD_ERR_CORRUPT,
 * *user is set (non-NULL) when the user id was readable, so a reader can name
 * whose record is damaged. Entries are sorted by id, unique, with
 * expiry_s >= 0, as in SnapshotRecord. */
segd_err_t segd_snapnat_decode(const uint8_t **pos, const uint8_t *end, const char **user,
                               size_t *user_len, segd_profile_t *p);

#endif
