/* What history a rebuild (DESIGN §3.2, cli/cmd_rebuild.c) starts each input
 * partition with. Retention (or delete-records) may already have deleted
 * [0, log start) of a partition: replayed from its log start, the rebuilt
 * store would silently lack every entry whose events are gone. This module
 * reads each partition's log start and the first message still held when the
 * rebuild begins, loads a base of snapshot units (the sources `restore.from`
 * takes) that may cover the gone offsets, says exactly which offsets neither
 * covers, and records it in the rebuilt store (store.h SEGD_POS_REBUILD_*),
 * so that the swap sees it too. One thread; cfg and store borrowed. */
#ifndef SEGD_REBUILD_HISTORY_H
#define SEGD_REBUILD_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "config/config.h"
#include "store/store.h"

typedef struct segd_history_part {
    int32_t partition;
    int64_t log_start, high; /* the watermarks when the rebuild began */
    int64_t first_offset;    /* the first message still held; -1 = none */
    int64_t first_ts_ms;     /* its timestamp; -1 = none or unknown */
    int64_t base_offset;     /* the base unit's next offset; -1 = no unit loaded */
} segd_history_part_t;

/* One input topic. Freed by segd_history_destroy. */
typedef struct segd_history {
    const char *topic; /* borrowed from the config */
    int32_t partitions;
    segd_history_part_t *p; /* [partitions], by partition id order of the metadata */
} segd_history_t;

/* The topic's partitions, their watermarks, and for each partition whose log
 * start is above 0 the offset and timestamp of its first message (so that a
 * refusal can say: everything gone is older than that). */
segd_err_t segd_history_probe(const segd_config_t *cfg, const char *topic,
                              segd_history_t *h, char *errstr, size_t errstr_size);
void segd_history_destroy(segd_history_t *h);

/* Loads each partition's unit of the base (DEST/<topic>/p-PPPPP, as segd
 * run's restorer does: load/restore.h segd_unit_load) into store, a fresh
 * store, and sets base_offset. A partition without a usable unit is left as
 * it is (base_offset -1): only the offsets the topic lacks decide whether
 * that matters. *loaded: units loaded. */
segd_err_t segd_history_load_base(const segd_config_t *cfg, const char *base,
                                  segd_store_t *store, segd_history_t *h, size_t *loaded,
                                  char *errstr, size_t errstr_size);

/* Partition i's gone range [*from, log_start) (neither in the topic nor in a
 * base unit): 1 when it is not empty. */
int segd_history_gone(const segd_history_t *h, size_t i, int64_t *from);

/* Where the rebuild replays partition i from: past its base unit, never
 * below the log start. */
int64_t segd_history_replay_from(const segd_history_t *h, size_t i);

/* The log starts and gone ranges into store (synced). */
segd_err_t segd_history_record(segd_store_t *store, const segd_history_t *h, char *errstr,
                               size_t errstr_size);

/* One line per partition with a gone range on f, each prefixed by prefix;
 * returns the number of such partitions. */
size_t segd_history_say(FILE *f, const char *prefix, const segd_history_t *h);

#endif
