/* The store's figures. RocksDB's properties per column family and the block
 * cache's use feed the metrics (app/health.c). segd_store_stats counts
 * users, live segments and corrupt records in one full scan of the profiles
 * family, for `segd stats` and the benchmarks. Everything here only reads. */
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

segd_err_t segd_store_stats(segd_store_t *s, segd_store_stats_t *st, char *errstr, size_t n)
{
    memset(st, 0, sizeof(*st));
    stats_ctx_t c = {.st = st};
    segd_policy_rule(s->policy, &c.rule, 1);
    uint64_t before = segd_policy_corrupt_count(s->policy);
    segd_err_t err = segd_store_scan(s, stats_cb, &c, errstr, n);
    st->corrupt = segd_policy_corrupt_count(s->policy) - before;
    rocksdb_property_int_cf(s->db, s->cf[CF_PROFILES], "rocksdb.total-sst-files-size",
                            &st->sst_bytes);
    return err;
}
