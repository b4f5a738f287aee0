/* The profiles column family's RocksDB merge operator: full merge = join of
 * base and operands minus what may be dropped (DESIGN §3), partial merge =
 * join of operands keeping everything that must still beat an older base. */
#ifndef SEGD_MERGE_H
#define SEGD_MERGE_H

#include <rocksdb/c.h>

#include "base/buf.h"
#include "core/policy.h"

/* policy is borrowed and must outlive the returned operator; the operator is
 * owned by the rocksdb_options_t it is set on. */
rocksdb_mergeoperator_t *segd_merge_operator_new(segd_policy_t *policy);

/* The merge itself on raw encoded values (base may be NULL), for the edge
 * cache and tests. On success *out holds the encoded result. Inputs that do
 * not decode are skipped and counted in the policy. */
segd_err_t segd_merge_values(segd_policy_t *policy, const char *base, size_t base_len,
                             const char *const *ops, const size_t *op_lens, size_t n,
                             int complete, segd_buf_t *out);

#endif
