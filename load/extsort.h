/* External sort of (user, merge operand) pairs within a memory budget, with
 * the DESIGN §3 join of each user's operands: the first half of a bulk load
 * (load/bulk.c). Pairs fill one of two arenas of memory/2 bytes each; a full
 * arena is sorted by user, each user's operands joined into one record and
 * written as a sorted run file on a background thread while the other arena
 * fills. The merge then yields users in increasing bytewise order, each with
 * the join of all its operands, unpruned (as a partial merge keeps them): the
 * caller prunes for what it writes. One thread calls add/finish/next. */
#ifndef SEGD_EXTSORT_H
#define SEGD_EXTSORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/record.h"
#include "store/store.h"

typedef struct segd_extsort segd_extsort_t;

typedef struct segd_extsort_opts {
    uint64_t memory_bytes; /* both arenas, their indexes and the merge's read
                            * buffers together; at least 64 KiB */
    const char *dir;       /* existing directory for the run files (borrowed) */
    segd_store_t *store;   /* NULL, or a store whose free-disk reserve each
                            * spill respects (the runs share its disk) */
} segd_extsort_opts_t;

typedef struct segd_extsort_stats {
    uint64_t items;      /* pairs added */
    uint64_t runs;       /* run files spilled */
    uint64_t run_bytes;  /* their bytes */
    uint64_t remainder_bytes; /* pair bytes left in memory at finish */
} segd_extsort_stats_t;

segd_err_t segd_extsort_new(segd_extsort_t **out, const segd_extsort_opts_t *o, char *errstr,
                            size_t errstr_size);
/* Removes the run files and frees everything (any state). */
void segd_extsort_destroy(segd_extsort_t *x);

/* Copies one pair in. The operand must be a record (segd_record_encode) and
 * is decoded when its arena is sorted: one that does not decode fails that
 * spill or the merge (SEGD_ERR_INVALID), naming the user. A spill's failure
 * (disk, I/O) is returned by the add that next needs its arena, or by
 * finish. */
segd_err_t segd_extsort_add(segd_extsort_t *x, const char *user, size_t user_len,
                            const uint8_t *operand, size_t operand_len, char *errstr,
                            size_t errstr_size);
/* Ends the input: waits for the spill in progress, sorts what is left in
 * memory and opens the runs for the merge. */
segd_err_t segd_extsort_finish(segd_extsort_t *x, char *errstr, size_t errstr_size);
void segd_extsort_stats(const segd_extsort_t *x, segd_extsort_stats_t *st);

/* The next user in increasing bytewise order: *user, *joined (the join of all
 * its operands, nothing pruned) and *items (how many pairs it joined) are
 * borrowed until the next call; *joined is scratch the caller may change
 * (prune) meanwhile. *done = 1 (and nothing set) after the last. */
segd_err_t segd_extsort_next(segd_extsort_t *x, const char **user, size_t *user_len,
                             segd_profile_t **joined, uint64_t *items, int *done,
                             char *errstr, size_t errstr_size);

#endif
