/* Profile record: the byte encoding of a profile (core/profile.h) and what
 * a record's head says without decoding it. Pure C, no RocksDB: the merge
 * operator, the compaction filter, snapshots and the edge cache all share
 * it. An encoded empty profile is the empty byte string. */
#ifndef SEGD_RECORD_H
#define SEGD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "core/profile.h"

#define SEGD_RECORD_VERSION 1

/* Encodes p (sorted, unique ids) into out, replacing its contents. An empty
 * profile (no entries, no erase marker) encodes to zero bytes. */
segd_err_t segd_record_encode(const segd_profile_t *p, segd_buf_t *out);

/* Decodes an untrusted buffer into p (its previous entries are replaced).
 * Returns SEGD_ERR_CORRUPT for anything not produced by segd_record_encode;
 * never reads outside [data, data+len). */
segd_err_t segd_record_decode(const uint8_t *data, size_t len, segd_profile_t *p);

/* What an encoded record's head says without decoding its entries
 * (docs/record-format.md). It gives the erase marker, the entry count, the
 * smallest ts_ms of an entry (the first tuple of its sorted dictionary) and
 * a lower bound of the entries' expiry_s (the smallest relative expiry
 * added to the smallest ts). That bound is exact for records that
 * segd_record_encode wrote. */
typedef struct segd_record_head {
    int64_t erased_before_ms;
    uint64_t n;
    int64_t min_ts_ms;    /* INT64_MAX when n = 0 */
    int64_t min_expiry_s; /* INT64_MAX when n = 0; INT64_MIN when unknown */
} segd_record_head_t;

/* Checks the record's checksum and reads its head; SEGD_ERR_CORRUPT when
 * either is bad (the rest is checked by segd_record_decode only). The empty
 * record (len 0) is the empty profile. */
segd_err_t segd_record_head(const uint8_t *data, size_t len, segd_record_head_t *h);

/* 1 when segd_profile_prune(p, rule) leaves unchanged every profile p with
 * this head: no entry at or below the erase marker or a retirement, none
 * below the GC watermark (an erase marker always stays). 0 says nothing (decode
 * and prune to know). */
int segd_record_head_unpruned(const segd_record_head_t *h, const segd_prune_t *rule);

#endif
