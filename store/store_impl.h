/* The layout of the store's handles and the helpers that the modules
 * implementing store.h share: store.c (open, close, options), write.c,
 * floors.c, batch.c, outbox.c, positions.c, view.c, compact.c, stats.c,
 * instance.c and faults.c. Include it only from those files. The store
 * layer's other modules (sst.c, identity.c) use store_int.h's accessors
 * instead, so the handle's fields can change without touching them. */
#ifndef SEGD_STORE_IMPL_H
#define SEGD_STORE_IMPL_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* The column families, in the order RocksDB opens them. The first
 * SEGD_STORE_FAMILIES from CF_PROFILES on are the ones the metrics show. */
enum { CF_DEFAULT, CF_PROFILES, CF_META, CF_OUTBOX, CF_LINKS, CF_IDS, CF_COUNT };
extern const char *const segd_store_cf_names[CF_COUNT];

struct import_floor; /* floors.c */

struct segd_store {
    rocksdb_t *db;
    rocksdb_options_t *db_opts;
    rocksdb_options_t *cf_opts[CF_COUNT];
    rocksdb_column_family_handle_t *cf[CF_COUNT];
    rocksdb_block_based_table_options_t *table_opts;
    rocksdb_cache_t *cache;
    rocksdb_env_t *env; /* the default env, its compaction threads at low CPU priority */
    rocksdb_writeoptions_t *wopts;
    rocksdb_readoptions_t *ropts;
    segd_policy_t *policy;
    rocksdb_compactionfilterfactory_t *(*filter_factory)(segd_policy_t *policy);
    int64_t granularity_s;
    int read_only;
    char *path;               /* for the free-space check */
    const segd_log_t *log;    /* borrowed from the opts */
    uint64_t min_free_bytes;  /* writes wait below this much free disk */
    int (*disk_avail)(void *ctx, const char *path, uint64_t *avail_bytes);
    void *disk_avail_ctx;
    /* Set once a write has failed. The store then takes no more writes and
     * close leaves the DB unclosed (write.c says why). */
    atomic_int broken;
    /* The GC watermark's state (floors.c). gc_moved_ms is the policy time
     * of the open or of the last gc_advance; gc_horizon_ms is the largest
     * horizon W was ever moved with (kept in meta). */
    int64_t gc_moved_ms;
    int64_t gc_horizon_ms;
    int64_t gc_start_floor_ms, gc_start_open_ms; /* W's start phase */
    /* Synced writes: W must be on disk before any compaction uses it. */
    rocksdb_writeoptions_t *sync_wopts;
    /* Import floors per (topic, partition), the W of each restored unit.
     * The restorer raises them while ingest reads them, hence the lock. */
    pthread_mutex_t floors_lock;
    struct import_floor *floors;
    size_t n_floors, cap_floors;
    /* The outbox (outbox.c). outbox_appender is the one thread allowed to
     * append (store.h says why), 0 until the first append. outbox_depth is
     * counted at open and then moved by every successful write by the
     * entries it appended and deleted. */
    _Atomic uint64_t outbox_seq; /* the next sequence number */
    atomic_ulong outbox_appender;
    _Atomic int64_t outbox_depth;
    struct {
        _Atomic uint64_t calls, nth, times;
    } fault[SEGD_FAULTS];
};

struct segd_store_view {
    segd_store_t *store;
    const rocksdb_snapshot_t *snap;
    rocksdb_readoptions_t *ropts;
};

struct segd_batch {
    segd_store_t *store;
    rocksdb_writebatch_t *wb;
    int64_t outbox_delta; /* outbox entries added minus deleted */
    /* Set when an append broke the one-appender rule. Such a batch cannot
     * be written until it is cleared. */
    int outbox_refused;
};

/* Keys and values in meta hold integers as 8 big-endian bytes. */
static inline void put_be64(char *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (char)(v & 0xff);
}

static inline uint64_t get_be64(const char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | (uint8_t)b[i];
    return v;
}

/* Reports a RocksDB error as code with "what: <rocksdb's message>" and
 * frees rerr. Returns code. */
segd_err_t segd_store_rocks_err(char *rerr, segd_err_t code, char *errstr, size_t n,
                                const char *what);

/* Destroys it and reports the error it ended on, if any, as SEGD_ERR_IO
 * with "what: <rocksdb's message>". */
segd_err_t segd_store_iter_close(rocksdb_iterator_t *it, const char *what, char *errstr,
                                 size_t n);

/* Reads one meta key (store.c). *val is RocksDB's, freed with rocksdb_free.
 * SEGD_ERR_NOTFOUND when the key is absent. */
segd_err_t segd_store_meta_get(segd_store_t *s, const char *key, size_t klen, char **val,
                               size_t *vlen, char *errstr, size_t n);
/* An 8-byte meta integer through ro. SEGD_ERR_NOTFOUND when the key is
 * absent, and SEGD_ERR_CORRUPT, with errstr left to the caller, when the
 * value is not 8 bytes. *out is written only on success. */
segd_err_t segd_store_meta_get_be64(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                    const char *key, size_t klen, int64_t *out, char *errstr,
                                    size_t n);
/* An 8-byte meta integer, 0 when the key is absent; through ro (a view's
 * snapshot) or the store's own read options. */
segd_err_t segd_store_meta_get_i64_at(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                      const char *key, int64_t *out, char *errstr, size_t n);
segd_err_t segd_store_meta_get_i64(segd_store_t *s, const char *key, int64_t *out,
                                   char *errstr, size_t n);

/* The one path every write takes (write.c). reserve says whether the write
 * waits for store.min.free.mb. */
segd_err_t segd_store_write_wb(segd_store_t *s, const rocksdb_writeoptions_t *wo,
                               rocksdb_writebatch_t *wb, int reserve, char *errstr, size_t n);
segd_err_t segd_store_put_meta(segd_store_t *s, const rocksdb_writeoptions_t *wo,
                               const char *key, const void *val, size_t vlen, int reserve,
                               char *errstr, size_t n);

/* Read at open, in this order, by segd_store_open. */
segd_err_t segd_store_floors_load(segd_store_t *s, char *errstr, size_t n); /* floors.c */
void segd_store_outbox_load(segd_store_t *s);                              /* outbox.c */
/* Frees the import floors table (close). */
void segd_store_floors_free(segd_store_t *s);

/* Calls cb(ctx, key suffix, value) for the meta keys that start with
 * prefix, through the view (view.c); cb returns non-zero to stop. */
typedef int (*segd_meta_cb)(void *ctx, const char *suffix, size_t slen, const char *val,
                            size_t vlen);
segd_err_t segd_store_view_meta(segd_store_view_t *v, const char *prefix, segd_meta_cb cb,
                                void *ctx, char *errstr, size_t n);
/* The ctx of such a walk: the caller's public callback and its context,
 * handed to the module that decodes each entry. */
typedef struct segd_meta_walk {
    union {
        segd_position_cb position;
        segd_retired_cb retired;
    } cb;
    void *ctx;
} segd_meta_walk_t;

#endif
