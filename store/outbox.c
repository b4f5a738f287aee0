/* The outbox family (DESIGN §5): change deltas written in the same batch as
 * the data they describe, kept until the publisher has them acknowledged.
 * Keys are 8-byte big-endian sequence numbers. This module owns the one
 * appender rule (store.h), the sequence counter and the exact depth. The
 * ingest pipeline or one offline command appends; the publisher scans and
 * deletes. */
#include <pthread.h>
#include <stdatomic.h>

#include "store/store.h"
#include "store/store_impl.h"

uint64_t segd_batch_outbox_append(segd_batch_t *b, const void *value, size_t vlen)
{
    /* Sequence numbers are taken here but written later, with the batch. A
     * second appending thread could therefore land a lower sequence after
     * the publisher has deleted past it. */
    unsigned long me = (unsigned long)pthread_self(), first = 0;
    if (!atomic_compare_exchange_strong(&b->store->outbox_appender, &first, me) &&
        first != me) {
        /* A real check rather than an assert, which release builds compile
         * out. The entry is not appended and the batch refuses to be
         * written. */
        b->outbox_refused = 1;
        return SEGD_OUTBOX_REFUSED;
    }
    uint64_t seq = atomic_fetch_add(&b->store->outbox_seq, 1);
    char key[8];
    put_be64(key, seq);
    rocksdb_writebatch_put_cf(b->wb, b->store->cf[CF_OUTBOX], key, 8, value, vlen);
    b->outbox_delta++;
    return seq;
}

/* Only entries that exist are counted. The publisher deletes whole ranges
 * of sequence numbers, and a batch that was never written leaves a gap. */
void segd_batch_outbox_delete(segd_batch_t *b, uint64_t seq)
{
    segd_store_t *s = b->store;
    char key[8], *rerr = NULL;
    put_be64(key, seq);
    rocksdb_pinnableslice_t *v =
        rocksdb_get_pinned_cf(s->db, s->ropts, s->cf[CF_OUTBOX], key, 8, &rerr);
    /* An unreadable entry is taken as present; the next open counts again. */
    if (v || rerr)
        b->outbox_delta--;
    rocksdb_pinnableslice_destroy(v);
    rocksdb_free(rerr);
    rocksdb_writebatch_delete_cf(b->wb, s->cf[CF_OUTBOX], key, 8);
}

/* Called at open. The next sequence number continues after the last entry
 * left over, and the depth counts the entries left. */
void segd_store_outbox_load(segd_store_t *s)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_OUTBOX]);
    uint64_t next = 1;
    rocksdb_iter_seek_to_last(it);
    if (rocksdb_iter_valid(it)) {
        size_t klen;
        const char *k = rocksdb_iter_key(it, &klen);
        if (klen == 8)
            next = get_be64(k) + 1;
    }
    int64_t depth = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it))
        depth++;
    rocksdb_iter_destroy(it);
    atomic_store(&s->outbox_seq, next);
    atomic_store(&s->outbox_depth, depth);
}

uint64_t segd_store_outbox_next_seq(segd_store_t *s) { return atomic_load(&s->outbox_seq); }

uint64_t segd_store_outbox_depth(segd_store_t *s)
{
    int64_t d = atomic_load(&s->outbox_depth);
    return d > 0 ? (uint64_t)d : 0;
}

segd_err_t segd_store_outbox_scan(segd_store_t *s, uint64_t from_seq, size_t max,
                                  segd_outbox_cb cb, void *ctx, char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_OUTBOX]);
    char from[8];
    put_be64(from, from_seq);
    size_t seen = 0;
    for (rocksdb_iter_seek(it, from, 8); rocksdb_iter_valid(it) && seen < max;
         rocksdb_iter_next(it), seen++) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *v = rocksdb_iter_value(it, &vlen);
        if (klen != 8)
            continue;
        if (cb(ctx, get_be64(k), (const uint8_t *)v, vlen))
            break;
    }
    return segd_store_iter_close(it, "outbox scan", errstr, n);
}
