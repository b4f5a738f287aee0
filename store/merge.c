/* RocksDB merge operator over segd profile records; see merge.h. Corrupt
 * inputs are counted rather than failing the merge, because a failed merge
 * stops every compaction of the column family: a corrupt operand is
 * skipped, a corrupt base is kept unchanged (as the compaction filter keeps
 * it), so reads go on reporting the user as unreadable until it is repaired;
 * rewriting the user without it would silently drop its entries, tombstones
 * and erase marker. */
#include "store/merge.h"
#include "core/record.h"

#include <stdlib.h>

segd_err_t segd_merge_values(segd_policy_t *policy, const char *base, size_t base_len,
                             const char *const *ops, const size_t *op_lens, size_t n,
                             int complete, segd_buf_t *out)
{
    size_t k = n + (base != NULL);
    segd_profile_t *in = calloc(k ? k : 1, sizeof(*in));
    const segd_profile_t **refs = calloc(k ? k : 1, sizeof(*refs));
    segd_profile_t joined;
    segd_profile_init(&joined);
    segd_err_t err = SEGD_ERR_NOMEM;
    size_t used = 0;
    if (!in || !refs)
        goto out_free;
    for (size_t i = 0; i < k; i++) {
        const char *v = base && i == 0 ? base : ops[i - (base != NULL)];
        size_t len = base && i == 0 ? base_len : op_lens[i - (base != NULL)];
        err = segd_record_decode((const uint8_t *)v, len, &in[used]);
        if (err == SEGD_ERR_CORRUPT) {
            segd_policy_count_corrupt(policy);
            if (base && i == 0) { /* keep it as it is; the operands wait for a repair */
                out->len = 0;
                err = segd_buf_append(out, base, base_len);
                goto out_free;
            }
            continue;
        }
        if (err)
            goto out_free;
        refs[used] = &in[used];
        used++;
    }
    segd_prune_t rule;
    segd_policy_rule(policy, &rule, complete);
    if ((err = segd_profile_join(&joined, refs, used, &rule)) == SEGD_OK)
        err = segd_record_encode(&joined, out);
    segd_policy_rule_release(&rule);
out_free:
    for (size_t i = 0; in && i < k; i++)
        segd_profile_free(&in[i]);
    free(in);
    free(refs);
    segd_profile_free(&joined);
    return err;
}

/* RocksDB copies the result and hands it back to delete_value; a non-NULL
 * buffer is returned even for the empty record. */
static char *finish(segd_err_t err, segd_buf_t *out, unsigned char *success,
                    size_t *new_len)
{
    if (err == SEGD_OK && !out->data)
        err = segd_buf_reserve(out, 1);
    *success = err == SEGD_OK;
    *new_len = err == SEGD_OK ? out->len : 0;
    if (err != SEGD_OK) {
        segd_buf_free(out);
        return NULL;
    }
    return (char *)out->data;
}

static char *full_merge(void *state, const char *key, size_t klen, const char *base,
                        size_t base_len, const char *const *ops, const size_t *op_lens,
                        int n, unsigned char *success, size_t *new_len)
{
    (void)key, (void)klen;
    segd_buf_t out = {0};
    segd_err_t err =
        segd_merge_values(state, base, base_len, ops, op_lens, (size_t)n, 1, &out);
    return finish(err, &out, success, new_len);
}

static char *partial_merge(void *state, const char *key, size_t klen,
                           const char *const *ops, const size_t *op_lens, int n,
                           unsigned char *success, size_t *new_len)
{
    (void)key, (void)klen;
    segd_buf_t out = {0};
    segd_err_t err = segd_merge_values(state, NULL, 0, ops, op_lens, (size_t)n, 0, &out);
    return finish(err, &out, success, new_len);
}

static void delete_value(void *state, const char *value, size_t len)
{
    (void)state, (void)len;
    free((void *)value);
}

static void destroy_state(void *state) { (void)state; /* the policy is borrowed */ }

static const char *merge_name(void *state)
{
    (void)state;
    return "segd.profile.v1";
}

rocksdb_mergeoperator_t *segd_merge_operator_new(segd_policy_t *policy)
{
    return rocksdb_mergeoperator_create(policy, destroy_state, full_merge, partial_merge,
                                        delete_value, merge_name);
}
