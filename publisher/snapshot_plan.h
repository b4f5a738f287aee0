/* Which snapshot units an export writes (DESIGN §6): the input topic, its
 * partition count P and the partitions, decided from the options, the input
 * offsets the store's view holds and the destination's topology.json. Pure:
 * no store, no I/O; called by publisher/snapshot.c. */
#ifndef SEGD_SNAPSHOT_PLAN_H
#define SEGD_SNAPSHOT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "wire/manifest.h"

typedef struct segd_snapshot_opts segd_snapshot_opts_t;

typedef struct segd_snapshot_plan {
    char topic[256];
    int32_t partitions; /* P */
    int32_t *units;     /* owned; ascending, distinct, each < P */
    size_t n_units;
    int by_offsets;     /* units follow the store's offsets (else buckets) */
} segd_snapshot_plan_t;

/* The topic: o->topic, else the only one in offsets (SEGD_ERR_CONFIG when
 * there are none or several). Then, when the store holds offsets of it:
 * P = o->partition_count, else topology_p (the partition count the
 * destination's topology.json records, 0 = none) when it exceeds every
 * stored partition, else the largest stored partition + 1; the units are
 * o->partitions, else every partition with an offset. Without offsets
 * (a store filled by backfill): P = o->partition_count, else o->buckets, and
 * the units o->partitions, else all P. A unit >= P is SEGD_ERR_CONFIG.
 * offsets: the view's input offsets (a manifest's inputs). */
segd_err_t segd_snapshot_plan(const segd_snapshot_opts_t *o, const segd_topic_offset_t *offsets,
                              size_t n_offsets, int32_t topology_p,
                              segd_snapshot_plan_t *plan, char *errstr, size_t errstr_size);
/* The topic alone (first step of segd_snapshot_plan): the export reads the
 * destination's topology.json of that topic before planning. */
segd_err_t segd_snapshot_plan_topic(const segd_snapshot_opts_t *o,
                                    const segd_topic_offset_t *offsets, size_t n_offsets,
                                    char *topic, size_t cap, char *errstr, size_t errstr_size);
void segd_snapshot_plan_free(segd_snapshot_plan_t *plan);

#endif
