/* Compaction filter over profile records; see filter.h. One filter per
 * compaction holds its own scratch buffers and a rule fixed at the start of
 * the compaction, so every record of one compaction is judged at one time. */
#include "compactor/filter.h"

#include <stdlib.h>

#include "core/record.h"

typedef struct filter_state {
    segd_policy_t *policy;
    segd_prune_t rule;
    segd_profile_t scratch;
    segd_buf_t out; /* owns the last rewritten value; RocksDB copies it */
} filter_state_t;

int segd_filter_value(segd_policy_t *policy, const segd_prune_t *rule,
                      const char *value, size_t len, segd_profile_t *scratch,
                      segd_buf_t *out, int *changed)
{
    *changed = 0;
    if (len == 0)
        return 1;
    segd_err_t err = segd_record_decode((const uint8_t *)value, len, scratch);
    if (err) {
        /* keep what we cannot read: deleting it could lose data */
        if (err == SEGD_ERR_CORRUPT)
            segd_policy_count_corrupt(policy);
        return 0;
    }
    size_t before = scratch->n;
    int64_t marker = scratch->erased_before_ms;
    segd_profile_prune(scratch, rule);
    if (scratch->n == 0 && scratch->erased_before_ms == 0)
        return 1;
    if (scratch->n == before && scratch->erased_before_ms == marker)
        return 0;
    if (segd_record_encode(scratch, out) != SEGD_OK)
        return 0;
    *changed = 1;
    return 0;
}

static unsigned char filter(void *state, int level, const char *key, size_t klen,
                            const char *value, size_t len, char **new_value,
                            size_t *new_len, unsigned char *value_changed)
{
    (void)level, (void)key, (void)klen;
    filter_state_t *f = state;
    int changed = 0;
    int drop = segd_filter_value(f->policy, &f->rule, value, len, &f->scratch, &f->out,
                                 &changed);
    if (changed) {
        *new_value = (char *)f->out.data;
        *new_len = f->out.len;
        *value_changed = 1;
    }
    return (unsigned char)drop;
}

static void filter_destroy(void *state)
{
    filter_state_t *f = state;
    segd_policy_rule_release(&f->rule);
    segd_profile_free(&f->scratch);
    segd_buf_free(&f->out);
    free(f);
}

static const char *filter_name(void *state)
{
    (void)state;
    return "segd.profile.filter";
}

static rocksdb_compactionfilter_t *create_filter(void *state,
                                                 rocksdb_compactionfiltercontext_t *ctx)
{
    (void)ctx;
    filter_state_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->policy = state;
    segd_policy_rule(f->policy, &f->rule, 1);
    return rocksdb_compactionfilter_create(f, filter_destroy, filter, filter_name);
}

static void factory_destroy(void *state) { (void)state; }

static const char *factory_name(void *state)
{
    (void)state;
    return "segd.profile.filter_factory";
}

rocksdb_compactionfilterfactory_t *segd_filter_factory_new(segd_policy_t *policy)
{
    return rocksdb_compactionfilterfactory_create(policy, factory_destroy, create_filter,
                                                  factory_name);
}

void segd_compactor_install(segd_store_opts_t *o) { o->filter_factory = segd_filter_factory_new; }
