/* `segd bench backfill` (issue 10): the seed workload for U users written as
 * JSON lines and as an Avro container file, then the backfill merge path
 * (load/reader on T threads -> WriteBatches with outbox entries, as `segd
 * backfill` writes them) from each format on 1 and 2 threads into fresh
 * stores, and the reader alone (parse, validate, encode; no store) so that
 * the store's share shows; then `--bulk` (load/bulk: sort, join, SST files,
 * ingest) within a memory budget, beside the merge path followed by the full
 * compaction that brings its store to the state a bulk load leaves. Each
 * variant runs in a forked child: its peak RSS is its own (wait4). Variants
 * are a table of function pointers. Prints a markdown report. */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/app.h"
#include "base/args.h"
#include "base/clock.h"
#include "bench/bench.h"
#include "consumer/apply.h"
#include "load/bulk.h"
#include "load/reader.h"
#include "wire/avro_codec.h"
#include "wire/json_event.h"
#include "workload/seed.h"

#define NOW_S 1800000000LL

typedef struct bf_args {
    int64_t users;
    int keep;
    char dir[256];
    char json[300], ocf[300];
} bf_args_t;

/* What a variant's child reports back through a pipe. */
typedef struct bf_result {
    uint64_t events, segments, skipped;
    double wall_s;
    int ok;
} bf_result_t;

typedef struct bf_variant bf_variant_t;
/* Runs in the child: loads input into (for store variants) a fresh store
 * at db. Returns 0 and fills r. */
typedef int (*bf_run_fn)(const bf_variant_t *v, const char *input, const char *db,
                         bf_result_t *r);

struct bf_variant {
    const char *name;   /* "merge", "parse only", ... */
    const char *format; /* "json" or "ocf": which input file */
    int threads;
    bf_run_fn run;
    int compact;       /* merge: a full compaction before close */
    int64_t memory_mb; /* bulk: the sort's budget */
};

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "segd bench backfill: %s: %s\n", what, why);
    return -1;
}

/* ---------- the input files ---------- */

static int write_inputs(const bf_args_t *a, uint64_t *events)
{
    segd_seed_opts_t so;
    segd_seed_t *g = NULL;
    segd_avro_file_writer_t *w = NULL;
    segd_event_t ev;
    char err[256];
    int rc = -1;
    segd_event_init(&ev);
    segd_seed_opts_default(&so);
    so.users = (uint64_t)a->users;
    so.now_ms = NOW_S * 1000;
    FILE *jf = fopen(a->json, "w");
    if (!jf)
        return fail(a->json, strerror(errno));
    if (segd_seed_new(&g, &so) || segd_avro_file_writer_open(&w, a->ocf, err, sizeof(err))) {
        fail("input", "cannot start the generator or the OCF writer");
        goto out_close;
    }
    *events = 0;
    while (segd_seed_next(g, &ev)) {
        if (segd_json_event_write(&ev, jf) || segd_avro_file_writer_append(w, &ev)) {
            fail("input", "write failed");
            goto out_close;
        }
        (*events)++;
    }
    rc = 0;
out_close:
    if (w && segd_avro_file_writer_close(w) && !rc)
        rc = fail(a->ocf, "close failed");
    if (fclose(jf) && !rc)
        rc = fail(a->json, strerror(errno));
    segd_seed_destroy(g);
    segd_event_free(&ev);
    return rc;
}

/* ---------- variants ---------- */

static segd_load_opts_t load_opts(int threads, segd_store_t *store)
{
    segd_load_opts_t o = {.prog = "segd bench backfill",
                          .threads = threads,
                          .policy = store ? segd_store_policy(store) : NULL,
                          .granularity_s = store ? segd_store_granularity(store) : 3600,
                          .errors = stderr};
    segd_limits_default(&o.limits);
    return o;
}

static int count_chunk(void *ctx, const segd_load_chunk_t *c)
{
    uint64_t *sum = ctx; /* touch the bytes a writer would copy */
    for (size_t i = 0; i < c->n_items; i++)
        *sum += c->items[i].operand_len + c->items[i].user[0];
    return 0;
}

/* The reader alone: read, parse, validate, encode; chunks dropped. */
static int run_parse_only(const bf_variant_t *v, const char *input, const char *db,
                          bf_result_t *r)
{
    (void)db;
    segd_load_opts_t o = load_opts(v->threads, NULL);
    segd_load_stats_t st;
    char err[256];
    uint64_t sum = 0;
    char *paths[1] = {(char *)input};
    double t0 = segd_mono_s();
    if (segd_load_files(&o, paths, 1, count_chunk, &sum, &st, err, sizeof(err)))
        return fail("parse only", err);
    r->wall_s = segd_mono_s() - t0;
    r->events = st.events;
    r->segments = st.segments;
    r->skipped = st.skipped;
    return 0;
}

typedef struct merge_ctx {
    segd_applier_t ap;
    int failed;
} merge_ctx_t;

/* As segd backfill's writer: batches of 1000 events with outbox entries. */
static int merge_chunk(void *ctx, const segd_load_chunk_t *c)
{
    merge_ctx_t *m = ctx;
    char err[256];
    for (size_t i = 0; i < c->n_items; i++) {
        const segd_load_item_t *it = &c->items[i];
        if (segd_applier_add_operand(&m->ap, it->user, it->user_len, it->operand,
                                     it->operand_len, it->n_segments, c->file, 0,
                                     it->record_no, 0) ||
            (segd_batch_count(m->ap.batch) >= 1000 &&
             segd_applier_flush(&m->ap, err, sizeof(err)))) {
            m->failed = 1;
            return -1;
        }
    }
    return 0;
}

/* The merge path into a fresh store, timed from open to close. */
static int run_merge(const bf_variant_t *v, const char *input, const char *db, bf_result_t *r)
{
    merge_ctx_t m = {0};
    segd_load_stats_t st;
    char err[256];
    char *paths[1] = {(char *)input};
    int rc = -1;
    double t0 = segd_mono_s();
    segd_store_t *store = segd_app_open_store("bench backfill", db, NOW_S, 0);
    if (!store)
        return -1;
    segd_load_opts_t o = load_opts(v->threads, store);
    if (segd_applier_init(&m.ap, store))
        goto out_close;
    segd_applier_enable_outbox(&m.ap);
    if (segd_load_files(&o, paths, 1, merge_chunk, &m, &st, err, sizeof(err)) || m.failed ||
        segd_applier_flush(&m.ap, err, sizeof(err))) {
        fail("merge", m.failed ? "store write failed" : err);
        goto out_free;
    }
    if (v->compact && segd_store_compact(store, err, sizeof(err))) {
        fail("merge + compact", err);
        goto out_free;
    }
    r->events = st.events;
    r->segments = st.segments;
    r->skipped = st.skipped;
    rc = 0;
out_free:
    segd_applier_free(&m.ap);
out_close:
    segd_store_close(store);
    r->wall_s = segd_mono_s() - t0;
    return rc;
}

typedef struct bulk_ctx {
    segd_bulk_t *bulk;
    char err[256];
} bulk_ctx_t;

/* As segd backfill --bulk: every item to the sort. */
static int bulk_chunk(void *ctx, const segd_load_chunk_t *c)
{
    bulk_ctx_t *b = ctx;
    for (size_t i = 0; i < c->n_items; i++) {
        const segd_load_item_t *it = &c->items[i];
        if (segd_bulk_add(b->bulk, (const char *)it->user, it->user_len, it->operand,
                          it->operand_len, it->n_segments, b->err, sizeof(b->err)))
            return -1;
    }
    return 0;
}

/* Bulk into a fresh store with outbox entries, timed from open to close. */
static int run_bulk(const bf_variant_t *v, const char *input, const char *db, bf_result_t *r)
{
    bulk_ctx_t b = {0};
    segd_load_stats_t st;
    segd_bulk_opts_t bo;
    char *paths[1] = {(char *)input};
    int rc = -1;
    double t0 = segd_mono_s();
    segd_store_t *store = segd_app_open_store("bench backfill", db, NOW_S, 0);
    if (!store)
        return -1;
    segd_load_opts_t o = load_opts(v->threads, store);
    segd_bulk_opts_default(&bo);
    bo.memory_bytes = (uint64_t)v->memory_mb << 20;
    if (segd_bulk_new(&b.bulk, store, &bo, b.err, sizeof(b.err)) ||
        segd_load_files(&o, paths, 1, bulk_chunk, &b, &st, b.err, sizeof(b.err)) ||
        segd_bulk_finish(b.bulk, NULL, b.err, sizeof(b.err))) {
        fail("bulk", b.err);
        goto out_close;
    }
    r->events = st.events;
    r->segments = st.segments;
    r->skipped = st.skipped;
    rc = 0;
out_close:
    if (b.bulk)
        segd_bulk_destroy(b.bulk);
    segd_store_close(store);
    r->wall_s = segd_mono_s() - t0;
    return rc;
}

static const bf_variant_t VARIANTS[] = {
    {"parse only", "json", 1, run_parse_only, 0, 0},
    {"parse only", "json", 2, run_parse_only, 0, 0},
    {"parse only", "ocf", 1, run_parse_only, 0, 0},
    {"parse only", "ocf", 2, run_parse_only, 0, 0},
    {"merge", "json", 1, run_merge, 0, 0},
    {"merge", "json", 2, run_merge, 0, 0},
    {"merge", "ocf", 1, run_merge, 0, 0},
    {"merge", "ocf", 2, run_merge, 0, 0},
    {"merge + compact", "json", 2, run_merge, 1, 0},
    {"merge + compact", "ocf", 2, run_merge, 1, 0},
    {"bulk 1024 MiB", "json", 1, run_bulk, 0, 1024},
    {"bulk 1024 MiB", "json", 2, run_bulk, 0, 1024},
    {"bulk 1024 MiB", "ocf", 1, run_bulk, 0, 1024},
    {"bulk 1024 MiB", "ocf", 2, run_bulk, 0, 1024},
    {"bulk 64 MiB", "json", 2, run_bulk, 0, 64},
    {"bulk 64 MiB", "ocf", 2, run_bulk, 0, 64},
};

/* ---------- the driver ---------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* One variant in a forked child; peak RSS from wait4. */
static int run_forked(const bf_args_t *a, const bf_variant_t *v, int idx, bf_result_t *r,
                      double *rss_mib)
{
    int fds[2];
    char db[320];
    snprintf(db, sizeof(db), "%s/db-%d", a->dir, idx);
    if (pipe(fds))
        return fail("pipe", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return fail("fork", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        bf_result_t res = {0};
        res.ok = v->run(v, !strcmp(v->format, "json") ? a->json : a->ocf, db, &res) == 0;
        ssize_t wr = write(fds[1], &res, sizeof(res));
        _exit(wr == (ssize_t)sizeof(res) && res.ok ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], r, sizeof(*r));
    close(fds[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return fail("wait4", strerror(errno));
    *rss_mib = (double)ru.ru_maxrss / 1024.0;
    nftw(db, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (got != (ssize_t)sizeof(*r) || !WIFEXITED(status) || WEXITSTATUS(status) || !r->ok)
        return fail(v->name, "the variant failed");
    return 0;
}

static int parse_args(int argc, char **argv, bf_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"keep", no_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, have_dir = 0;
    a->users = 10000;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-backfill-XXXXXX");
    optind = 1;
    while ((c = segd_args_next("bench backfill", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'u':
            if (segd_arg_int("bench backfill", "--users", optarg, 1, 10000000, &a->users))
                return -1;
            break;
        case 'd':
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            break;
        case 'k': a->keep = 1; break;
        default:
            if (c != 'h')
                return -1; /* said by segd_args_next */
            fprintf(stdout,
                    "usage: segd bench backfill [--users N] [--dir DIR] [--keep]\n"
                    "  the seed workload for N users (default 10000: 10^7 segment facts) as\n"
                    "  JSON lines and OCF; parse only, merge path, merge + compact and bulk\n"
                    "  loads side by side, each in its own process (peak RSS); markdown out\n");
            return c == 'h' ? 1 : -1;
        }
    }
    if (have_dir ? mkdir(a->dir, 0755) && errno != EEXIST : !mkdtemp(a->dir))
        return fail(a->dir, strerror(errno));
    snprintf(a->json, sizeof(a->json), "%s/seed.jsonl", a->dir);
    snprintf(a->ocf, sizeof(a->ocf), "%s/seed.avro", a->dir);
    return 0;
}

static void print_row(const bf_variant_t *v, const bf_result_t *r, double rss,
                      double one_thread_rate)
{
    double rate = r->wall_s > 0 ? (double)r->segments / r->wall_s : 0;
    printf("| %s | %s | %d | %llu | %.2f | %.2f M | %.2fx | %.0f |\n", v->name, v->format,
           v->threads, (unsigned long long)r->segments, r->wall_s, rate / 1e6,
           one_thread_rate > 0 ? rate / one_thread_rate : 1.0, rss);
}

int segd_bench_backfill(int argc, char **argv)
{
    bf_args_t a = {0};
    uint64_t events = 0;
    struct stat js, os;
    int rc = SEGD_EXIT_FAIL;
    int pa = parse_args(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    double t0 = segd_mono_s();
    if (write_inputs(&a, &events) || stat(a.json, &js) || stat(a.ocf, &os))
        goto out_rm;
    printf("## segd bench backfill\n\n");
    printf("Seed workload: %lld users, %llu events, %llu segment facts; JSON lines %.1f MiB, "
           "OCF (deflate) %.1f MiB; written in %.1f s. %ld online cores.\n\n",
           (long long)a.users, (unsigned long long)events,
           (unsigned long long)events * 20, (double)js.st_size / 1048576.0,
           (double)os.st_size / 1048576.0, segd_mono_s() - t0, sysconf(_SC_NPROCESSORS_ONLN));
    printf("| variant | input | threads | segments | wall s | segments/s | vs 1 thread | "
           "peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n");
    double base = 0;
    for (size_t i = 0; i < sizeof(VARIANTS) / sizeof(VARIANTS[0]); i++) {
        const bf_variant_t *v = &VARIANTS[i];
        bf_result_t r;
        double rss;
        if (run_forked(&a, v, (int)i, &r, &rss))
            goto out_rm;
        if (r.skipped || r.events != events) {
            fail(v->name, "not every event was delivered");
            goto out_rm;
        }
        double rate = r.wall_s > 0 ? (double)r.segments / r.wall_s : 0;
        if (v->threads == 1)
            base = rate;
        print_row(v, &r, rss, base);
    }
    printf("\nmerge: from the file to a closed store (open, WriteBatches of 1000 events "
           "with outbox entries, close); merge + compact: the same and a full compaction "
           "before close (the state a bulk load leaves: one joined record per user); "
           "bulk N MiB: sort within N MiB, join, outbox entries, SST files, ingest, close; "
           "parse only: the reader's threads alone. \"vs 1 thread\" compares with the row "
           "above it that has 1 thread.\n");
    rc = SEGD_EXIT_OK;
out_rm:
    if (!a.keep)
        nftw(a.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
