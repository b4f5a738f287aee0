/* Reads files of SegmentEvents for backfill and bulk load, on worker threads:
 * the format is found by magic bytes (gzip, zstd, then inside an Avro object
 * container file or else JSON lines), and every event is parsed, validated,
 * checked against the store's time policy and encoded as a merge operand off
 * the caller's thread. The caller receives chunks of ready (user, operand)
 * items one at a time, so its store writer needs no lock. */
#ifndef SEGD_LOAD_READER_H
#define SEGD_LOAD_READER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "core/event.h"
#include "core/policy.h"

/* One event, decoded, validated and encoded: what a store write needs. The
 * bytes live in the chunk and are valid only during the chunk callback. */
typedef struct segd_load_item {
    const uint8_t *user;    /* user id bytes (valid UTF-8, no NUL, not terminated) */
    const uint8_t *operand; /* the merge operand: segd_record_encode of the profile */
    uint32_t user_len;
    uint32_t operand_len;   /* 0 for an event that changes nothing (still applied) */
    uint32_t n_segments;    /* the event's segment count (for counts and rates) */
    int64_t record_no;      /* line (JSON lines) or record number (OCF), from 1 */
} segd_load_item_t;

/* Items of one input block. Chunks of one file may arrive in any order (the
 * store's join is order-free, DESIGN §3); records refused in the block have
 * been reported on stderr as file:line / file:#record and are counted. */
typedef struct segd_load_chunk {
    const char *file;              /* the path as given (borrowed) */
    const segd_load_item_t *items; /* n_items, in input order within the chunk */
    size_t n_items;
    uint64_t segments;             /* sum of the items' n_segments */
    uint64_t skipped;              /* records refused in this block */
    uint64_t bytes;                /* input bytes (as stored, compressed) consumed */
} segd_load_chunk_t;

/* Called for one chunk at a time, never concurrently (from the thread that
 * called segd_load_files). Non-zero stops the load: no further chunks. */
typedef int (*segd_load_chunk_fn)(void *ctx, const segd_load_chunk_t *chunk);

typedef struct segd_load_opts {
    const char *prog;             /* prefix of file-level messages ("segd backfill") */
    int threads;                  /* decoding threads, >= 1 */
    segd_limits_t limits;         /* segd_event_validate's, and max_message per line */
    const segd_policy_t *policy;  /* too_late / from_future checks; NULL: none */
    int64_t granularity_s;        /* the store's expiry rounding */
    volatile sig_atomic_t *stop;  /* set by a signal handler: stop soon; may be NULL */
    FILE *errors;                 /* where refused records are reported (stderr) */
} segd_load_opts_t;

typedef struct segd_load_stats {
    uint64_t events, segments; /* handed to the callback */
    uint64_t skipped;          /* refused records and unreadable files or tails */
    uint64_t bytes_total;      /* sum of the input files' sizes */
    int stopped;               /* the callback or a signal ended the load early */
} segd_load_stats_t;

/* Reads every path in turn. A path that cannot be opened is reported and
 * counted as skipped. An unreadable tail, such as a truncated .gz, is
 * reported and counted after what was readable has been delivered. Memory
 * is bounded, because a fixed number of blocks of about 1 MiB of input each
 * is in flight. Returns SEGD_OK unless the reader itself failed (out of
 * memory, or no thread could start); bad input is never an error here, only
 * counted. A progress bar sums the chunks' bytes against
 * stats->bytes_total, which is set before the first chunk. */
segd_err_t segd_load_files(const segd_load_opts_t *o, char *const *paths, int n_paths,
                           segd_load_chunk_fn cb, void *ctx, segd_load_stats_t *stats,
                           char *errstr, size_t errstr_size);

/* The sum of the sizes of those paths that are regular files, which is what
 * segd_load_files sets stats->bytes_total to. A caller can size its progress
 * bar with it before the load starts. */
uint64_t segd_load_total_size(char *const *paths, int n);

#endif
