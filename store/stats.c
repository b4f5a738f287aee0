/* The store's figures. RocksDB's properties per column family and the block
 * cache's use feed the metrics (app/health.c). segd_store_stats counts
 * users, live segments and corrupt records in one full scan of the profiles
 * family, for `segd stats` and the benchmarks, and judges whether its bytes
 * per live segment mean anything (not while writes sit unflushed, not when
 * per-file overheads dominate). Everything here only reads. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/store_impl.h"

const char *segd_store_family_name(int family)
{
    return family >= 0 && family < SEGD_STORE_FAMILIES
               ? segd_store_cf_names[CF_PROFILES + family]
               : "db";
}

int segd_store_property(segd_store_t *s, int family, const char *name, uint64_t *value)
{
    if (family < 0)
        return rocksdb_property_int(s->db, name, value) ? -1 : 0;
    if (family >= SEGD_STORE_FAMILIES)
        return -1;
    return rocksdb_property_int_cf(s->db, s->cf[CF_PROFILES + family], name, value) ? -1 : 0;
}

char *segd_store_property_text(segd_store_t *s, int family, const char *name)
{
    if (family >= SEGD_STORE_FAMILIES)
        return NULL;
    char *v = family < 0 ? rocksdb_property_value(s->db, name)
                         : rocksdb_property_value_cf(s->db, s->cf[CF_PROFILES + family], name);
    char *out = v ? strdup(v) : NULL;
    rocksdb_free(v);
    return out;
}

void segd_store_block_cache(segd_store_t *s, uint64_t *usage, uint64_t *capacity)
{
    *usage = s->cache ? rocksdb_cache_get_usage(s->cache) : 0;
    *capacity = s->cache ? rocksdb_cache_get_capacity(s->cache) : 0;
}

typedef struct stats_ctx {
    segd_store_stats_t *st;
    segd_prune_t rule;
} stats_ctx_t;

static int stats_cb(void *ctx, const char *user, size_t user_len, const segd_profile_t *p)
{
    (void)user, (void)user_len;
    stats_ctx_t *c = ctx;
    uint64_t live = 0;
    for (size_t i = 0; i < p->n; i++)
        live += (uint64_t)segd_entry_live(&p->entries[i], p->erased_before_ms, &c->rule);
    c->st->records++;
    c->st->users += live > 0;
    c->st->live_segments += live;
    c->st->stored_entries += p->n;
    return 0;
}

/* A figure summed over the profiles family's SST files from RocksDB's table
 * properties ("...; # entries=N; ...; data block size=N; ..."); 0 when
 * RocksDB does not say. */
static uint64_t table_property(const char *props, const char *name)
{
    const char *p = props ? strstr(props, name) : NULL;
    return p ? strtoull(p + strlen(name), NULL, 10) : 0;
}

/* The data blocks are what the records take, without the per-file index,
 * filter, properties and footer. */
static void sst_figures(segd_store_t *s, segd_store_stats_t *st)
{
    rocksdb_property_int_cf(s->db, s->cf[CF_PROFILES], "rocksdb.total-sst-files-size",
                            &st->sst_bytes);
    char *v = rocksdb_property_value_cf(s->db, s->cf[CF_PROFILES],
                                        "rocksdb.aggregated-table-properties");
    st->sst_entries = table_property(v, "# entries=");
    st->sst_data_bytes = table_property(v, "data block size=");
    rocksdb_free(v);
}

/* What the profiles family holds outside its SST files: a store read
 * before its first flush (or a read-only open, which replays the WAL into
 * memtables) has part or all of its data there. */
static void memtable_figures(segd_store_t *s, segd_store_stats_t *st)
{
    uint64_t active = 0, immutable = 0;
    rocksdb_column_family_handle_t *cf = s->cf[CF_PROFILES];
    rocksdb_property_int_cf(s->db, cf, "rocksdb.cur-size-all-mem-tables", &st->memtable_bytes);
    rocksdb_property_int_cf(s->db, cf, "rocksdb.num-entries-active-mem-table", &active);
    rocksdb_property_int_cf(s->db, cf, "rocksdb.num-entries-imm-mem-tables", &immutable);
    st->memtable_entries = active + immutable;
}

segd_err_t segd_store_stats(segd_store_t *s, segd_store_stats_t *st, char *errstr, size_t n)
{
    memset(st, 0, sizeof(*st));
    stats_ctx_t c = {.st = st};
    segd_policy_rule(s->policy, &c.rule, 1);
    uint64_t before = segd_policy_corrupt_count(s->policy);
    segd_err_t err = segd_store_scan(s, stats_cb, &c, errstr, n);
    st->corrupt = segd_policy_corrupt_count(s->policy) - before;
    segd_policy_rule_release(&c.rule);
    sst_figures(s, st);
    memtable_figures(s, st);
    return err;
}

/* Unflushed writes above 1 % of the records in SST files. A write changes
 * one record, so below that the figure misses about 1 % at most. (A
 * memtable's in-memory size says nothing here: its arena takes 1 MiB for
 * a single write.) */
#define BPS_MAX_UNFLUSHED_PCT 1
/* Per-file overheads (index, filter, properties, footer) above 10 % of the
 * SST bytes: on a store of a few users a file's fixed part, not the records,
 * decides the figure (issue 23 saw 175-887 bytes per live segment on tiny
 * stores). Measured on the seed workload: 3 users, 1156 of 6967 SST bytes
 * (17 %); 2000 users, 25861 of 3895772 (0.7 %). */
#define BPS_MAX_OVERHEAD_PCT 10

segd_bps_verdict_t segd_store_stats_bytes_per_live(const segd_store_stats_t *st, double *bps,
                                                   char *why, size_t n)
{
    *bps = st->live_segments ? (double)st->sst_bytes / (double)st->live_segments : 0;
    char scratch[8];
    if (!why) /* the verdict alone */
        why = scratch, n = sizeof(scratch);
    if (!st->live_segments) {
        snprintf(why, n, "n/a (no live segment)");
        return SEGD_BPS_NO_LIVE;
    }
    if (!st->sst_bytes || st->memtable_entries * 100 > st->sst_entries * BPS_MAX_UNFLUSHED_PCT) {
        snprintf(why, n,
                 "n/a (not flushed: %" PRIu64 " writes in memtables beside %" PRIu64
                 " records in %" PRIu64 " bytes of SST; segd compact flushes them)",
                 st->memtable_entries, st->sst_entries, st->sst_bytes);
        return SEGD_BPS_NOT_FLUSHED;
    }
    uint64_t overhead = st->sst_bytes > st->sst_data_bytes ? st->sst_bytes - st->sst_data_bytes
                                                           : 0;
    if (overhead * 100 > st->sst_bytes * BPS_MAX_OVERHEAD_PCT) {
        snprintf(why, n,
                 "%.3f, too small a store to mean anything (%" PRIu64 " of %" PRIu64
                 " SST bytes are per-file index, filter and properties, not records)",
                 *bps, overhead, st->sst_bytes);
        return SEGD_BPS_TOO_SMALL;
    }
    snprintf(why, n, "%.3f", *bps);
    return SEGD_BPS_OK;
}
