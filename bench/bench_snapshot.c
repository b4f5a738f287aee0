/* `segd bench snapshot` (DESIGN §8): the seed workload into a compacted
 * store, then, alternating in the same run, a raw full scan of the store
 * (decode every record, touch every entry) and a snapshot export to a local
 * directory at deflate levels 1 and 6; the snapshot's bytes against the
 * store's on-disk size; and the snapshot's load time (read, SHA-256, inflate,
 * decode every record), the part of a cache start that does not depend on
 * the cache's table. Prints a markdown report. */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "workload/seed.h"
#include "cache/edge.h"
#include "app/app.h"
#include "base/args.h"
#include "consumer/apply.h"
#include "cache/snapshot_read.h"
#include "publisher/snapshot.h"
#include "base/clock.h"

typedef struct snap_args {
    int64_t users, rounds, buckets;
    int keep;
    char dir[256];
} snap_args_t;

typedef struct scan_sum {
    uint64_t records, entries, checksum;
} scan_sum_t;

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "segd bench snapshot: %s: %s\n", what, why);
    return -1;
}

static int scan_cb(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    scan_sum_t *s = ctx;
    (void)user, (void)len;
    s->records++;
    s->entries += p->n;
    for (size_t i = 0; i < p->n; i++)
        s->checksum += (uint64_t)p->entries[i].segment_id ^ (uint64_t)p->entries[i].expiry_s;
    return 0;
}

static int load_cb(void *ctx, int32_t partition, const char *user, size_t len,
                   const segd_profile_t *p)
{
    (void)partition;
    return scan_cb(ctx, user, len, p);
}

static int fill(segd_store_t *s, const snap_args_t *a, int64_t now_ms)
{
    segd_seed_opts_t so;
    segd_seed_t *g = NULL;
    segd_event_t ev;
    segd_applier_t ap;
    char err[512] = "";
    segd_seed_opts_default(&so);
    so.users = (uint64_t)a->users;
    so.now_ms = now_ms;
    if (segd_seed_new(&g, &so) || segd_applier_init(&ap, s))
        return fail("setup", "out of memory");
    segd_event_init(&ev);
    int rc = 0;
    while (!rc && segd_seed_next(g, &ev)) {
        if (segd_applier_add(&ap, &ev))
            rc = fail("encode", "out of memory");
        else if (segd_batch_count(ap.batch) >= 1000 && segd_applier_flush(&ap, err, sizeof(err)))
            rc = fail("write", err);
    }
    if (!rc && segd_applier_flush(&ap, err, sizeof(err)))
        rc = fail("write", err);
    if (!rc && segd_store_compact(s, err, sizeof(err)))
        rc = fail("compact", err);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    return rc;
}

#define VARIANTS 4
static const struct {
    segd_ocf_codec_t codec;
    int level;
} variants[VARIANTS] = {{SEGD_OCF_DEFLATE, 1}, {SEGD_OCF_DEFLATE, 6}, {SEGD_OCF_ZSTANDARD, 1},
                        {SEGD_OCF_ZSTANDARD, 9}};

typedef struct timing {
    double scan_s, export_s[VARIANTS], load_s, cache_s;
    uint64_t bytes[VARIANTS];
    scan_sum_t scan, load;
} timing_t;

static int one_export(segd_store_t *s, const snap_args_t *a, int i, timing_t *t)
{
    char dest[300], err[512] = "";
    segd_snapshot_opts_t o;
    segd_manifest_t m;
    segd_snapshot_opts_default(&o);
    o.topic = "bench"; /* the store has no offsets: --buckets units of this topic */
    o.buckets = (uint32_t)a->buckets;
    o.codec = variants[i].codec;
    o.level = variants[i].level;
    snprintf(dest, sizeof(dest), "%s/snap-%d", a->dir, i);
    double t0 = segd_mono_s();
    if (segd_snapshot_export(s, dest, &o, &m, NULL, err, sizeof(err))) {
        segd_manifest_free(&m);
        return fail("export", err);
    }
    double dt = segd_mono_s() - t0;
    if (t->export_s[i] == 0 || dt < t->export_s[i])
        t->export_s[i] = dt;
    t->bytes[i] = 0;
    for (size_t f = 0; f < m.n_files; f++)
        t->bytes[i] += m.files[f].bytes;
    segd_manifest_free(&m);
    return 0;
}

static int edge_cb(void *ctx, int32_t partition, const char *user, size_t len,
                   const segd_profile_t *p)
{
    (void)partition;
    return segd_edge_put(ctx, user, len, p) != SEGD_OK;
}

/* What `segd cache` does at start: the snapshot into an edge table. */
static int one_cache_load(const snap_args_t *a, int64_t now_ms, timing_t *t)
{
    char src[300], err[512] = "";
    segd_manifest_t m;
    segd_edge_opts_t eo;
    segd_edge_t *e = NULL;
    segd_edge_opts_default(&eo);
    eo.now_ms = now_ms;
    snprintf(src, sizeof(src), "%s/snap-0", a->dir);
    if (segd_edge_new(&e, &eo))
        return fail("edge", "out of memory");
    double t0 = segd_mono_s();
    segd_snapshot_read_opts_t ro = {.threads = 2}; /* as segd cache */
    int rc = segd_snapshot_read(src, &ro, &m, edge_cb, e, err, sizeof(err)) != SEGD_OK;
    double dt = segd_mono_s() - t0;
    segd_manifest_free(&m);
    segd_edge_destroy(e);
    if (rc)
        return fail("cache load", err);
    if (t->cache_s == 0 || dt < t->cache_s)
        t->cache_s = dt;
    return 0;
}

static int one_load(const snap_args_t *a, timing_t *t)
{
    char src[300], err[512] = "";
    segd_manifest_t m;
    snprintf(src, sizeof(src), "%s/snap-0", a->dir);
    memset(&t->load, 0, sizeof(t->load));
    double t0 = segd_mono_s();
    segd_err_t e = segd_snapshot_read(src, NULL, &m, load_cb, &t->load, err, sizeof(err));
    double dt = segd_mono_s() - t0;
    if (e) {
        segd_manifest_free(&m);
        return fail("load", err);
    }
    if (t->load_s == 0 || dt < t->load_s)
        t->load_s = dt;
    segd_manifest_free(&m);
    return 0;
}

/* Best of `rounds` for each, interleaved so that noise hits all alike. */
static int measure(segd_store_t *s, const snap_args_t *a, int64_t now_ms, timing_t *t)
{
    char err[512] = "";
    for (int64_t r = 0; r < a->rounds; r++) {
        memset(&t->scan, 0, sizeof(t->scan));
        double t0 = segd_mono_s();
        if (segd_store_scan(s, scan_cb, &t->scan, err, sizeof(err)))
            return fail("scan", err);
        double dt = segd_mono_s() - t0;
        if (t->scan_s == 0 || dt < t->scan_s)
            t->scan_s = dt;
        for (int i = 0; i < VARIANTS; i++)
            if (one_export(s, a, i, t))
                return -1;
        if (one_load(a, t) || one_cache_load(a, now_ms, t))
            return -1;
    }
    if (t->load.records != t->scan.records || t->load.checksum != t->scan.checksum)
        return fail("load", "the snapshot does not hold what the scan read");
    return 0;
}

static void report(const snap_args_t *a, const timing_t *t, const segd_store_stats_t *st)
{
    double e = (double)t->scan.entries;
    printf("## segd bench snapshot --users %" PRId64 " --buckets %" PRId64 " --rounds %" PRId64
           "\n\n", a->users, a->buckets, a->rounds);
    printf("%" PRIu64 " users, %" PRIu64 " stored entries (%" PRIu64 " live), store on disk "
           "%" PRIu64 " bytes (%.3f B/entry) after full compaction; best of %" PRId64
           " rounds\n\n", t->scan.records, t->scan.entries, st->live_segments, st->sst_bytes,
           (double)st->sst_bytes / e, a->rounds);
    printf("| step | seconds | entries/s | bytes | bytes/entry | vs store |\n"
           "|---|---|---|---|---|---|\n");
    printf("| raw full scan (decode + touch every entry) | %.3f | %.0f | | | |\n", t->scan_s,
           e / t->scan_s);
    for (int i = 0; i < VARIANTS; i++)
        printf("| export, %s level %d | %.3f | %.0f | %" PRIu64 " | %.2f | %.2fx |\n",
               segd_ocf_codec_name(variants[i].codec), variants[i].level, t->export_s[i],
               e / t->export_s[i], t->bytes[i], (double)t->bytes[i] / e,
               (double)t->bytes[i] / (double)st->sst_bytes);
    printf("| load the deflate-1 snapshot (read, SHA-256, inflate, decode) | %.3f | %.0f | | | |\n",
           t->load_s, e / t->load_s);
    printf("| load the deflate-1 snapshot into an edge table (`segd cache` start) | %.3f | %.0f "
           "| | | |\n", t->cache_s, e / t->cache_s);
    double speed = t->scan_s / t->export_s[0];
    double size = (double)t->bytes[0] / (double)st->sst_bytes;
    printf("\nexport speed / raw scan speed (deflate 1, the default): %.2f (target >= 0.50: %s); snapshot / "
           "store size: %.2fx (target <= 1.2x: %s)\n", speed, speed >= 0.5 ? "met" : "missed",
           size, size <= 1.2 ? "met" : "missed");
}

static int parse(int argc, char **argv, snap_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"rounds", required_argument, 0, 'r'},
                                         {"buckets", required_argument, 0, 'b'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"keep", no_argument, 0, 'k'},
                                         {0, 0, 0, 0}};
    int c, have_dir = 0;
    optind = 1;
    a->users = 20000;
    a->rounds = 3;
    a->buckets = 32;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-snapshot-XXXXXX");
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 1;
        if (c == 'u')
            bad = segd_arg_int("bench", "--users", optarg, 1, 100000000, &a->users);
        else if (c == 'r')
            bad = segd_arg_int("bench", "--rounds", optarg, 1, 100, &a->rounds);
        else if (c == 'b')
            bad = segd_arg_int("bench", "--buckets", optarg, 1, 65536, &a->buckets) ||
                  (a->buckets & (a->buckets - 1));
        else if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            bad = 0;
        } else if (c == 'k') {
            a->keep = 1;
            bad = 0;
        }
        if (bad) {
            fprintf(stderr, "usage: segd bench snapshot [--users N] [--rounds R] "
                            "[--buckets B] [--dir DIR] [--keep]\n");
            return -1;
        }
    }
    if (!have_dir && !mkdtemp(a->dir))
        return fail("mkdtemp", a->dir);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

int segd_bench_snapshot(int argc, char **argv)
{
    snap_args_t a = {0};
    if (parse(argc, argv, &a))
        return SEGD_EXIT_USAGE;
    char path[300], err[512] = "";
    snprintf(path, sizeof(path), "%s/db", a.dir);
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = path;
    o.now_ms = now_ms;
    segd_store_t *s = NULL;
    segd_store_stats_t st;
    timing_t t;
    memset(&t, 0, sizeof(t));
    int rc = SEGD_EXIT_FAIL;
    if (segd_store_open(&s, &o, err, sizeof(err))) {
        fail("open", err);
        goto out;
    }
    if (fill(s, &a, now_ms) || segd_store_stats(s, &st, err, sizeof(err)) || measure(s, &a, now_ms, &t))
        goto out;
    report(&a, &t, &st);
    rc = SEGD_EXIT_OK;
out:
    segd_store_close(s);
    if (!a.keep)
        nftw(a.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
