/* Restore on assignment (issue 11, DESIGN §7). When the group assigns a
 * partition for which the store holds no input offset, segd run pauses the
 * partition and asks the restorer for it. The restorer loads the
 * partition's latest snapshot unit from restore.from (segd_unit_load,
 * load/restore.h) beside the running ingest, so other partitions keep
 * flowing and their merges join with the unit's. The load sets the
 * partition's input offset from the unit's manifest, and the restorer
 * reports DONE; the pipeline then resumes the partition at that offset.
 *
 * With no unit for the partition the restorer reports REPLAY at once, and
 * the input is replayed from input.offset.reset as without restore.from. A
 * unit that fails (corrupt, unreachable) is tried again with backoff,
 * restore.retries times. After that it is REPLAY if restore.fallback =
 * replay; otherwise it is tried for as long as it takes, and each failure
 * is logged.
 *
 * There is one worker thread and one restore at a time, because bulk loads
 * may not run side by side in one store. A failed attempt waits for its
 * retry in the queue, so a unit that keeps failing never holds up the other
 * partitions. A job stays known after it finished (one per partition ever
 * restored), and a later begin queues it anew. new and destroy run on the
 * owning thread, begin and state on the pipeline's thread; a mutex guards
 * the jobs. */
#ifndef SEGD_RESTORER_H
#define SEGD_RESTORER_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/err.h"
#include "base/log.h"
#include "core/partition.h"
#include "store/store.h"
#include "transport/dest.h"

typedef enum segd_restore_state {
    SEGD_RESTORE_NONE = 0, /* no job for the partition */
    SEGD_RESTORE_RUNNING,  /* queued or loading: keep the partition paused */
    SEGD_RESTORE_DONE,     /* loaded; the store holds the partition's offset */
    SEGD_RESTORE_REPLAY,   /* no unit, or given up: replay from input.offset.reset */
} segd_restore_state_t;

typedef struct segd_restorer_opts {
    const char *from;         /* restore.from: the export's destination (DEST, with
                                 DEST/<topic>/p-PPPPP units); borrowed */
    int fallback_replay;      /* restore.fallback = replay */
    int retries;              /* failed attempts before the fallback; default 5 */
    int64_t retry_max_ms;     /* backoff cap; default 5000 */
    uint64_t memory_bytes;    /* the load's sort budget; default 256 MiB */
    segd_partitioner_t partitioner; /* input.partitioner: a unit routed otherwise
                                       holds other users (replayed instead) */
    segd_dest_opts_t dest;
    const segd_log_t *log;    /* borrowed, outlives the restorer; NULL = default */
} segd_restorer_opts_t;

typedef struct segd_restorer segd_restorer_t;

void segd_restorer_opts_default(segd_restorer_opts_t *o);
/* store is borrowed and must outlive the restorer; starts the worker. */
segd_err_t segd_restorer_new(segd_restorer_t **out, segd_store_t *store,
                             const segd_restorer_opts_t *o, char *errstr, size_t errstr_size);
/* Stops the worker (a load under way is abandoned before its offset is set:
 * the next assignment restores again) and frees everything. */
void segd_restorer_destroy(segd_restorer_t *r);

/* Queues a restore of (topic, partition) unless one is queued or running
 * (a partition revoked and assigned again while it restores keeps its job).
 * partitions: the topic's partition count, which the unit's must equal.
 * Returns 0 on success, -1 when out of memory (the caller replays). */
int segd_restorer_begin(segd_restorer_t *r, const char *topic, int32_t partition,
                        int32_t partitions);
segd_restore_state_t segd_restorer_state(segd_restorer_t *r, const char *topic,
                                         int32_t partition);
/* The partition left this member: its job stops (a load under way is
 * abandoned before its offset) and is forgotten, so that it neither holds
 * up the partitions queued behind it nor writes an offset for a partition
 * another member owns. */
void segd_restorer_cancel(segd_restorer_t *r, const char *topic, int32_t partition);

typedef struct segd_restorer_stats {
    uint64_t restored, replayed, failures; /* units loaded, fallbacks, failed attempts */
    uint64_t users, segments, bytes;       /* loaded so far */
} segd_restorer_stats_t;
void segd_restorer_get_stats(segd_restorer_t *r, segd_restorer_stats_t *st);

#endif
