/* Restore (issue 11, DESIGN §7): loads one snapshot unit (the state of one
 * input partition, exported by another instance) into a store, so that a
 * partition assigned to an instance without its history resumes from the
 * unit's input offset instead of replaying the input from the beginning.
 * segd_unit_load does the whole of it for one unit at its destination: it
 * reads the unit (snapread/unit.h) through one handle and feeds it to
 * segd_restore_new / add / finish, which take the profiles from any reader.
 *
 * The unit's profiles are merge operands of the store's own join (§3), so a
 * restore is exact whatever the store holds: users absent from the store
 * go in as SST values, present ones are merged (load/bulk.h). Before the
 * data goes in, the store takes the unit's markers: its retirements, and its GC
 * watermark as an ingest floor (segd_store_raise_import_floor), because the
 * unit lacks the dead entries its store dropped below that W, so an older
 * event would resurrect what they removed here while it is refused there.
 * After the data, the partition's input offset becomes the unit's (or stays
 * where it is if the store is already further): a crash before that point
 * leaves no offset, and the next restore or replay repeats harmlessly.
 *
 * Threads: one thread per restore, and one restore at a time per store;
 * nothing else may write the store between new and finish unless the
 * restore is `shared` (load/bulk.h). */
#ifndef SEGD_RESTORE_H
#define SEGD_RESTORE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/partition.h"
#include "core/profile.h"
#include "load/bulk.h"
#include "store/store.h"
#include "transport/dest.h"
#include "wire/change.h"

/* What a unit's manifest says about the state it holds. */
typedef struct segd_restore_unit {
    const char *topic;       /* input topic; NULL = set no offset. A unit with a
                              * GC watermark needs its topic, because the
                              * floor belongs to the topic's partition. */
    int32_t partition;
    int64_t next_offset;     /* the next input offset to apply; < 0 = none */
    int64_t gc_watermark_ms; /* the exporting store's W */
    const segd_retirement_t *retirements;
    size_t n_retirements;
    int64_t identity_epoch_ms; /* the exporting store's identity epoch (DESIGN
                                * §10.6), to which the store's is raised; 0 = none */
} segd_restore_unit_t;

typedef struct segd_restore_opts {
    uint64_t memory_bytes;       /* the sort's budget; default 1 GiB */
    int changes;                 /* outbox deltas for the restored users; default 0,
                                  * because the exporter published them already */
    volatile sig_atomic_t *stop; /* may be NULL */
    const _Atomic int *cancel;   /* may be NULL. Once set, finish writes neither the
                                  * data nor the offset (SEGD_ERR_ABORTED). The
                                  * partition has left this member, and its sweep
                                  * may already be deleting the partition's users. */
    pthread_mutex_t *cancel_lock; /* may be NULL; the lock *cancel is set under.
                                  * finish checks cancel and writes the offset while
                                  * holding it, so a cancel comes either before the
                                  * check (no offset) or after the offset. */
    int shared;                  /* other writers meanwhile (segd run): see
                                  * segd_bulk_opts_t.shared */
    int direct;                  /* with shared: the unit's users come in key order,
                                  * each once, as exports write them, so they go
                                  * straight into SST files (segd_bulk_opts_t.direct).
                                  * An add out of order is SEGD_ERR_UNSORTED. */
    segd_bulk_progress_cb progress; /* may be NULL */
    void *progress_ctx;
} segd_restore_opts_t;

typedef struct segd_restore_stats {
    uint64_t users, segments;    /* profiles added, their entries */
    uint64_t users_sst, users_merged;
    int offset_set;              /* the partition's offset moved to the unit's */
    int64_t offset_before;       /* the store's offset before (-1 = none) */
    double seconds;
} segd_restore_stats_t;

typedef struct segd_restore segd_restore_t;

void segd_restore_opts_default(segd_restore_opts_t *o);

/* Starts a load (the profiles wait in its sort until finish). */
segd_err_t segd_restore_new(segd_restore_t **out, segd_store_t *store,
                            const segd_restore_opts_t *o, char *errstr, size_t errstr_size);
/* One profile of the unit (as a snapshot reader yields it). */
segd_err_t segd_restore_add(segd_restore_t *r, const char *user, size_t user_len,
                            const segd_profile_t *p, char *errstr, size_t errstr_size);
/* As segd_restore_add, with the record's encoded bytes when the unit holds
 * them (snapshot.format = native: the store's own encoding of p, checked by
 * the reader): they go in as the operand unchanged. rec NULL: encoded from p. */
segd_err_t segd_restore_add_record(segd_restore_t *r, const char *user, size_t user_len,
                                   const segd_profile_t *p, const uint8_t *rec, size_t rec_len,
                                   char *errstr, size_t errstr_size);
/* Takes the unit's markers (retirements, import floor; synced), loads
 * everything added, then sets the partition's offset (synced). A unit is
 * known in full only once read and verified, hence here. stats may be NULL. */
segd_err_t segd_restore_finish(segd_restore_t *r, const segd_restore_unit_t *unit,
                               segd_restore_stats_t *stats, char *errstr, size_t errstr_size);
void segd_restore_destroy(segd_restore_t *r);

/* One unit loaded into a store as segd run's restorer loads it (also the
 * restore benchmark's): DEST/<topic>/p-PPPPP read and checked through one
 * destination handle, its users loaded beside other writers (shared), its
 * markers and offset taken. SEGD_ERR_NOTFOUND when there is no unit to use:
 * no topology, no unit for the partition, a snapshot of another partition
 * count or partitioner (its units hold other users), or a unit without the
 * partition's input offset. The caller replays the partition instead. */
typedef struct segd_unit_load {
    const char *from, *topic;   /* DEST, the input topic */
    int32_t partition, partitions;
    segd_partitioner_t partitioner;
    const segd_dest_opts_t *dest;
    uint64_t memory_bytes;
    volatile sig_atomic_t *stop;  /* may be NULL */
    const _Atomic int *cancel;    /* may be NULL */
    pthread_mutex_t *cancel_lock; /* may be NULL; the lock *cancel is set under
                                   * (segd_restore_opts_t.cancel_lock) */
} segd_unit_load_t;

typedef struct segd_unit_load_stats {
    uint64_t users, segments, bytes; /* bytes: the unit's files */
    int64_t next_offset;
    double seconds;
} segd_unit_load_stats_t;

segd_err_t segd_unit_load(segd_store_t *store, const segd_unit_load_t *u,
                          segd_unit_load_stats_t *stats, char *errstr, size_t errstr_size);

#endif
