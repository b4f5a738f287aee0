/* Write batches, the store's unit of exactly-once (DESIGN §4): the merges,
 * offsets and outbox entries of one batch reach RocksDB in one WriteBatch
 * with the WAL on, or none of them does. This module owns the batch's life
 * and its write. What goes into meta and the outbox is positions.c's,
 * outbox.c's and floors.c's. A batch belongs to one thread at a time. */
#include <stdlib.h>

#include "store/store.h"
#include "store/store_impl.h"
#include "store/store_int.h"

segd_err_t segd_batch_new(segd_store_t *s, segd_batch_t **out)
{
    segd_batch_t *b = calloc(1, sizeof(*b));
    if (!b)
        return SEGD_ERR_NOMEM;
    b->store = s;
    b->wb = rocksdb_writebatch_create();
    *out = b;
    return SEGD_OK;
}

void segd_batch_destroy(segd_batch_t *b)
{
    if (!b)
        return;
    rocksdb_writebatch_destroy(b->wb);
    free(b);
}

void segd_batch_clear(segd_batch_t *b)
{
    rocksdb_writebatch_clear(b->wb);
    b->outbox_delta = 0;
    b->outbox_refused = 0;
}

size_t segd_batch_count(const segd_batch_t *b) { return (size_t)rocksdb_writebatch_count(b->wb); }

void segd_batch_merge(segd_batch_t *b, const char *user, size_t user_len,
                      const uint8_t *operand, size_t operand_len)
{
    rocksdb_writebatch_merge_cf(b->wb, b->store->cf[CF_PROFILES], user, user_len,
                                (const char *)operand, operand_len);
}

void segd_batch_delete_user(segd_batch_t *b, const char *user, size_t user_len)
{
    rocksdb_writebatch_delete_cf(b->wb, b->store->cf[CF_PROFILES], user, user_len);
}

/* The outbox depth moves only when the write succeeds, by the entries the
 * batch appended minus those it deleted. */
static segd_err_t write_batch(segd_store_t *s, const rocksdb_writeoptions_t *wo,
                              segd_batch_t *b, char *errstr, size_t n)
{
    if (b->outbox_refused)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "write batch: an outbox entry was "
                         "appended from a second thread; a store has one outbox appender");
    if (segd_store_fault_hit(s, SEGD_FAULT_WRITE))
        return segd_errf(SEGD_ERR_IO, errstr, n, "write batch: injected fault");
    segd_err_t err = segd_store_write_wb(s, wo, b->wb, 1, errstr, n);
    if (!err)
        atomic_fetch_add(&s->outbox_depth, b->outbox_delta);
    return err;
}

segd_err_t segd_store_write(segd_store_t *s, segd_batch_t *b, char *errstr, size_t n)
{
    return write_batch(s, s->wopts, b, errstr, n);
}

segd_err_t segd_store_write_sync(segd_store_t *s, segd_batch_t *b, char *errstr, size_t n)
{
    return write_batch(s, s->sync_wopts, b, errstr, n);
}

rocksdb_writebatch_t *segd_batch_writebatch(segd_batch_t *b)
{
    return b->wb;
}
