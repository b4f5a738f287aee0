/* The check `segd replay` and `segd offsets set` make before they apply
 * anything (DESIGN §3.1, "Repair"): how many events of the range they are
 * about to (re-)apply fall below the store's ingest floor, which the store
 * would dead-letter as too_late instead of applying. */
#ifndef SEGD_REPAIR_CHECK_H
#define SEGD_REPAIR_CHECK_H

#include <signal.h>

#include "consumer/replay.h"
#include "store/store.h"

/* Reads o's ranges once with a count-only replay (nothing written) and
 * names, per partition, the events below the floor and the floor itself
 * (horizon, W + grace or the partition's import floor, with its value),
 * then the two exact repairs. Returns SEGD_EXIT_OK to go on (none below
 * the floor, or force), SEGD_EXIT_REFUSED, or the exit code of a failure
 * (said on stderr). cmd names the command in messages. */
int segd_repair_check(const char *cmd, const segd_replay_opts_t *o, segd_store_t *s,
                      volatile sig_atomic_t *stop, int force);

/* The two exact repairs, for help texts and refusals. */
#define SEGD_REPAIR_PATHS                                                                    \
    "  The exact repairs (docs/cli.md#repairing-a-store, DESIGN 3.1):\n"                   \
    "    1. rebuild: `segd rebuild --config FILE` fills a fresh store beside the live\n"   \
    "       one from the topics (history of any age); the next segd run swaps it in\n"    \
    "    2. restore: a fresh store with restore.from = a snapshot export taken before\n"    \
    "       the damage restores each partition's unit, then consumes after its offsets\n"

#endif
