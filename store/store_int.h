/* The store's internals for the store layer's other modules: sst.c writes
 * and ingests SST files with them, identity.c keeps its families with them.
 * store.c, write.c, batch.c and view.c define them. Other layers use only
 * store.h and sst.h. */
#ifndef SEGD_STORE_INT_H
#define SEGD_STORE_INT_H

#include <rocksdb/c.h>
#include <stdint.h>

#include "store/store.h"

/* Borrowed; valid until segd_store_close. */
rocksdb_t *segd_store_rocks(segd_store_t *s);
rocksdb_column_family_handle_t *segd_store_profiles_cf(segd_store_t *s);
rocksdb_column_family_handle_t *segd_store_outbox_cf(segd_store_t *s);
/* The identity graph's families (DESIGN §10.2); NULL in a read-only store
 * written by a segd that had none (read them as empty). */
rocksdb_column_family_handle_t *segd_store_links_cf(segd_store_t *s);
rocksdb_column_family_handle_t *segd_store_ids_cf(segd_store_t *s);
/* The batch's RocksDB WriteBatch, for the store layer's other writers
 * (identity.c puts into links/ids). Borrowed from the batch. */
rocksdb_writebatch_t *segd_batch_writebatch(segd_batch_t *b);
int segd_store_is_read_only(const segd_store_t *s);
/* The profiles family's options (merge operator, table options, no
 * compression): an SST built with them is what the family writes itself. */
const rocksdb_options_t *segd_store_profiles_options(segd_store_t *s);
const rocksdb_readoptions_t *segd_store_read_options(segd_store_t *s);
/* A view's store and read options (its RocksDB snapshot), for the store
 * layer's readers of other families (identity.c's snapshot scan). */
segd_store_t *segd_store_view_store(segd_store_view_t *v);
const rocksdb_readoptions_t *segd_store_view_read_options(segd_store_view_t *v);
/* A view opens for full scans, which must not evict the working set
 * (fill_cache off); a view used for a few point reads (a linked read) fills
 * the block cache as segd_store_get does. */
void segd_store_view_set_fill_cache(segd_store_view_t *v, int fill);

/* SEGD_ERR_ABORTED once a write has failed (write_failed in write.c). */
segd_err_t segd_store_check_writable(segd_store_t *s, char *errstr, size_t errstr_size);
/* SEGD_ERR_IO unless the disk has store.min.free.mb + extra_bytes free
 * (nothing is checked when min_free_mb is 0). */
segd_err_t segd_store_check_space(segd_store_t *s, uint64_t extra_bytes, char *errstr,
                                  size_t errstr_size);
/* After a RocksDB failure that may have left its state doubtful (a failed
 * ingestion's manifest write): a tiny meta write, which RocksDB refuses once
 * it holds a background error; a refusal breaks the store as a failed batch
 * does (SEGD_ERR_ABORTED). SEGD_OK when the store still takes writes. */
segd_err_t segd_store_probe_write(segd_store_t *s, char *errstr, size_t errstr_size);

#endif
