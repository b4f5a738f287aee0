/* `segd bench snapshot` (DESIGN §8): the seed workload into a compacted
 * store, then, alternating in the same run, a raw full scan of the store
 * (decode every record, touch every entry) and a snapshot export to a local
 * directory in both record formats (avro, native) and several codecs; the
 * same scan on the export's thread count, split as its lanes split it, which
 * the export rates are compared with; the snapshots' bytes against the
 * store's on-disk size; and each format's load time (read, SHA-256,
 * decompress, decode every record), the part of a cache start that does not
 * depend on the cache's table. Prints a markdown report. */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <pthread.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/record.h"
#include "workload/seed.h"
#include "cache/edge.h"
#include "app/app.h"
#include "base/args.h"
#include "consumer/apply.h"
#include "snapread/snapshot.h"
#include "publisher/snapshot.h"
#include "base/clock.h"

#define EXPORT_THREADS 2 /* the default of segd_snapshot_opts_default */
#define DAY_MS 86400000LL
#define GC_LAG_MS (3 * DAY_MS)

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
    /* a store in steady state: W at its default distance (horizon 24 h +
     * grace 2 days), and the compaction has dropped what is dead below it */
    segd_policy_set_gc_watermark(segd_store_policy(s), now_ms - GC_LAG_MS);
    if (!rc && segd_store_compact(s, err, sizeof(err)))
        rc = fail("compact", err);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    return rc;
}

/* Variant 0 is the avro default and NATIVE_DEFAULT the native one (issue
 * 11): the two that the loads and the report's ratios compare. */
#define VARIANTS 6
#define NATIVE_DEFAULT 2
static const struct {
    segd_snapfmt_t format;
    segd_ocf_codec_t codec;
    int level;
    int copy; /* native: copy values that need no pruning */
} variants[VARIANTS] = {{SEGD_SNAPFMT_AVRO, SEGD_OCF_DEFLATE, 1, 0},
                        {SEGD_SNAPFMT_AVRO, SEGD_OCF_ZSTANDARD, 1, 0},
                        {SEGD_SNAPFMT_NATIVE, SEGD_OCF_NULL, 0, 1},
                        {SEGD_SNAPFMT_NATIVE, SEGD_OCF_NULL, 0, 0},
                        {SEGD_SNAPFMT_NATIVE, SEGD_OCF_DEFLATE, 1, 1},
                        {SEGD_SNAPFMT_NATIVE, SEGD_OCF_ZSTANDARD, 1, 1}};

#define LOADS 2 /* the avro and the native default */
static const int load_variant[LOADS] = {0, NATIVE_DEFAULT};

typedef struct timing {
    double scan_s, scan2_s, export_s[VARIANTS], load_s[LOADS], cache_s[LOADS];
    double later_scan2_s, later_export_s; /* a day later, before any compaction */
    uint64_t later_entries;
    uint64_t bytes[VARIANTS];
    scan_sum_t scan, scan2, load[LOADS];
} timing_t;

/* The raw scan on as many threads as the export's lanes, split as they
 * split it (each thread reads the view and decodes the records of its units:
 * partition % lanes, the units being partitions 0..P-1 by murmur2): like is
 * compared with like. */
typedef struct scan_lane {
    segd_store_view_t *v;
    segd_prune_t rule;
    uint32_t lane, lanes, buckets;
    segd_profile_t p;
    scan_sum_t sum;
    int bad;
} scan_lane_t;

static int lane_value(void *ctx, const char *user, size_t len, const uint8_t *value,
                      size_t vlen)
{
    scan_lane_t *l = ctx;
    if ((uint32_t)segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, len,
                                    (int32_t)l->buckets) % l->lanes != l->lane)
        return 0;
    if (segd_record_decode(value, vlen, &l->p) != SEGD_OK) {
        l->bad = 1;
        return 1;
    }
    segd_profile_prune(&l->p, &l->rule);
    return l->p.n || l->p.erased_before_ms ? scan_cb(&l->sum, user, len, &l->p) : 0;
}

static void *scan_lane_main(void *arg)
{
    scan_lane_t *l = arg;
    char err[256];
    if (segd_store_view_scan_raw(l->v, lane_value, l, err, sizeof(err)))
        l->bad = 1;
    return NULL;
}

static int parallel_scan(segd_store_t *s, const snap_args_t *a, uint32_t lanes, scan_sum_t *sum)
{
    segd_store_view_t *v = NULL;
    char err[512];
    if (segd_store_view_open(s, &v, err, sizeof(err)))
        return fail("view", err);
    scan_lane_t l[16];
    pthread_t t[16];
    int bad = 0;
    for (uint32_t i = 0; i < lanes; i++) {
        l[i] = (scan_lane_t){.v = v, .lane = i, .lanes = lanes, .buckets = (uint32_t)a->buckets};
        segd_policy_rule(segd_store_policy(s), &l[i].rule, 1);
        segd_profile_init(&l[i].p);
    }
    for (uint32_t i = 1; i < lanes; i++)
        if (pthread_create(&t[i], NULL, scan_lane_main, &l[i]))
            return fail("scan", "no thread");
    scan_lane_main(&l[0]);
    memset(sum, 0, sizeof(*sum));
    for (uint32_t i = 0; i < lanes; i++) {
        if (i)
            pthread_join(t[i], NULL);
        bad |= l[i].bad;
        sum->records += l[i].sum.records;
        sum->entries += l[i].sum.entries;
        sum->checksum += l[i].sum.checksum;
        segd_profile_free(&l[i].p);
    }
    segd_store_view_close(v);
    return bad ? fail("scan", "a record does not decode") : 0;
}

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
    o.format = variants[i].format;
    o.native_copy = variants[i].copy;
    o.threads = EXPORT_THREADS;
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
static int one_cache_load(const snap_args_t *a, int64_t now_ms, int k, timing_t *t)
{
    char src[300], err[512] = "";
    segd_manifest_t m;
    segd_edge_opts_t eo;
    segd_edge_t *e = NULL;
    segd_edge_opts_default(&eo);
    eo.now_ms = now_ms;
    snprintf(src, sizeof(src), "%s/snap-%d", a->dir, load_variant[k]);
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
    if (t->cache_s[k] == 0 || dt < t->cache_s[k])
        t->cache_s[k] = dt;
    return 0;
}

static int one_load(const snap_args_t *a, int k, timing_t *t)
{
    char src[300], err[512] = "";
    segd_manifest_t m;
    snprintf(src, sizeof(src), "%s/snap-%d", a->dir, load_variant[k]);
    memset(&t->load[k], 0, sizeof(t->load[k]));
    double t0 = segd_mono_s();
    segd_err_t e = segd_snapshot_read(src, NULL, &m, load_cb, &t->load[k], err, sizeof(err));
    double dt = segd_mono_s() - t0;
    if (e) {
        segd_manifest_free(&m);
        return fail("load", err);
    }
    if (t->load_s[k] == 0 || dt < t->load_s[k])
        t->load_s[k] = dt;
    segd_manifest_free(&m);
    return 0;
}

/* A day later (clock and W), nothing compacted since: records holding
 * entries that died below W in that day are decoded, pruned and re-encoded
 * instead of copied. Native default against the threaded raw scan. */
static int measure_later(segd_store_t *s, const snap_args_t *a, int64_t now_ms, timing_t *t)
{
    segd_policy_t *pol = segd_store_policy(s);
    segd_policy_set_now(pol, now_ms + DAY_MS);
    segd_policy_set_gc_watermark(pol, now_ms + DAY_MS - GC_LAG_MS);
    for (int64_t r = 0; r < a->rounds; r++) {
        scan_sum_t sum;
        double t0 = segd_mono_s();
        if (parallel_scan(s, a, EXPORT_THREADS, &sum))
            return -1;
        double dt = segd_mono_s() - t0;
        if (t->later_scan2_s == 0 || dt < t->later_scan2_s)
            t->later_scan2_s = dt;
        t->later_entries = sum.entries;
        double keep = t->export_s[NATIVE_DEFAULT]; /* the report's, at now */
        uint64_t keep_bytes = t->bytes[NATIVE_DEFAULT];
        t->export_s[NATIVE_DEFAULT] = 0;
        if (one_export(s, a, NATIVE_DEFAULT, t))
            return -1;
        if (t->later_export_s == 0 || t->export_s[NATIVE_DEFAULT] < t->later_export_s)
            t->later_export_s = t->export_s[NATIVE_DEFAULT];
        t->export_s[NATIVE_DEFAULT] = keep;
        t->bytes[NATIVE_DEFAULT] = keep_bytes;
    }
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
        t0 = segd_mono_s();
        if (parallel_scan(s, a, EXPORT_THREADS, &t->scan2))
            return -1;
        dt = segd_mono_s() - t0;
        if (t->scan2_s == 0 || dt < t->scan2_s)
            t->scan2_s = dt;
        for (int i = 0; i < VARIANTS; i++)
            if (one_export(s, a, i, t))
                return -1;
        for (int k = 0; k < LOADS; k++)
            if (one_load(a, k, t) || one_cache_load(a, now_ms, k, t))
                return -1;
    }
    if (t->scan2.records != t->scan.records || t->scan2.checksum != t->scan.checksum)
        return fail("scan", "the threaded scan does not read what the scan read");
    for (int k = 0; k < LOADS; k++)
        if (t->load[k].records != t->scan.records || t->load[k].checksum != t->scan.checksum)
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
           " rounds; exports on %d threads\n\n", t->scan.records, t->scan.entries,
           st->live_segments, st->sst_bytes, (double)st->sst_bytes / e, a->rounds,
           EXPORT_THREADS);
    printf("| step | seconds | entries/s | vs raw scan (%d threads) | bytes | bytes/entry | vs store |\n"
           "|---|---|---|---|---|---|---|\n", EXPORT_THREADS);
    printf("| raw full scan, 1 thread (decode + touch every entry) | %.3f | %.0f | | | | |\n",
           t->scan_s, e / t->scan_s);
    printf("| raw full scan, %d threads (split as the export's lanes) | %.3f | %.0f | 1.00 | | | |\n",
           EXPORT_THREADS, t->scan2_s, e / t->scan2_s);
    for (int i = 0; i < VARIANTS; i++)
        printf("| export %s%s, %s level %d | %.3f | %.0f | %.2f | %" PRIu64 " | %.2f | %.2fx |\n",
               segd_snapfmt_name(variants[i].format),
               variants[i].format == SEGD_SNAPFMT_NATIVE && !variants[i].copy ? " (re-encode all)"
                                                                              : "",
               segd_ocf_codec_name(variants[i].codec), variants[i].level, t->export_s[i],
               e / t->export_s[i], t->scan2_s / t->export_s[i], t->bytes[i],
               (double)t->bytes[i] / e, (double)t->bytes[i] / (double)st->sst_bytes);
    for (int k = 0; k < LOADS; k++) {
        int v = load_variant[k];
        printf("| load the %s %s snapshot (read, SHA-256, %s, decode) | %.3f | %.0f | | | | |\n",
               segd_snapfmt_name(variants[v].format), segd_ocf_codec_name(variants[v].codec),
               variants[v].codec == SEGD_OCF_NULL ? "no codec" : "decompress", t->load_s[k],
               e / t->load_s[k]);
        printf("| load the %s %s snapshot into an edge table (`segd cache` start) | %.3f | %.0f "
               "| | | | |\n", segd_snapfmt_name(variants[v].format),
               segd_ocf_codec_name(variants[v].codec), t->cache_s[k], e / t->cache_s[k]);
    }
    for (int k = 0; k < LOADS; k++) {
        int v = load_variant[k];
        double speed = t->scan2_s / t->export_s[v];
        double size = (double)t->bytes[v] / (double)st->sst_bytes;
        printf("\n%s (%s %d): export speed / raw scan speed on %d threads: %.2f (target >= 0.50: "
               "%s); snapshot / store size: %.2fx (target <= 1.2x: %s); load %.1f M entries/s",
               segd_snapfmt_name(variants[v].format), segd_ocf_codec_name(variants[v].codec),
               variants[v].level, EXPORT_THREADS, speed, speed >= 0.5 ? "met" : "missed", size,
               size <= 1.2 ? "met" : "missed", e / t->load_s[k] / 1e6);
    }
    printf("\n\nA day later (clock and W + 1 day, no compaction since; %" PRIu64 " entries "
           "left): raw scan on %d threads %.3f s, native export %.3f s: %.2f\n",
           t->later_entries, EXPORT_THREADS, t->later_scan2_s, t->later_export_s,
           t->later_scan2_s / t->later_export_s);
}

static int parse(int argc, char **argv, snap_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"rounds", required_argument, 0, 'r'},
                                         {"buckets", required_argument, 0, 'b'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"keep", no_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, have_dir = 0;
    optind = 1;
    a->users = 20000;
    a->rounds = 3;
    a->buckets = 32;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-snapshot-XXXXXX");
    while ((c = segd_args_next("bench snapshot", argc, argv, "h", opts)) != -1) {
        int bad = 1;
        if (c == 'u')
            bad = segd_arg_int("bench snapshot", "--users", optarg, 1, 100000000, &a->users);
        else if (c == 'r')
            bad = segd_arg_int("bench snapshot", "--rounds", optarg, 1, 100, &a->rounds);
        else if (c == 'b')
            bad = segd_arg_int("bench snapshot", "--buckets", optarg, 1, 65536, &a->buckets) ||
                  ((a->buckets & (a->buckets - 1)) &&
                   fprintf(stderr, "segd bench snapshot: --buckets: a power of two\n"));
        else if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            bad = 0;
        } else if (c == 'k') {
            a->keep = 1;
            bad = 0;
        }
        if (bad) {
            if (c != 'h')
                return -1; /* said */
            fprintf(stdout, "usage: segd bench snapshot [--users N] "
                    "[--rounds R] [--buckets B] [--dir DIR] [--keep]\n");
            return c == 'h' ? 1 : -1;
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
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
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
    if (fill(s, &a, now_ms) || segd_store_stats(s, &st, err, sizeof(err)) ||
        measure(s, &a, now_ms, &t) || measure_later(s, &a, now_ms, &t))
        goto out;
    report(&a, &t, &st);
    rc = SEGD_EXIT_OK;
out:
    segd_store_close(s);
    if (!a.keep)
        nftw(a.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
