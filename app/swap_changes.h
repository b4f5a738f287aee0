/* The change deltas of a rebuild swap (DESIGN §3.2 "Rebuild beside, swap at
 * restart", §5 "Replacing deltas"): a rebuilt store differs from the one it
 * replaces (events the live store refused as too late, backfilled or
 * restored profiles the topics lack, dead entries the live store dropped
 * below its W), and a rebuild writes no change events. Caches that follow
 * the change stream would keep the replaced store's state. Before the
 * renames, every user whose record differs between the two stores, and
 * every user an unpublished outbox entry of the live store names, gets a
 * replacing delta in the rebuilt store's outbox: the user's whole record
 * there (empty: the user is gone), which a cache puts in place of its own.
 * segd run publishes them before anything it consumes after the swap. */
#ifndef SEGD_SWAP_CHANGES_H
#define SEGD_SWAP_CHANGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/partition.h"
#include "store/store.h"

/* Writes the replacing deltas into rebuilt's outbox (batched writes, the
 * last one synced), live being the replaced store (read-only) and v a view
 * of it. A live store with no change stream (no change positions and an
 * empty outbox: changes.enable = 0) gets none. Only users of partitions
 * the live store holds offsets of (placed with partitioner, input.partitioner)
 * get one: in a fleet the others are another member's, whose caches' state
 * must not be overwritten. Unpublished retirement and member entries of the
 * live store are carried as they are. *users = the deltas written. */
segd_err_t segd_swap_replace_deltas(segd_store_t *live, segd_store_view_t *v,
                                    segd_store_t *rebuilt, segd_partitioner_t partitioner,
                                    uint64_t *users, char *errstr, size_t errstr_size);

#endif
