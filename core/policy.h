/* The store's time and retention policy: the clock (wall clock, or a fixed
 * `--now` for tests and tools), the late-arrival horizon, and the store-wide
 * segment retirement markers. Shared, read-mostly, by the merge operator and
 * the compaction filter on RocksDB's background threads; must outlive the DB. */
#ifndef SEGD_POLICY_H
#define SEGD_POLICY_H

#include <stdint.h>

#include "base/err.h"
#include "core/record.h"

typedef struct segd_policy segd_policy_t;

segd_err_t segd_policy_new(segd_policy_t **out, int64_t horizon_ms);
void segd_policy_destroy(segd_policy_t *p);

/* now_ms = 0 returns to the wall clock. */
void segd_policy_set_now(segd_policy_t *p, int64_t now_ms);
int64_t segd_policy_now_ms(const segd_policy_t *p);
int64_t segd_policy_horizon_ms(const segd_policy_t *p);

/* Fills a prune rule at the policy's current time. */
void segd_policy_rule(segd_policy_t *p, segd_prune_t *rule, int complete);

/* Raises segment_id's retirement marker to before_ms (copy-on-write; readers
 * on other threads keep using the old set, freed at destroy). */
segd_err_t segd_policy_retire(segd_policy_t *p, int64_t segment_id, int64_t before_ms);
int64_t segd_policy_retired_before(void *policy, int64_t segment_id);

/* Counts inputs the merge operator or filter could not decode and skipped. */
void segd_policy_count_corrupt(segd_policy_t *p);
uint64_t segd_policy_corrupt_count(const segd_policy_t *p);

#endif
