/* Bulk writes that bypass the WAL and the memtable (issue 10, DESIGN §4):
 * SST files for the `profiles` family built with that family's own options,
 * their ingestion in one call, and the two reads a bulk load decides with
 * (is the family empty, is this user present). Called by load/bulk.c; the
 * caller holds the store alone (the RocksDB LOCK keeps other processes out,
 * and nothing else in the process may write while it loads). */
#ifndef SEGD_SST_H
#define SEGD_SST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

typedef struct segd_sst_writer segd_sst_writer_t;

/* Creates the SST file path (truncated if it exists) for s's profiles
 * family. The writer borrows s until segd_sst_writer_destroy. */
segd_err_t segd_sst_writer_open(segd_store_t *s, const char *path, segd_sst_writer_t **out,
                                char *errstr, size_t errstr_size);
/* Adds key -> value (a profile record, as a full merge would store it).
 * Keys must be strictly increasing in bytewise order (the family's
 * comparator): an equal or smaller key is SEGD_ERR_INVALID and nothing is
 * added. Bytes are copied. */
segd_err_t segd_sst_writer_put(segd_sst_writer_t *w, const char *key, size_t klen,
                               const uint8_t *val, size_t vlen, char *errstr,
                               size_t errstr_size);
/* The same, but key gets value as a merge operand (joined with whatever the
 * store holds or gets meanwhile, §3): for loads beside other writers. */
segd_err_t segd_sst_writer_merge(segd_sst_writer_t *w, const char *key, size_t klen,
                                 const uint8_t *val, size_t vlen, char *errstr,
                                 size_t errstr_size);
/* Entries and key + value bytes added so far. */
uint64_t segd_sst_writer_entries(const segd_sst_writer_t *w);
uint64_t segd_sst_writer_bytes(const segd_sst_writer_t *w);
/* Writes the file's index and footer. At least one entry must have been
 * added (RocksDB makes no empty SST). *file_bytes (may be NULL) gets its size. */
segd_err_t segd_sst_writer_finish(segd_sst_writer_t *w, uint64_t *file_bytes, char *errstr,
                                  size_t errstr_size);
/* Frees the writer; an unfinished file stays on disk for the caller to remove. */
void segd_sst_writer_destroy(segd_sst_writer_t *w);

/* Ingests finished SST files (sorted, non-overlapping) into the profiles
 * family in one atomic step, moving (hard-linking) them into the store.
 * Keys written with put must not be present in the store (a put replaces
 * what the store has: only users segd_store_user_present called absent,
 * with no writer in between); keys written with merge may be anywhere. Refused like a write: SEGD_ERR_ABORTED on a broken
 * store, SEGD_ERR_IO below the free-disk reserve. A failure leaves the store
 * as it was (SEGD_ERR_IO) unless RocksDB went into its error state, which
 * breaks the store as a failed batch does (SEGD_ERR_ABORTED). On success
 * the paths are gone (moved); on failure they are left to the caller. */
segd_err_t segd_store_ingest(segd_store_t *s, const char *const *paths, size_t n,
                             char *errstr, size_t errstr_size);

/* *present = 1 when the store holds anything under user in the profiles
 * family: a record, merge operands, an empty record, a record that does not
 * decode (no decoding is attempted). SEGD_ERR_IO when it cannot tell. */
segd_err_t segd_store_user_present(segd_store_t *s, const char *user, size_t user_len,
                                   int *present, char *errstr, size_t errstr_size);
/* *empty = 1 when the profiles family has no key at all. */
segd_err_t segd_store_profiles_empty(segd_store_t *s, int *empty, char *errstr,
                                     size_t errstr_size);

/* Flushes the outbox family's memtable to a file and waits: a bulk load
 * writes every user's delta there, which would otherwise stay in memtables
 * (up to 2 x 64 MiB) outside the load's memory budget. */
segd_err_t segd_store_outbox_flush(segd_store_t *s, char *errstr, size_t errstr_size);

/* The store's directory (borrowed, valid until close). */
const char *segd_store_path(segd_store_t *s);
/* SEGD_ERR_IO unless the store's disk has store.min.free.mb + bytes free;
 * SEGD_ERR_ABORTED on a broken store. */
segd_err_t segd_store_reserve_check(segd_store_t *s, uint64_t bytes, char *errstr,
                                    size_t errstr_size);

#endif
