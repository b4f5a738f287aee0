/* Bulk load (issue 10, `segd backfill --bulk`): (user, merge operand) pairs
 * are sorted and joined per user within a memory budget (load/extsort.h);
 * then, in user order, a user the store does not have goes into an SST file
 * as the record a full merge would store, and a user it has goes through
 * the merge path as ONE operand (the join of its operands: exact, since the
 * §3 join is associative). The SST files are ingested in one call at the
 * end, WAL and memtable bypassed.
 *
 * Change deltas (DESIGN §5): with changes on, each user's joined operand is
 * written to the outbox, in WriteBatches (with the present users' merges)
 * BEFORE the ingest. A crash in between publishes deltas the store lacks
 * until the load is rerun: harmless, a rerun is idempotent (§3) and caches
 * are only ahead for a while. The other order would lose the deltas of an
 * ingest that happened before a crash.
 *
 * Exactness and when nothing falls back: the store is checked once for
 * being empty, and otherwise every user is looked up (segd_store_user_present),
 * so only keys with no state at all are written as SST values; anything
 * present, an empty record, operands, a record that does not decode, takes
 * the merge path as the merge path would. The SST value is pruned with the
 * store's full-merge rule at the load's now (segd_policy_rule(complete=1):
 * entries under an erase marker or a retirement, and dead entries below the
 * GC watermark W), which is what a full merge at that moment stores; reads
 * at that now or later answer the same. Events below W + grace must be
 * refused by the caller before they become operands (too_late), exactly as
 * for the merge path; retirements are store-wide markers that reads apply
 * to both paths. The store's lock keeps other processes out; within the
 * process nothing else may write the store between new and finish (the
 * present check and the ingest must see the same store), unless the load
 * is `shared` (see the option). So no case needs the whole load to go
 * through the merge path.
 *
 * Threads: new/add/finish/destroy from one thread; the sort spills on one
 * background thread of its own. */
#ifndef SEGD_BULK_H
#define SEGD_BULK_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

typedef struct segd_bulk segd_bulk_t;

typedef enum segd_bulk_phase {
    SEGD_BULK_SORT,   /* done/total: spills finished / started */
    SEGD_BULK_WRITE,  /* done/total: pairs written out / pairs added */
    SEGD_BULK_INGEST, /* done/total: SST files ingested / to ingest */
} segd_bulk_phase_t;

const char *segd_bulk_phase_name(segd_bulk_phase_t phase);

/* Called from the thread calling finish, at most every 4096 users. */
typedef void (*segd_bulk_progress_cb)(void *ctx, segd_bulk_phase_t phase, uint64_t done,
                                      uint64_t total);

typedef struct segd_bulk_opts {
    uint64_t memory_bytes;     /* the sort's budget (--memory-mb << 20); default 1 GiB */
    const char *tmp_dir;       /* NULL: a new directory bulk-XXXXXX under the store's,
                                * on its disk (SST files are hard-linked in from it) */
    int changes;               /* outbox entries as the merge path writes; default 1 */
    uint64_t sst_target_bytes; /* an SST file is closed past this; default 256 MiB */
    segd_bulk_progress_cb progress; /* may be NULL */
    void *progress_ctx;
    volatile sig_atomic_t *stop; /* may be NULL; set: finish stops (SEGD_ERR_ABORTED) */
    int shared;                /* other writers may write the store meanwhile (a
                                * restore inside segd run): every user goes into the
                                * SST files as ONE merge operand, no presence check,
                                * which commutes with their merges (§3); no temporary
                                * directories of other loads are removed */
    int direct;                /* with shared and changes = 0: the input holds each
                                * user once, in key order (a snapshot unit): every
                                * add goes straight into the SST files, no sort, no
                                * join; an add out of order is SEGD_ERR_UNSORTED (load
                                * it again without direct) */
    const _Atomic int *cancel; /* may be NULL; set: finish ingests nothing
                                * (SEGD_ERR_ABORTED) */
} segd_bulk_opts_t;

typedef struct segd_bulk_stats {
    uint64_t pairs, segments; /* added */
    uint64_t users;           /* distinct users */
    uint64_t users_sst;       /* written as SST values */
    uint64_t users_merged;    /* present in the store: one merge operand each */
    uint64_t users_empty;     /* joined to nothing to store (all pruned) */
    uint64_t sst_files, sst_bytes;
    uint64_t runs, run_bytes; /* spilled by the sort */
    uint64_t outbox_entries;
    int store_was_empty;
    double sort_s, write_s, ingest_s; /* new..sorted, sorted..files, the ingest */
} segd_bulk_stats_t;

void segd_bulk_opts_default(segd_bulk_opts_t *o);

/* Starts a load into store (borrowed until destroy; opened writable, held
 * alone). Removes the temporary directories of earlier loads that crashed
 * (bulk-* under the store's directory: the store's lock says none is in use). */
segd_err_t segd_bulk_new(segd_bulk_t **out, segd_store_t *store, const segd_bulk_opts_t *o,
                         char *errstr, size_t errstr_size);
/* One merge operand of user (a record made by segd_record_encode from an
 * event that passed validation and the store's too_late/from_future check).
 * n_segments is counted for the stats. Bytes are copied. */
segd_err_t segd_bulk_add(segd_bulk_t *b, const char *user, size_t user_len,
                         const uint8_t *operand, size_t operand_len, uint64_t n_segments,
                         char *errstr, size_t errstr_size);
/* Sorts, writes the outbox entries and the present users' merges, the SST
 * files, and ingests them. stats may be NULL. On failure nothing of the SST
 * part is in the store (what was written through the merge path and the
 * outbox stays: rerun the load). Call once. */
segd_err_t segd_bulk_finish(segd_bulk_t *b, segd_bulk_stats_t *stats, char *errstr,
                            size_t errstr_size);
/* Removes the temporary directories of earlier loads that crashed (bulk-*
 * under the store's directory). Only while no load of this process runs:
 * the store's lock keeps other processes out. A non-shared load does it in
 * segd_bulk_new; segd run's restorer at its start. */
void segd_bulk_remove_stale(segd_store_t *store);

/* Removes the temporary directory and its files, whatever state b is in. */
void segd_bulk_destroy(segd_bulk_t *b);

#endif
