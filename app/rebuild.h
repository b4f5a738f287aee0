/* The rebuild path of a store (DESIGN 3.2, docs/cli.md "Repairing a store"):
 * `segd rebuild` fills a fresh store beside the live one, DB.rebuild.tmp,
 * from its input topics, renamed DB.rebuilt once complete; the next
 * `segd run` on DB swaps it in before it opens the store (the old one is
 * kept as DB.replaced-<unix seconds>). Directory names are the protocol: a
 * rename is atomic, so a crash leaves either the old store or the new one. */
#ifndef SEGD_REBUILD_H
#define SEGD_REBUILD_H

#include <stddef.h>

#include "base/err.h"
#include "base/log.h"
#include "config/config.h"
#include "store/store.h"

/* DB.rebuild.tmp and DB.rebuilt, in out (at least 4096 bytes). */
void segd_rebuild_tmp_path(const char *db, char *out, size_t n);
void segd_rebuild_done_path(const char *db, char *out, size_t n);

/* When DB.rebuilt exists (DB = so->path, so the store options segd run
 * opens DB with): takes DB's lock (SEGD_ERR_BUSY, nothing changed, while
 * another process holds the store), raises the rebuilt store's erase
 * markers, retirement markers, import floors and misrouting counters to the
 * live store's (what the input topics do not hold), carries its change
 * positions, writes replacing deltas for the users whose records differ
 * (app/swap_changes.h: running caches follow the swap; users placed with
 * partitioner, input.partitioner), renames DB to
 * DB.replaced-<now> and DB.rebuilt to DB, syncs the parent directory, and
 * says so on log (may be NULL: stderr). *swapped = 1 then. */
segd_err_t segd_rebuild_swap(const segd_store_opts_t *so, segd_partitioner_t partitioner,
                             segd_log_t *log, int *swapped, char *errstr, size_t errstr_size);
/* The swap once a start has seen DB.rebuilt (segd_rebuild_swap checks that
 * first, without the lock): everything it acts on is decided again under
 * DB's lock. Two starts at once both see DB.rebuilt; the later one finds it
 * gone under the lock (the other swapped it in), says so and returns
 * SEGD_OK with *swapped = 0, and the rebuilt store is opened only if it
 * exists, so no empty store is ever swapped in. Public so that a test can
 * run that later start. */
segd_err_t segd_rebuild_swap_locked(const segd_store_opts_t *so, segd_partitioner_t partitioner,
                                    segd_log_t *log, int *swapped, char *errstr, size_t errstr_size);

/* Before a swap (DB.rebuilt exists): every partition of every topic segd
 * run consumes (cfg->topics) must have an offset in the rebuilt store, as
 * the rebuild stored them (SEGD_ERR_CONFIG naming the missing ones, no
 * broker asked); the history the rebuild began without and was told to
 * accept (--accept-history-loss) is logged. Then each input partition's
 * next offset in the rebuilt store against the log start the brokers
 * report now. Where
 * retention passed it, the swapped store would skip messages without a
 * word: SEGD_ERR_TOO_LATE naming the partition (the rebuilt store stays;
 * rebuild again). A broker that does not answer in a few seconds is logged
 * and not waited for (the swap goes on). SEGD_OK when there is nothing to swap. */
segd_err_t segd_rebuild_check_log_start(const segd_config_t *cfg, char *errstr,
                                        size_t errstr_size);

#endif
