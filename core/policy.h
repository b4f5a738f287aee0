/* The store's time and retention policy: the clock (wall clock, or a fixed
 * `--now` for tests and tools), the late-arrival horizon, the GC watermark
 * and the ingest floor it implies (DESIGN §3.1), and the store-wide segment
 * retirement markers. Shared, read-mostly, by the merge operator and
 * the compaction filter on RocksDB's background threads; must outlive the DB. */
#ifndef SEGD_POLICY_H
#define SEGD_POLICY_H

#include <stdint.h>

#include "base/err.h"
#include "core/markers.h"
#include "core/profile.h"

typedef struct segd_policy segd_policy_t;

segd_err_t segd_policy_new(segd_policy_t **out, int64_t horizon_ms);
void segd_policy_destroy(segd_policy_t *p);

/* now_ms = 0 returns to the wall clock. */
void segd_policy_set_now(segd_policy_t *p, int64_t now_ms);
int64_t segd_policy_now_ms(const segd_policy_t *p);
int64_t segd_policy_horizon_ms(const segd_policy_t *p);

/* Fills a prune rule at the policy's current time and GC watermark. The
 * rule holds the marker set it read (never freed under it) until
 * segd_policy_rule_release, which every caller that is not about to destroy
 * the policy must call: a set a rule still holds is kept. Any thread. */
void segd_policy_rule(segd_policy_t *p, segd_prune_t *rule, int complete);
/* Lets go of the set a rule from segd_policy_rule holds; the rule then
 * retires nothing. Harmless on a rule made otherwise, or released already. */
void segd_policy_rule_release(segd_prune_t *rule);

/* The GC watermark W (DESIGN §3). Dead entries with ts_ms < W may be
 * dropped, and 0 means there is none yet (a fresh store).
 * set_gc_watermark only ever raises it. The store persists a value before
 * it sets it here (segd_store_gc_advance in store.h), so a crash can never
 * leave the policy ahead of what is on disk. */
int64_t segd_policy_gc_watermark(const segd_policy_t *p);
void segd_policy_set_gc_watermark(segd_policy_t *p, int64_t w_ms);
/* grace is how long a merge operand may stay unmerged above its base; it is
 * set when the store opens. Once W > 0, events need ts_ms >= W + grace. */
void segd_policy_set_gc_grace(segd_policy_t *p, int64_t grace_ms);
int64_t segd_policy_gc_grace_ms(const segd_policy_t *p);

/* Whether an event time can be applied exactly (DESIGN §3). */
typedef enum segd_ts_verdict {
    SEGD_TS_OK = 0,
    SEGD_TS_TOO_LATE,    /* ts_ms < W + grace: a dropped entry may be needed */
    SEGD_TS_FROM_FUTURE, /* ts_ms > now + max_skew_ms */
} segd_ts_verdict_t;
segd_ts_verdict_t segd_policy_check_ts(const segd_policy_t *p, int64_t ts_ms,
                                       int64_t max_skew_ms);
/* The lower bound of accepted ts_ms, 0 for none. Once W > 0 it is
 * W + grace. Before that it is the floor of W's start phase, which is 0 on
 * a fresh store so that bulk loads of any age are taken. */
int64_t segd_policy_ts_floor(const segd_policy_t *p);
void segd_policy_set_gc_start_floor(segd_policy_t *p, int64_t floor_ms);
/* The same with a further floor of the caller's, such as a partition's
 * import floor (store.h). An event below either floor is too late. */
segd_ts_verdict_t segd_policy_check_ts_floor(const segd_policy_t *p, int64_t ts_ms,
                                             int64_t max_skew_ms, int64_t floor_ms);
/* The floor an event meets here, max(ts_floor, floor_ms), where floor_ms is
 * a partition's import floor (or the highest one, for writes that belong to
 * no partition). why receives its value and what set it, so that a refusal
 * can name the cause: the horizon (W's start phase), W + grace, or the
 * import floor. */
int64_t segd_policy_floor_explain(const segd_policy_t *p, int64_t floor_ms, char *why,
                                  size_t n);
/* The highest import floor of any partition, brought by restored units
 * (store.h). It is the conservative floor for writes that belong to no
 * partition (backfill, erase). It is only raised, and the store persists a
 * value before it sets it here. It is not part of ts_floor, because one
 * partition's floor must not refuse the history of the store's other
 * partitions. */
void segd_policy_raise_import_floor(segd_policy_t *p, int64_t floor_ms);
int64_t segd_policy_import_floor(const segd_policy_t *p);

/* Raises segment_id's retirement marker to before_ms. A marker already at
 * or above it changes nothing and makes no set; otherwise a new set is made
 * (copy-on-write: rules on other threads keep the one they hold), and the
 * replaced sets no rule holds are freed. */
segd_err_t segd_policy_retire(segd_policy_t *p, int64_t segment_id, int64_t before_ms);
/* Joins v[0..n) (any order, keys may repeat; sorted in place) into the
 * markers as one new set: the load of a store's markers at open. */
segd_err_t segd_policy_retire_all(segd_policy_t *p, segd_marker_t *v, size_t n);
int64_t segd_policy_retired_before(void *policy, int64_t segment_id);
/* How many marker sets were ever made, and how many are allocated now (the
 * current one and replaced ones a rule still holds): the memory bound,
 * read by tests. */
void segd_policy_set_counts(const segd_policy_t *p, uint64_t *made, uint64_t *kept);

/* Counts inputs the merge operator or filter could not decode and skipped. */
void segd_policy_count_corrupt(segd_policy_t *p);
uint64_t segd_policy_corrupt_count(const segd_policy_t *p);

#endif
