/* `segd bench store`: the seed workload (DESIGN §8) into segd's profile
 * store and, in the same run, into the rejected one-key-per-(user, segment)
 * model read by prefix scan; write rate, bytes per live segment after full
 * compaction, warm read rate and latency percentiles, side by side. */
#include <getopt.h>
#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench/seed.h"
#include "cli/cli.h"
#include "consumer/apply.h"
#include "store/query.h"

typedef struct store_args {
    int64_t users, baseline_users, reads, batch, seed, keep, cache_mb;
    char dir[256];
} store_args_t;

typedef struct model_result {
    double write_s, compact_s;
    uint64_t segments_written, live, disk_bytes;
    double reads_per_s, p50_us, p99_us, p999_us, live_per_read;
} model_result_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void percentiles(double *lat, int64_t n, model_result_t *r, double total_s)
{
    qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
    r->p50_us = lat[n / 2] * 1e6;
    r->p99_us = lat[n * 99 / 100] * 1e6;
    r->p999_us = lat[n * 999 / 1000] * 1e6;
    r->reads_per_s = (double)n / total_s;
}

/* Reads random users with read_fn twice (the first pass warms the cache)
 * and records the second pass's latency percentiles and live counts. */
typedef size_t (*read_fn_t)(void *ctx, const char *uid);

static void timed_reads(int64_t reads, int64_t users, read_fn_t fn, void *ctx,
                        model_result_t *r)
{
    double *lat = malloc((size_t)reads * sizeof(*lat));
    uint64_t rng = 7, live_total = 0;
    for (int pass = 0; pass < 2; pass++) {
        double tp = segd_cli_seconds();
        for (int64_t i = 0; i < reads; i++) {
            char uid[32];
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            segd_seed_user_id((rng >> 33) % (uint64_t)users, uid, sizeof(uid));
            double q0 = segd_cli_seconds();
            size_t n = fn(ctx, uid);
            lat[i] = segd_cli_seconds() - q0;
            live_total += pass ? n : 0;
        }
        if (pass)
            percentiles(lat, reads, r, segd_cli_seconds() - tp);
    }
    r->live_per_read = (double)live_total / (double)reads;
    free(lat);
}

static segd_seed_t *seed_gen(const store_args_t *a, int64_t users, int64_t now_ms)
{
    segd_seed_opts_t so;
    segd_seed_t *g = NULL;
    segd_seed_opts_default(&so);
    so.users = (uint64_t)users;
    so.seed = (uint64_t)a->seed;
    so.now_ms = now_ms;
    return segd_seed_new(&g, &so) == SEGD_OK ? g : NULL;
}

/* ---------- segd's model ---------- */

typedef struct segd_reader {
    segd_store_t *s;
    segd_profile_t p;
    segd_entry_t *sel;
    segd_prune_t rule;
} segd_reader_t;

static size_t segd_read(void *ctx, const char *uid)
{
    segd_reader_t *rd = ctx;
    char err[256];
    segd_store_get(rd->s, uid, strlen(uid), &rd->p, err, sizeof(err));
    return segd_query_select(&rd->p, &rd->rule, NULL, rd->sel);
}

static int segd_model(const store_args_t *a, int64_t now_ms, model_result_t *r)
{
    char path[300], err[512];
    snprintf(path, sizeof(path), "%s/segd", a->dir);
    segd_store_opts_t o;
    segd_store_opts_default(&o);
    o.path = path;
    o.now_ms = now_ms;
    o.block_cache_mb = (size_t)a->cache_mb;
    segd_store_t *s = NULL;
    segd_seed_t *g = seed_gen(a, a->users, now_ms);
    segd_applier_t ap;
    segd_event_t ev;
    segd_event_init(&ev);
    if (!g || segd_store_open(&s, &o, err, sizeof(err)) || segd_applier_init(&ap, s))
        return -1;
    double t0 = segd_cli_seconds();
    while (segd_seed_next(g, &ev)) {
        segd_applier_add(&ap, &ev);
        if (segd_batch_count(ap.batch) >= (size_t)a->batch && segd_applier_flush(&ap, err, sizeof(err)))
            return -1;
    }
    segd_applier_flush(&ap, err, sizeof(err));
    r->write_s = segd_cli_seconds() - t0;
    r->segments_written = ap.segments;
    double t1 = segd_cli_seconds();
    segd_store_compact(s, err, sizeof(err));
    r->compact_s = segd_cli_seconds() - t1;
    segd_store_stats_t st;
    segd_store_stats(s, &st, err, sizeof(err));
    r->live = st.live_segments;
    r->disk_bytes = st.sst_bytes;
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_seed_destroy(g);

    segd_reader_t rd = {s, {0}, malloc(4096 * sizeof(segd_entry_t)), {0}};
    segd_profile_init(&rd.p);
    segd_policy_rule(segd_store_policy(s), &rd.rule, 1);
    timed_reads(a->reads, a->users, segd_read, &rd, r);
    free(rd.sel);
    segd_profile_free(&rd.p);
    segd_store_close(s);
    return 0;
}

/* ---------- baseline: one key per (user, segment), prefix scan ---------- */

typedef struct rdb {
    rocksdb_t *db;
    rocksdb_options_t *o;
    rocksdb_block_based_table_options_t *t;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *w;
    rocksdb_readoptions_t *r;
} rdb_t;

static int rdb_open(rdb_t *d, const char *path, int64_t cache_mb)
{
    char *err = NULL;
    d->cache = rocksdb_cache_create_lru((size_t)cache_mb << 20);
    d->t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(d->t, d->cache);
    rocksdb_block_based_options_set_block_size(d->t, 16 << 10);
    d->o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(d->o, 1);
    rocksdb_options_set_block_based_table_factory(d->o, d->t);
    rocksdb_options_set_compression(d->o, rocksdb_zstd_compression);
    rocksdb_options_set_bottommost_compression(d->o, rocksdb_zstd_compression);
    rocksdb_options_set_write_buffer_size(d->o, 64 << 20);
    rocksdb_options_increase_parallelism(d->o, 2);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(d->o, 1);
    d->db = rocksdb_open(d->o, path, &err);
    d->w = rocksdb_writeoptions_create();
    d->r = rocksdb_readoptions_create();
    if (err)
        rocksdb_free(err);
    return d->db ? 0 : -1;
}

static void rdb_close(rdb_t *d)
{
    rocksdb_close(d->db);
    rocksdb_options_destroy(d->o);
    rocksdb_block_based_options_destroy(d->t);
    rocksdb_cache_destroy(d->cache);
    rocksdb_writeoptions_destroy(d->w);
    rocksdb_readoptions_destroy(d->r);
}

static size_t put_varint(uint8_t *b, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        b[n++] = (uint8_t)(v | 0x80);
    b[n++] = (uint8_t)v;
    return n;
}

static size_t get_varint(const uint8_t *b, size_t len, uint64_t *v)
{
    size_t n = 0;
    *v = 0;
    for (int s = 0; n < len && s < 64; s += 7) {
        *v |= (uint64_t)(b[n] & 0x7f) << s;
        if (!(b[n++] & 0x80))
            return n;
    }
    return 0;
}

/* key = user + 8-byte BE segment id; value = varint expiry_s, ts_ms, flags, partner */
static void baseline_write(rdb_t *d, const segd_event_t *ev, rocksdb_writebatch_t *wb)
{
    char key[300];
    uint8_t val[40];
    memcpy(key, ev->user_id, ev->user_id_len);
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        for (int b = 0; b < 8; b++)
            key[ev->user_id_len + b] = (char)((uint64_t)u->segment_id >> (56 - 8 * b));
        size_t n = put_varint(val, (uint64_t)segd_expiry_for(ev->ts_ms, u->ttl_s, 3600));
        n += put_varint(val + n, (uint64_t)ev->ts_ms);
        n += put_varint(val + n, (uint32_t)u->flags);
        n += put_varint(val + n, (uint32_t)u->partner_id);
        rocksdb_writebatch_put(wb, key, ev->user_id_len + 8, (const char *)val, n);
    }
    (void)d;
}

static size_t baseline_read(rdb_t *d, const char *uid, int64_t now_s)
{
    size_t ulen = strlen(uid), live = 0;
    rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->r);
    for (rocksdb_iter_seek(it, uid, ulen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl != ulen + 8 || memcmp(k, uid, ulen) != 0)
            break;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        uint64_t expiry;
        if (get_varint(v, vl, &expiry) && (int64_t)expiry > now_s)
            live++;
    }
    rocksdb_iter_destroy(it);
    return live;
}

typedef struct baseline_reader {
    rdb_t *d;
    int64_t now_s;
} baseline_reader_t;

static size_t baseline_read_fn(void *ctx, const char *uid)
{
    baseline_reader_t *br = ctx;
    return baseline_read(br->d, uid, br->now_s);
}

static int baseline_model(const store_args_t *a, int64_t now_ms, model_result_t *r)
{
    char path[300];
    rdb_t d = {0};
    snprintf(path, sizeof(path), "%s/baseline", a->dir);
    segd_seed_t *g = seed_gen(a, a->baseline_users, now_ms);
    if (!g || rdb_open(&d, path, a->cache_mb))
        return -1;
    segd_event_t ev;
    segd_event_init(&ev);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    char *err = NULL;
    int64_t events = 0;
    double t0 = segd_cli_seconds();
    while (segd_seed_next(g, &ev)) {
        baseline_write(&d, &ev, wb);
        r->segments_written += ev.n_segments;
        if (++events % a->batch == 0) {
            rocksdb_write(d.db, d.w, wb, &err);
            rocksdb_writebatch_clear(wb);
        }
    }
    rocksdb_write(d.db, d.w, wb, &err);
    r->write_s = segd_cli_seconds() - t0;
    double t1 = segd_cli_seconds();
    rocksdb_compact_range(d.db, NULL, 0, NULL, 0);
    r->compact_s = segd_cli_seconds() - t1;
    uint64_t bytes = 0;
    rocksdb_property_int(d.db, "rocksdb.total-sst-files-size", &bytes);
    r->disk_bytes = bytes;
    for (int64_t u = 0; u < a->baseline_users; u++) {
        char uid[32];
        segd_seed_user_id((uint64_t)u, uid, sizeof(uid));
        r->live += baseline_read(&d, uid, now_ms / 1000);
    }
    baseline_reader_t br = {&d, now_ms / 1000};
    timed_reads(a->reads, a->baseline_users, baseline_read_fn, &br, r);
    rocksdb_writebatch_destroy(wb);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    rdb_close(&d);
    return 0;
}

/* ---------- report ---------- */

static void row(const char *what, double x, double y, const char *fmt)
{
    char a[64], b[64];
    snprintf(a, sizeof(a), fmt, x);
    snprintf(b, sizeof(b), fmt, y);
    printf("| %s | %s | %s | %.2f |\n", what, a, b, y != 0 ? x / y : 0.0);
}

static void report(const store_args_t *a, const model_result_t *s, const model_result_t *b)
{
    double sw = (double)s->segments_written, bw = (double)b->segments_written;
    double sbps = s->live ? (double)s->disk_bytes / (double)s->live : 0;
    double bbps = b->live ? (double)b->disk_bytes / (double)b->live : 0;
    printf("## segd bench store --users %" PRId64 " --baseline-users %" PRId64 " --reads %" PRId64
           " --batch %" PRId64 " --cache-mb %" PRId64 "\n\n", a->users, a->baseline_users,
           a->reads, a->batch, a->cache_mb);
    printf("seed workload: 50 UPSERT events x 20 segments per user, ids in [0, 82000), ts over "
           "30 days, ttl 1/7/30/60 d; one writer thread, WAL on, zstd; 2-core shared machine\n\n");
    printf("| metric | segd (profile per user) | baseline (key per user+segment) | segd/baseline |\n");
    printf("|---|---|---|---|\n");
    row("segments written", sw, bw, "%.0f");
    row("write rate, segments/s (write only)", sw / s->write_s, bw / b->write_s, "%.0f");
    row("write rate incl. full compaction, segments/s", sw / (s->write_s + s->compact_s),
        bw / (b->write_s + b->compact_s), "%.0f");
    row("live segments after compaction", (double)s->live, (double)b->live, "%.0f");
    row("on-disk bytes (sst)", (double)s->disk_bytes, (double)b->disk_bytes, "%.0f");
    row("bytes per live segment", sbps, bbps, "%.3f");
    row("warm reads/s (one user, all live segments)", s->reads_per_s, b->reads_per_s, "%.0f");
    row("read p50 us", s->p50_us, b->p50_us, "%.1f");
    row("read p99 us", s->p99_us, b->p99_us, "%.1f");
    row("read p99.9 us", s->p999_us, b->p999_us, "%.1f");
    row("live segments per read", s->live_per_read, b->live_per_read, "%.1f");
    double wr = sw / (s->write_s + s->compact_s);
    printf("\ntargets: bytes/live segment <= 2.0: %s (%.3f); merged segments/s incl. compaction "
           ">= 2M: %s (%.2fM); warm read p99 <= 50 us: %s (%.1f us)\n",
           sbps <= 2.0 ? "met" : "MISSED", sbps, wr >= 2e6 ? "met" : "MISSED", wr / 1e6,
           s->p99_us <= 50 ? "met" : "MISSED", s->p99_us);
}

static int parse(int argc, char **argv, store_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"baseline-users", required_argument, 0, 'B'},
                                         {"reads", required_argument, 0, 'r'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"seed", required_argument, 0, 's'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"keep", no_argument, 0, 'k'},
                                         {"cache-mb", required_argument, 0, 'c'},
                                         {0, 0, 0, 0}};
    int c;
    *a = (store_args_t){.users = 20000, .reads = 20000, .batch = 1000, .seed = 42, .cache_mb = 256};
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-store-XXXXXX");
    int have_dir = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'u': bad = segd_cli_int("bench", "--users", optarg, 1, 100000000, &a->users); break;
        case 'B': bad = segd_cli_int("bench", "--baseline-users", optarg, 1, 100000000, &a->baseline_users); break;
        case 'r': bad = segd_cli_int("bench", "--reads", optarg, 1, 100000000, &a->reads); break;
        case 'b': bad = segd_cli_int("bench", "--batch", optarg, 1, 1000000, &a->batch); break;
        case 's': bad = segd_cli_int("bench", "--seed", optarg, 0, INT64_MAX, &a->seed); break;
        case 'd': snprintf(a->dir, sizeof(a->dir), "%s", optarg); have_dir = 1; break;
        case 'k': a->keep = 1; break;
        case 'c': bad = segd_cli_int("bench", "--cache-mb", optarg, 8, 1 << 20, &a->cache_mb); break;
        default: bad = 1;
        }
        if (bad) {
            fprintf(stderr, "usage: segd bench store [--users N] [--baseline-users N] [--reads N] "
                            "[--batch N] [--seed S] [--cache-mb MB] [--dir DIR] [--keep]\n");
            return -1;
        }
    }
    if (!a->baseline_users)
        a->baseline_users = a->users;
    return have_dir || mkdtemp(a->dir) ? 0 : -1;
}

int segd_bench_store(int argc, char **argv)
{
    store_args_t a;
    model_result_t s = {0}, b = {0};
    if (parse(argc, argv, &a))
        return SEGD_EXIT_USAGE;
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    fprintf(stderr, "bench store: segd model, %" PRId64 " users...\n", a.users);
    if (segd_model(&a, now_ms, &s)) {
        fprintf(stderr, "bench store: segd model failed\n");
        return SEGD_EXIT_FAIL;
    }
    fprintf(stderr, "bench store: baseline model, %" PRId64 " users...\n", a.baseline_users);
    if (baseline_model(&a, now_ms, &b)) {
        fprintf(stderr, "bench store: baseline failed\n");
        return SEGD_EXIT_FAIL;
    }
    report(&a, &s, &b);
    if (!a.keep) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", a.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench store: could not remove %s\n", a.dir);
    }
    return SEGD_EXIT_OK;
}
