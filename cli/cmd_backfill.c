/* `segd backfill --db DIR [--now S] [--threads N] [--bulk [--memory-mb M]]
 * FILE...` applies SegmentEvents from JSON-lines files and Avro object
 * container files, plain or compressed with gzip or zstd. load/reader
 * decodes them on N threads, and this file is the one store writer. Events
 * go through the merge path as WriteBatches of merge operands, or with
 * --bulk they are sorted, joined per user and ingested as SST files
 * (load/bulk.h). A bad record is reported as file:line (or file:#record)
 * with its reason, counted and skipped. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/progress.h"
#include "cli/cli.h"
#include "consumer/apply.h"
#include "load/bulk.h"
#include "load/reader.h"

#define BACKFILL_BATCH 1000

typedef struct backfill {
    segd_applier_t ap;
    segd_bulk_t *bulk; /* --bulk: chunks go to the sort instead of batches */
    uint64_t bulk_events, bulk_segments;
    int bulk_phase;    /* the phase the bar shows; -1 = reading */
    segd_progress_t bar;
    uint64_t bytes_done;
    int failed; /* a store write failed: stop */
    volatile sig_atomic_t *stop;
} backfill_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: segd backfill --db DIR [--now UNIX_SECONDS] [--no-changes] [--threads N]\n"
               "                     [--bulk [--memory-mb M]] FILE...\n"
               "  FILE: JSON lines (one SegmentEvent per line) or an Avro object\n"
               "  container file of SegmentEvent (codec null, deflate or zstandard), either\n"
               "  of them gzip- or zstd-compressed. The format is found by the file's\n"
               "  magic bytes, not its name (so .gz, .zst, .avro, .jsonl all work).\n"
               "  --threads N: decode on N threads (default: the online cores but one,\n"
               "  for the writer; with --bulk every core); blocks are applied in any\n"
               "  order, which the store's join does not mind.\n"
               "  Exit 0 if every record applied, 3 if some were skipped (reported on\n"
               "  stderr as file:line or file:#record), 1 on failure.\n"
               "  Events older than the store's GC watermark + grace (too_late) or more\n"
               "  than 10 min after now (from_future) are skipped; a fresh store (no\n"
               "  watermark yet) takes history of any age.\n"
               "  The changes go to the outbox, published by the next `segd run` to\n"
               "  the change stream; --no-changes skips that (caches reload a snapshot).\n"
               "  SIGINT/SIGTERM stop it cleanly: what was written stays (applying a file\n"
               "  again is harmless: the join is idempotent).\n"
               "  --bulk: for large dumps into an empty store or new users: events are\n"
               "  sorted by user (spilling sorted runs next to the store beyond\n"
               "  --memory-mb, default 1024), joined per user and written as SST files\n"
               "  that RocksDB ingests whole (no WAL, no memtable, nothing to compact\n"
               "  later). Users the store already holds go through the merge path, one\n"
               "  joined operand each; the result is the same as without --bulk. Nothing\n"
               "  is written before all input is read; outbox entries (one delta per\n"
               "  user) are written before the SST files are ingested. Below the\n"
               "  free-disk reserve plus the expected SST bytes it refuses (exit 1).\n"
               "  --memory-mb bounds the sort; the readers add about 2 MiB per thread.\n"
               "  A signal stops it while it reads (nothing written); once the outbox\n"
               "  entries are written it completes the ingest first.\n");
}

/* Writes the batch, waiting while the disk is nearly full (SEGD_ERR_IO from
 * the store's free-space check) until space returns or a signal stops it. */
static segd_err_t flush_waiting(backfill_t *b, char *err, size_t n)
{
    segd_err_t e;
    int said = 0;
    while ((e = segd_applier_flush(&b->ap, err, n)) == SEGD_ERR_IO && !*b->stop) {
        if (!said++)
            fprintf(stderr, "segd backfill: waiting: %s\n", err);
        segd_sleep_ms(1000);
    }
    if (!e && said)
        fprintf(stderr, "segd backfill: resumed\n");
    return e;
}

/* The store writer: one chunk of encoded events into WriteBatches of about
 * BACKFILL_BATCH events, each with its outbox entry (the change stream's
 * source is the file and the record's line or number). */
static int apply_chunk(void *ctx, const segd_load_chunk_t *c)
{
    backfill_t *b = ctx;
    char err[256];
    for (size_t i = 0; i < c->n_items; i++) {
        const segd_load_item_t *it = &c->items[i];
        segd_err_t e = segd_applier_add_operand(&b->ap, it->user, it->user_len, it->operand,
                                                it->operand_len, it->n_segments, c->file, 0,
                                                it->record_no, 0);
        if (e)
            snprintf(err, sizeof(err), "%s", segd_err_str(e));
        else if (segd_batch_count(b->ap.batch) >= BACKFILL_BATCH)
            e = flush_waiting(b, err, sizeof(err));
        if (e) {
            fprintf(stderr, "segd backfill: store write failed: %s\n", err);
            b->failed = 1;
            return -1;
        }
    }
    b->bytes_done += c->bytes;
    segd_progress_update(&b->bar, b->bytes_done, b->ap.events, b->ap.segments);
    return *b->stop ? -1 : 0;
}

/* --bulk: the chunk's pairs go to the external sort (load/bulk.h), which
 * writes nothing to the store before segd_bulk_finish. */
static int bulk_chunk(void *ctx, const segd_load_chunk_t *c)
{
    backfill_t *b = ctx;
    char err[256];
    for (size_t i = 0; i < c->n_items; i++) {
        const segd_load_item_t *it = &c->items[i];
        if (segd_bulk_add(b->bulk, (const char *)it->user, it->user_len, it->operand,
                          it->operand_len, it->n_segments, err, sizeof(err)) != SEGD_OK) {
            fprintf(stderr, "segd backfill: bulk load failed: %s\n", err);
            b->failed = 1;
            return -1;
        }
    }
    b->bulk_events += c->n_items;
    b->bulk_segments += c->segments;
    b->bytes_done += c->bytes;
    segd_progress_update(&b->bar, b->bytes_done, b->bulk_events, b->bulk_segments);
    return *b->stop ? -1 : 0;
}

/* The bar follows finish's phases (sort, write, ingest), each with its own
 * total, so its ETA is the phase's. */
static void bulk_progress(void *ctx, segd_bulk_phase_t phase, uint64_t done, uint64_t total)
{
    backfill_t *b = ctx;
    if (b->bulk_phase != (int)phase) {
        int off = b->bar.out == NULL;
        segd_progress_end(&b->bar);
        segd_progress_init(&b->bar, stderr, segd_bulk_phase_name(phase), total, off);
        b->bulk_phase = (int)phase;
    }
    b->bar.total = total;
    segd_progress_update(&b->bar, done, b->bulk_events, b->bulk_segments);
}

/* Sorts, joins, writes and ingests what the reader delivered; prints the
 * bulk line of the summary. */
static int bulk_finish(backfill_t *b, double t0, const segd_load_stats_t *st, int threads)
{
    segd_bulk_stats_t bs;
    char err[512];
    if (segd_bulk_finish(b->bulk, &bs, err, sizeof(err)) != SEGD_OK) {
        segd_progress_end(&b->bar);
        fprintf(stderr, "segd backfill: bulk load failed: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    segd_progress_end(&b->bar);
    double dt = segd_mono_s() - t0;
    printf("applied %llu events (%llu segments), skipped %llu, %.2f s, %.0f segments/s, "
           "%d threads\n",
           (unsigned long long)b->bulk_events, (unsigned long long)b->bulk_segments,
           (unsigned long long)st->skipped, dt, dt > 0 ? (double)b->bulk_segments / dt : 0.0,
           threads);
    printf("bulk: %llu users: %llu new (%llu SST files, %llu bytes), %llu already in the "
           "store (merge path), %llu with nothing left; %llu sort runs spilled; %llu outbox "
           "entries; sort %.2f s, write %.2f s, ingest %.2f s\n",
           (unsigned long long)bs.users, (unsigned long long)bs.users_sst,
           (unsigned long long)bs.sst_files, (unsigned long long)bs.sst_bytes,
           (unsigned long long)bs.users_merged, (unsigned long long)bs.users_empty,
           (unsigned long long)bs.runs, (unsigned long long)bs.outbox_entries, bs.sort_s,
           bs.write_s, bs.ingest_s);
    return st->skipped ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
}

/* By default there is one decoding thread per online core but one, because
 * the writer (this thread, inserting into RocksDB's memtable) keeps that core
 * busy. On 2 cores one decoder and the writer already use about 1.6 of them
 * (bench/RESULTS.md). A bulk load writes nothing while it reads, since its
 * sort only copies, so it decodes on every core. */
static int default_threads(int bulk)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN) - (bulk ? 0 : 1);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

typedef struct backfill_args {
    const char *db;
    int64_t now_s, threads, memory_mb;
    int changes, bulk;
    char *const *files;
    int n_files;
} backfill_args_t;

/* 0 parsed, 1 --help, 2 usage error (said). */
static int parse_args(int argc, char **argv, backfill_args_t *a)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"now", required_argument, 0, 'n'},
                                         {"no-changes", no_argument, 0, 'x'},
                                         {"threads", required_argument, 0, 't'},
                                         {"bulk", no_argument, 0, 'b'},
                                         {"memory-mb", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    *a = (backfill_args_t){.changes = 1};
    optind = 1;
    while ((c = segd_args_next("backfill", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'd': a->db = optarg; break;
        case 'n':
            if (segd_arg_int("backfill", "--now", optarg, 1, INT64_MAX / 1000, &a->now_s))
                return 2;
            break;
        case 't':
            if (segd_arg_int("backfill", "--threads", optarg, 1, 256, &a->threads))
                return 2;
            break;
        case 'x': a->changes = 0; break;
        case 'b': a->bulk = 1; break;
        case 'm':
            /* Below 16 MiB the sort's fixed buffers would take most of its budget. */
            if (segd_arg_int("backfill", "--memory-mb", optarg, 16, 1 << 20, &a->memory_mb))
                return 2;
            break;
        case 'h': usage(stdout); return 1;
        default: return 2; /* said by segd_args_next */
        }
    }
    if (!a->db || optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (!a->threads)
        a->threads = default_threads(a->bulk);
    if (a->memory_mb && !a->bulk) {
        fprintf(stderr, "segd backfill: --memory-mb applies to --bulk only\n");
        return 2;
    }
    a->files = argv + optind;
    a->n_files = argc - optind;
    return 0;
}

/* --bulk: the external sort that the chunks go to instead of batches. */
static int open_bulk(backfill_t *b, segd_store_t *store, const backfill_args_t *a)
{
    segd_bulk_opts_t bo;
    char err[512];
    segd_bulk_opts_default(&bo);
    if (a->memory_mb)
        bo.memory_bytes = (uint64_t)a->memory_mb << 20;
    bo.changes = a->changes;
    bo.stop = b->stop;
    bo.progress = bulk_progress;
    bo.progress_ctx = b;
    if (segd_bulk_new(&b->bulk, store, &bo, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd backfill: bulk load: %s\n", err);
        return -1;
    }
    return 0;
}

/* The merge path's end: writes the last batch and prints the summary. What
 * the readers delivered is written even when a signal stopped them, since
 * applying it again later is harmless. */
static int merge_finish(backfill_t *b, double t0, const segd_load_stats_t *st, int threads)
{
    char err[512];
    if (flush_waiting(b, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd backfill: store write failed: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    if (st->stopped) {
        fprintf(stderr, "segd backfill: stopped by a signal after %llu events\n",
                (unsigned long long)b->ap.events);
        return SEGD_EXIT_FAIL;
    }
    double dt = segd_mono_s() - t0;
    printf("applied %llu events (%llu segments), skipped %llu, %.2f s, %.0f segments/s, "
           "%d threads\n",
           (unsigned long long)b->ap.events, (unsigned long long)b->ap.segments,
           (unsigned long long)st->skipped, dt, dt > 0 ? (double)b->ap.segments / dt : 0.0,
           threads);
    return st->skipped ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
}

/* Reads every file into the merge path's batches, or into the bulk sort,
 * then finishes that path. Returns the exit code. */
static int load(backfill_t *b, segd_store_t *store, const backfill_args_t *a, double t0)
{
    char err[512];
    segd_load_opts_t lo = {.prog = "segd backfill",
                           .threads = (int)a->threads,
                           .policy = segd_store_policy(store),
                           .granularity_s = segd_store_granularity(store),
                           .stop = b->stop,
                           .errors = stderr};
    segd_load_stats_t st;
    segd_limits_default(&lo.limits);
    segd_progress_init(&b->bar, stderr, "bytes", 0, 0);
    b->bar.total = segd_load_total_size(a->files, a->n_files);
    segd_err_t le = segd_load_files(&lo, a->files, a->n_files,
                                    a->bulk ? bulk_chunk : apply_chunk, b, &st, err, sizeof(err));
    if (!a->bulk)
        segd_progress_end(&b->bar);
    if (le) {
        fprintf(stderr, "segd backfill: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    if (b->failed)
        return SEGD_EXIT_FAIL;
    if (!a->bulk)
        return merge_finish(b, t0, &st, (int)a->threads);
    if (st.stopped) { /* the sort has written nothing yet */
        segd_progress_end(&b->bar);
        fprintf(stderr, "segd backfill: stopped by a signal while reading: nothing loaded\n");
        return SEGD_EXIT_FAIL;
    }
    return bulk_finish(b, t0, &st, (int)a->threads);
}

int segd_cmd_backfill(int argc, char **argv)
{
    backfill_args_t a;
    int parsed = parse_args(argc, argv, &a);
    if (parsed)
        return parsed == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    segd_store_t *store = segd_app_open_store("backfill", a.db, a.now_s, 0);
    if (!store)
        return SEGD_EXIT_FAIL;
    backfill_t b = {0};
    b.stop = segd_app_stop_on_signals();
    int rc = SEGD_EXIT_FAIL;
    double t0 = segd_mono_s();
    if (segd_applier_init(&b.ap, store) != SEGD_OK)
        goto out_close;
    if (a.changes)
        segd_applier_enable_outbox(&b.ap);
    b.bulk_phase = -1;
    if (!a.bulk || open_bulk(&b, store, &a) == 0)
        rc = load(&b, store, &a, t0);
    if (b.bulk) /* removes its temporary files on every path */
        segd_bulk_destroy(b.bulk);
    segd_applier_free(&b.ap);
out_close:
    segd_store_close(store);
    return rc;
}
