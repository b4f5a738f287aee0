/* Flushes and manual compactions of the profiles family. A full compaction
 * is also what lets the GC watermark jump to its target (floors.c), because
 * after its first pass every operand has been merged. Called by `segd
 * compact`, by `segd run` before it consumes, by tests and by benchmarks,
 * never beside the store's writers except segd_store_compact_beside_writers. */
#include <inttypes.h>

#include "store/store.h"
#include "store/store_impl.h"

segd_err_t segd_store_flush(segd_store_t *s, char *errstr, size_t n)
{
    if (atomic_load(&s->broken))
        return segd_errf(SEGD_ERR_ABORTED, errstr, n, "store stopped after a failed write");
    char *rerr = NULL;
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    rocksdb_flush_cf(s->db, fo, s->cf[CF_PROFILES], &rerr);
    rocksdb_flushoptions_destroy(fo);
    return rerr ? segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "flush") : SEGD_OK;
}

/* RocksDB's C API returns nothing from a manual compaction. A failed one (a
 * corrupt SST, a full disk) shows only as a new background error, after
 * which RocksDB refuses writes. So the compactions below compare this count
 * before and after, and segd_store_compact_ex also tries a write. */
static uint64_t background_errors(segd_store_t *s)
{
    uint64_t v = 0;
    return rocksdb_property_int(s->db, "rocksdb.background-errors", &v) == 0 ? v : 0;
}

segd_err_t segd_store_compact_beside_writers(segd_store_t *s, char *errstr, size_t n)
{
    uint64_t before = background_errors(s);
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2 /* force */);
    rocksdb_compact_range_cf_opt(s->db, s->cf[CF_PROFILES], co, NULL, 0, NULL, 0);
    rocksdb_compactoptions_destroy(co);
    return background_errors(s) != before
               ? segd_errf(SEGD_ERR_IO, errstr, n, "compaction failed (a background error)")
               : SEGD_OK;
}

segd_err_t segd_store_compact(segd_store_t *s, char *errstr, size_t n)
{
    return segd_store_compact_ex(s, 0, errstr, n);
}

/* Two passes. The first merges operand chains into values, some of them
 * empty, which the filter of that same compaction never sees. The second
 * lets the filter delete what the first left empty, and what lies below the
 * GC watermark that may move between the passes. */
segd_err_t segd_store_compact_ex(segd_store_t *s, int flags, char *errstr, size_t n)
{
    int gc_flags = SEGD_GC_MERGED_ALL |
                   (flags & SEGD_COMPACT_KEEP_HISTORY ? SEGD_GC_KEEP_HISTORY : 0);
    uint64_t before = background_errors(s), corrupt = segd_policy_corrupt_count(s->policy);
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2 /* force */);
    rocksdb_compactoptions_set_exclusive_manual_compaction(co, 1);
    for (int pass = 0; pass < 2 && background_errors(s) == before; pass++) {
        rocksdb_compact_range_cf_opt(s->db, s->cf[CF_PROFILES], co, NULL, 0, NULL, 0);
        /* After the first pass every key is one merged value, so W may take
         * its target. */
        if (pass == 0 && background_errors(s) == before) {
            segd_err_t gerr = segd_store_gc_advance(s, gc_flags, errstr, n);
            if (gerr) {
                rocksdb_compactoptions_destroy(co);
                return gerr;
            }
        }
    }
    rocksdb_compactoptions_destroy(co);
    char why[400];
    if (segd_store_put_meta(s, s->wopts, "compaction-probe", "", 0, 0, why, sizeof(why)))
        return segd_errf(SEGD_ERR_IO, errstr, n, "compaction failed; store stopped: %s", why);
    if (background_errors(s) != before)
        return segd_errf(SEGD_ERR_IO, errstr, n, "compaction failed (a background error)");
    uint64_t bad = segd_policy_corrupt_count(s->policy) - corrupt;
    if (bad)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "%" PRIu64 " records or operands do not decode (kept as they are)",
                         bad);
    return SEGD_OK;
}
