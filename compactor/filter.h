/* The profiles column family's compaction filter factory: each compaction
 * gets a filter that rewrites records without droppable entries (DESIGN §3)
 * and deletes records left empty. It sees stored values only, never merge
 * operands (those are pruned by the merge operator itself). */
#ifndef SEGD_FILTER_H
#define SEGD_FILTER_H

#include <rocksdb/c.h>

#include "base/buf.h"
#include "core/policy.h"
#include "store/store.h"

/* policy is borrowed and must outlive the factory, which is owned by the
 * rocksdb_options_t it is set on. */
rocksdb_compactionfilterfactory_t *segd_filter_factory_new(segd_policy_t *policy);

/* Plugs the filter into a store's options (store.h's filter_factory). */
void segd_compactor_install(segd_store_opts_t *o);

/* The filter's decision for one stored value. It returns 1 to delete the key
 * and 0 to keep it; when keeping, *changed is set if out holds a rewritten
 * value. */
int segd_filter_value(segd_policy_t *policy, const segd_prune_t *rule,
                      const char *value, size_t len, segd_profile_t *scratch,
                      segd_buf_t *out, int *changed);

#endif
