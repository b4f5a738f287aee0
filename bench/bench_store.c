/* `segd bench store` (DESIGN §8): the seed workload written, fully compacted
 * and read back warm in segd's profile-per-user store and, in the same run,
 * in the seed paper's rejected model (one RocksDB key per (user, segment),
 * read by prefix scan). Prints one markdown report on stdout: phase times,
 * both models side by side, the targets with their margins. */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_store_int.h"
#include "workload/seed.h"
#include "app/app.h"
#include "base/args.h"
#include "base/varint.h"
#include "consumer/apply.h"
#include "core/query.h"
#include "base/clock.h"

#define GRANULARITY_S 3600 /* segd's default; the baseline rounds expiries alike */
#define TARGET_BYTES_PER_LIVE 2.0
#define TARGET_SEGMENTS_PER_S 2e6
#define TARGET_P99_US 50.0

static segd_seed_t *seed_gen(const store_args_t *a, int64_t users, int64_t now_ms)
{
    segd_seed_opts_t so;
    segd_seed_t *g = NULL;
    segd_seed_opts_default(&so);
    so.users = (uint64_t)users;
    so.seed = (uint64_t)a->seed;
    so.now_ms = now_ms;
    if (segd_seed_new(&g, &so) != SEGD_OK)
        bench_store_fail("seed generator", "out of memory");
    return g;
}

/* Sums the regular files of a RocksDB directory (flat) after close: SST
 * bytes alone hide WAL files that RocksDB still retains. */
static int dir_size(const char *path, model_result_t *r)
{
    DIR *d = opendir(path);
    struct dirent *e;
    if (!d)
        return bench_store_fail("opendir", path);
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        size_t len = strlen(e->d_name);
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        r->dir_bytes += (uint64_t)st.st_size;
        if (len > 4 && !strcmp(e->d_name + len - 4, ".log"))
            r->wal_bytes += (uint64_t)st.st_size;
    }
    closedir(d);
    return 0;
}

/* ---------- segd's model: one merged profile per user ---------- */

/* Seed events through the applier, one writer thread, --batch events per
 * WriteBatch (WAL on): the ingest path without the broker. */
static int segd_write(segd_store_t *s, const store_args_t *a, int64_t now_ms,
                      model_result_t *r)
{
    char err[512] = "";
    int rc = -1;
    segd_applier_t ap;
    segd_event_t ev;
    segd_seed_t *g = seed_gen(a, a->users, now_ms);
    if (!g)
        return -1;
    segd_event_init(&ev);
    if (segd_applier_init(&ap, s) != SEGD_OK) {
        bench_store_fail("applier", "out of memory");
        goto out_free_applier;
    }
    double t0 = segd_mono_s();
    while (segd_seed_next(g, &ev)) {
        segd_err_t e = segd_applier_add(&ap, &ev);
        if (e) {
            bench_store_fail("encode event", segd_err_str(e));
            goto out_free_applier;
        }
        if (segd_batch_count(ap.batch) >= (size_t)a->batch &&
            segd_applier_flush(&ap, err, sizeof(err))) {
            bench_store_fail("write", err);
            goto out_free_applier;
        }
    }
    if (segd_applier_flush(&ap, err, sizeof(err))) {
        bench_store_fail("write", err);
        goto out_free_applier;
    }
    r->write_s = segd_mono_s() - t0;
    r->segments_written = ap.segments;
    rc = 0;
out_free_applier:
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    return rc;
}

/* Full compaction (which also waits out the background work the writes left
 * behind), then the store's own count of live and stored entries. */
static int segd_size(segd_store_t *s, model_result_t *r)
{
    char err[512] = "";
    segd_store_stats_t st;
    double t0 = segd_mono_s();
    if (segd_store_compact(s, err, sizeof(err)))
        return bench_store_fail("compact", err);
    r->compact_s = segd_mono_s() - t0;
    if (segd_store_stats(s, &st, err, sizeof(err)))
        return bench_store_fail("stats", err);
    if (st.corrupt)
        return bench_store_fail("stats", "corrupt records after compaction");
    r->live = st.live_segments;
    r->stored = st.stored_entries;
    r->disk_bytes = st.sst_bytes;
    return 0;
}

static int segd_model(const store_args_t *a, int64_t now_ms, model_result_t *r,
                      retire_phase_t *ph)
{
    char path[300], err[512] = "";
    segd_store_opts_t o;
    segd_store_t *s = NULL;
    snprintf(path, sizeof(path), "%s/segd", a->dir);
    segd_app_store_opts(&o);
    o.path = path;
    o.now_ms = now_ms;
    o.block_cache_mb = (size_t)a->cache_mb;
    /* The horizon decides which dead entries the full compaction keeps
     * (those at or above W = now - horizon - grace): its storage cost. */
    if (a->horizon_s)
        o.horizon_ms = a->horizon_s * 1000;
    if (segd_store_open(&s, &o, err, sizeof(err)))
        return bench_store_fail("open store", err);
    int rc = segd_write(s, a, now_ms, r);
    if (!rc)
        rc = segd_size(s, r);
    if (!rc)
        rc = bench_store_segd_reads(s, a, r);
    if (!rc && bench_store_retire_on(a))
        rc = bench_store_retire_phases(s, a, now_ms, ph);
    segd_store_close(s);
    return rc ? rc : dir_size(path, r);
}

/* ---------- baseline: one key per (user, segment), prefix scans ---------- */

typedef struct rdb {
    rocksdb_t *db;
    rocksdb_options_t *o;
    rocksdb_block_based_table_options_t *t;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *w;
} rdb_t;

/* Tuned like segd's profiles family (memtables, levels, cache, background
 * jobs) but with zstd, the natural choice for many small repetitive keys;
 * no bloom filter: prefix scans cannot use a whole-key filter. */
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
    rocksdb_options_set_max_write_buffer_number(d->o, 4);
    rocksdb_options_increase_parallelism(d->o, 2);
    rocksdb_options_set_max_background_jobs(d->o, 2);
    rocksdb_options_set_max_open_files(d->o, -1);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(d->o, 1);
    rocksdb_options_set_max_bytes_for_level_base(d->o, 256 << 20);
    rocksdb_options_set_target_file_size_base(d->o, 64 << 20);
    d->w = rocksdb_writeoptions_create();
    d->db = rocksdb_open(d->o, path, &err);
    if (err) {
        bench_store_fail("open baseline", err);
        rocksdb_free(err);
    }
    return d->db ? 0 : -1;
}

static void rdb_close(rdb_t *d)
{
    if (d->db)
        rocksdb_close(d->db);
    if (d->o)
        rocksdb_options_destroy(d->o);
    if (d->t)
        rocksdb_block_based_options_destroy(d->t);
    if (d->cache)
        rocksdb_cache_destroy(d->cache);
    if (d->w)
        rocksdb_writeoptions_destroy(d->w);
}

/* key = user id + 8-byte big-endian segment id;
 * value = varint expiry_s, ts_ms, flags, partner_id. A Put per segment: in
 * this model an upsert simply overwrites the key. */
static void baseline_put_event(const segd_event_t *ev, rocksdb_writebatch_t *wb)
{
    char key[SEGD_MAX_USER_ID + 8];
    uint8_t val[40];
    memcpy(key, ev->user_id, ev->user_id_len);
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        for (int b = 0; b < 8; b++)
            key[ev->user_id_len + b] = (char)((uint64_t)u->segment_id >> (56 - 8 * b));
        size_t n = segd_uv_put(val, (uint64_t)segd_expiry_for(ev->ts_ms, u->ttl_s, GRANULARITY_S));
        n += segd_uv_put(val + n, (uint64_t)ev->ts_ms);
        n += segd_uv_put(val + n, (uint32_t)u->flags);
        n += segd_uv_put(val + n, (uint32_t)u->partner_id);
        rocksdb_writebatch_put(wb, key, ev->user_id_len + 8, (const char *)val, n);
    }
}

static int rdb_write(rdb_t *d, rocksdb_writebatch_t *wb)
{
    char *err = NULL;
    rocksdb_write(d->db, d->w, wb, &err);
    rocksdb_writebatch_clear(wb);
    if (!err)
        return 0;
    bench_store_fail("baseline write", err);
    rocksdb_free(err);
    return -1;
}

static int baseline_write(rdb_t *d, const store_args_t *a, int64_t now_ms, model_result_t *r)
{
    int rc = -1;
    int64_t events = 0;
    segd_event_t ev;
    segd_seed_t *g = seed_gen(a, a->baseline_users, now_ms);
    if (!g)
        return -1;
    segd_event_init(&ev);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    double t0 = segd_mono_s();
    while (segd_seed_next(g, &ev)) {
        baseline_put_event(&ev, wb);
        r->segments_written += ev.n_segments;
        if (++events % a->batch == 0 && rdb_write(d, wb))
            goto out_destroy_batch;
    }
    if (rocksdb_writebatch_count(wb) && rdb_write(d, wb))
        goto out_destroy_batch;
    r->write_s = segd_mono_s() - t0;
    rc = 0;
out_destroy_batch:
    rocksdb_writebatch_destroy(wb);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    return rc;
}

/* Decodes one baseline value into e; 0 when it does not decode. */
static int baseline_decode(const uint8_t *v, size_t len, segd_entry_t *e)
{
    uint64_t x[4];
    const uint8_t *p = v, *end = v + len;
    for (int i = 0; i < 4; i++)
        if (segd_uv_get(&p, end, &x[i]))
            return 0;
    e->expiry_s = (int64_t)x[0];
    e->ts_ms = (int64_t)x[1];
    e->flags = (int32_t)x[2];
    e->partner_id = (int32_t)x[3];
    return 1;
}

/* Counts all keys and the live ones in one scan; fill_cache off so the count
 * does not decide what the read phase finds cached. */
static int baseline_count(rdb_t *d, int64_t now_s, model_result_t *r)
{
    char *err = NULL;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(ro, 0);
    rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, ro);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t vl;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        segd_entry_t e;
        r->stored++;
        r->live += baseline_decode(v, vl, &e) && e.expiry_s > now_s;
    }
    rocksdb_iter_get_error(it, &err);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (!err)
        return 0;
    bench_store_fail("baseline scan", err);
    rocksdb_free(err);
    return -1;
}

static int baseline_size(rdb_t *d, int64_t now_ms, model_result_t *r)
{
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2 /* force */);
    rocksdb_compactoptions_set_exclusive_manual_compaction(co, 1);
    double t0 = segd_mono_s();
    rocksdb_compact_range_opt(d->db, co, NULL, 0, NULL, 0);
    r->compact_s = segd_mono_s() - t0;
    rocksdb_compactoptions_destroy(co);
    rocksdb_property_int(d->db, "rocksdb.total-sst-files-size", &r->disk_bytes);
    return baseline_count(d, now_ms / 1000, r);
}

typedef struct baseline_reader {
    rdb_t *d;
    rocksdb_readoptions_t *ro;
    int64_t now_s;
    segd_entry_t *sel;
    size_t sel_cap;
    char upper[SEGD_MAX_USER_ID + 9]; /* the iterator's bound; must outlive it */
} baseline_reader_t;

/* Keeps one decoded entry in the reader's output if it is live. */
static int baseline_keep(baseline_reader_t *br, const char *k, const uint8_t *v, size_t vl,
                         size_t ulen, size_t *live)
{
    segd_entry_t e;
    if (!baseline_decode(v, vl, &e))
        return bench_store_fail("baseline read", "value does not decode");
    if (e.expiry_s <= br->now_s)
        return 0;
    if (bench_store_reserve_entries(&br->sel, &br->sel_cap, *live + 1))
        return -1;
    e.segment_id = 0;
    for (int b = 0; b < 8; b++)
        e.segment_id = e.segment_id << 8 | (uint8_t)k[ulen + b];
    br->sel[(*live)++] = e;
    return 0;
}

/* What a bidder does in this model: seek to the user id, iterate while keys
 * carry it (the upper bound stops RocksDB at the user's last key), decode,
 * keep the live entries. */
static int baseline_read(void *ctx, const char *uid, size_t *live)
{
    baseline_reader_t *br = ctx;
    size_t ulen = strlen(uid);
    int rc = 0;
    char *err = NULL;
    memcpy(br->upper, uid, ulen);
    memset(br->upper + ulen, 0xff, 9);
    rocksdb_readoptions_set_iterate_upper_bound(br->ro, br->upper, ulen + 9);
    rocksdb_iterator_t *it = rocksdb_create_iterator(br->d->db, br->ro);
    *live = 0;
    for (rocksdb_iter_seek(it, uid, ulen); !rc && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (kl != ulen + 8 || memcmp(k, uid, ulen) != 0)
            break;
        rc = baseline_keep(br, k, v, vl, ulen, live);
    }
    rocksdb_iter_get_error(it, &err);
    rocksdb_iter_destroy(it);
    if (err) {
        rc = bench_store_fail("baseline read", err);
        rocksdb_free(err);
    }
    return rc;
}

static int baseline_reads(rdb_t *d, const store_args_t *a, int64_t now_ms, model_result_t *r)
{
    baseline_reader_t br = {.d = d, .ro = rocksdb_readoptions_create(), .now_s = now_ms / 1000};
    int rc = bench_store_timed_reads(a, a->baseline_users, baseline_read, &br, r);
    rocksdb_readoptions_destroy(br.ro);
    free(br.sel);
    return rc;
}

static int baseline_model(const store_args_t *a, int64_t now_ms, model_result_t *r)
{
    char path[300];
    rdb_t d = {0};
    snprintf(path, sizeof(path), "%s/baseline", a->dir);
    int rc = rdb_open(&d, path, a->cache_mb);
    if (!rc)
        rc = baseline_write(&d, a, now_ms, r);
    if (!rc)
        rc = baseline_size(&d, now_ms, r);
    if (!rc)
        rc = baseline_reads(&d, a, now_ms, r);
    rdb_close(&d);
    return rc ? rc : dir_size(path, r);
}

/* ---------- report ---------- */

static void row(const char *what, double x, double y, const char *fmt)
{
    char a[64], b[64];
    snprintf(a, sizeof(a), fmt, x);
    snprintf(b, sizeof(b), fmt, y);
    printf("| %s | %s | %s | %.2f |\n", what, a, b, y != 0 ? x / y : 0.0);
}

static double per_live(const model_result_t *m)
{
    return m->live ? (double)m->disk_bytes / (double)m->live : 0;
}

static double rate_with_compaction(const model_result_t *m)
{
    return (double)m->segments_written / (m->write_s + m->compact_s);
}

static void print_table(const model_result_t *s, const model_result_t *b)
{
    double sw = (double)s->segments_written, bw = (double)b->segments_written;
    printf("| metric | segd (profile per user) | baseline (key per user+segment) | segd/baseline |\n");
    printf("|---|---|---|---|\n");
    row("segments written", sw, bw, "%.0f");
    row("write time, s", s->write_s, b->write_s, "%.1f");
    row("full compaction time, s", s->compact_s, b->compact_s, "%.1f");
    row("write rate, segments/s (write only)", sw / s->write_s, bw / b->write_s, "%.0f");
    row("write rate incl. full compaction, segments/s", rate_with_compaction(s),
        rate_with_compaction(b), "%.0f");
    row("stored entries after compaction", (double)s->stored, (double)b->stored, "%.0f");
    row("live segments after compaction", (double)s->live, (double)b->live, "%.0f");
    row("on-disk bytes (sst)", (double)s->disk_bytes, (double)b->disk_bytes, "%.0f");
    row("bytes per live segment", per_live(s), per_live(b), "%.3f");
    row("directory bytes after close (sst + WAL + manifest)", (double)s->dir_bytes,
        (double)b->dir_bytes, "%.0f");
    row("of which WAL files still retained", (double)s->wal_bytes, (double)b->wal_bytes,
        "%.0f");
    row("warm reads/s (one user, all live segments)", s->reads_per_s, b->reads_per_s, "%.0f");
    row("read p50, us", s->p50_us, b->p50_us, "%.1f");
    row("read p99, us", s->p99_us, b->p99_us, "%.1f");
    row("read p99.9, us", s->p999_us, b->p999_us, "%.1f");
    row("live segments per read", s->live_per_read, b->live_per_read, "%.1f");
}

/* One target line: met or missed, and by how much (absolute and relative). */
static void target(const char *what, double v, double goal, int at_least, const char *fmt)
{
    char val[32], lim[32], gap[32];
    double d = at_least ? v - goal : goal - v;
    int met = d >= 0;
    snprintf(val, sizeof(val), fmt, v);
    snprintf(lim, sizeof(lim), fmt, goal);
    snprintf(gap, sizeof(gap), fmt, met ? d : -d);
    printf("| %s | %s %s | %s | %s %s (%.1f %%)%s |\n", what, at_least ? ">=" : "<=", lim, val,
           met ? "met with" : "**MISSED** by", gap, 100.0 * (met ? d : -d) / goal,
           met ? " to spare" : "");
}

static void report(const store_args_t *a, const model_result_t *s, const model_result_t *b,
                   const retire_phase_t *ph)
{
    printf("## `%s`\n\n", a->cmdline);
    printf("seed workload (seed %" PRId64 "): segd U = %" PRId64 ", baseline U = %" PRId64
           "; 50 UPSERT events x 20 segments per user, ids in [0, 82000), ts over 30 days, "
           "ttl 1/7/30/60 d; one writer thread, WriteBatches of %" PRId64 " events, WAL on; "
           "block cache %" PRId64 " MiB per model; %" PRId64 " warm reads (same users read "
           "once untimed first); %ld cores, shared machine\n\n",
           a->seed, a->users, a->baseline_users, a->batch, a->cache_mb, a->reads,
           sysconf(_SC_NPROCESSORS_ONLN));
    segd_store_opts_t o;
    segd_store_opts_default(&o);
    printf("segd store: horizon %" PRId64 " s, grace %" PRId64 " s, so the full compaction "
           "drops dead entries below W = now - %" PRId64 " s\n\n",
           a->horizon_s ? a->horizon_s : o.horizon_ms / 1000, o.gc_grace_ms / 1000,
           (a->horizon_s ? a->horizon_s : o.horizon_ms / 1000) + o.gc_grace_ms / 1000);
    print_table(s, b);
    printf("\n| target (segd) | goal | measured | result |\n|---|---|---|---|\n");
    target("bytes per live segment after full compaction", per_live(s),
           TARGET_BYTES_PER_LIVE, 0, "%.3f");
    target("merged segments/s incl. full compaction, one writer", rate_with_compaction(s),
           TARGET_SEGMENTS_PER_S, 1, "%.0f");
    target("warm read p99, us", s->p99_us, TARGET_P99_US, 0, "%.1f");
    if (bench_store_retire_on(a))
        bench_store_retire_report(a, ph);
}

/* ---------- flags and the work directory ---------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: segd bench store [--users N] [--baseline-users N] [--reads N] [--batch N]\n"
               "                        [--seed S] [--cache-mb MB] [--dir DIR] [--keep]\n"
               "                        [--horizon-s S] [--retire N,M]\n"
               "  --horizon-s S: segd's store.horizon.s (default 604800); the full compaction\n"
               "    keeps dead entries at or above W = now - S - store.gc.grace.s\n"
               "  --retire N,M: then, on the same segd store, reads (3 passes), a full scan and\n"
               "    a full compaction with no markers, N segment markers, N segment + M partner\n"
               "    markers (all retiring nothing), and those raised to retire some entries;\n"
               "    ratios to no markers (the read cost of retirement markers)\n");
}

static void record_cmdline(int argc, char **argv, store_args_t *a)
{
    size_t off = (size_t)snprintf(a->cmdline, sizeof(a->cmdline), "segd bench");
    for (int i = 0; i < argc && off < sizeof(a->cmdline); i++)
        off += (size_t)snprintf(a->cmdline + off, sizeof(a->cmdline) - off, " %s", argv[i]);
}

/* --retire N,M: N segment markers (at most the seed's ids), M partner markers. */
static int parse_retire(const char *s, store_args_t *a)
{
    char n[32];
    const char *comma = strchr(s, ',');
    if (!comma || (size_t)(comma - s) >= sizeof(n))
        return bench_store_fail("--retire", "expected N,M");
    memcpy(n, s, (size_t)(comma - s));
    n[comma - s] = 0;
    if (segd_arg_int("bench store", "--retire", n, 0, SEED_SEGMENT_IDS, &a->retire_segments) ||
        segd_arg_int("bench store", "--retire", comma + 1, 0, 1000000, &a->retire_partners))
        return -1;
    if (!bench_store_retire_on(a))
        return bench_store_fail("--retire", "N or M must be > 0");
    return 0;
}

static int parse_one(int c, store_args_t *a)
{
    switch (c) {
    case 'u': return segd_arg_int("bench store", "--users", optarg, 1, 100000000, &a->users);
    case 'B': return segd_arg_int("bench store", "--baseline-users", optarg, 1, 100000000, &a->baseline_users);
    case 'r': return segd_arg_int("bench store", "--reads", optarg, 1, 100000000, &a->reads);
    case 'b': return segd_arg_int("bench store", "--batch", optarg, 1, 1000000, &a->batch);
    case 's': return segd_arg_int("bench store", "--seed", optarg, 0, INT64_MAX, &a->seed);
    case 'c': return segd_arg_int("bench store", "--cache-mb", optarg, 8, 1 << 20, &a->cache_mb);
    case 'H': return segd_arg_int("bench store", "--horizon-s", optarg, 1, 90 * 86400, &a->horizon_s);
    case 'R': return parse_retire(optarg, a);
    case 'k': a->keep = 1; return 0;
    case 'd':
        if (strlen(optarg) >= sizeof(a->dir) - 16)
            return bench_store_fail("--dir", "path too long");
        snprintf(a->dir, sizeof(a->dir), "%s", optarg);
        return 0;
    default: return -1;
    }
}

static int parse(int argc, char **argv, store_args_t *a)
{
    static const struct option opts[] = {
        {"users", required_argument, 0, 'u'},   {"baseline-users", required_argument, 0, 'B'},
        {"reads", required_argument, 0, 'r'},   {"batch", required_argument, 0, 'b'},
        {"seed", required_argument, 0, 's'},    {"dir", required_argument, 0, 'd'},
        {"keep", no_argument, 0, 'k'},          {"cache-mb", required_argument, 0, 'c'},
        {"horizon-s", required_argument, 0, 'H'}, {"retire", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int c;
    *a = (store_args_t){.users = 20000, .reads = 20000, .batch = 1000, .seed = 42,
                        .cache_mb = 256};
    record_cmdline(argc, argv, a);
    optind = 1;
    while ((c = segd_args_next("bench store", argc, argv, "h", opts)) != -1)
        if (c == 'h') {
            usage(stdout);
            return 1;
        } else if (parse_one(c, a))
            return -1; /* said */
    if (optind < argc) {
        fprintf(stderr, "segd bench store: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!a->baseline_users)
        a->baseline_users = a->users;
    return 0;
}

/* A fresh mkdtemp directory by default; a given --dir may exist but must
 * not already hold this benchmark's stores (they would be reused). */
static int make_dir(store_args_t *a)
{
    char sub[300];
    if (!a->dir[0]) {
        snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-store-XXXXXX");
        a->made_dir = 1;
        return mkdtemp(a->dir) ? 0 : bench_store_fail("mkdtemp", a->dir);
    }
    if (mkdir(a->dir, 0700) == 0)
        a->made_dir = 1;
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof(sub), "%s/%s", a->dir, i ? "baseline" : "segd");
        if (access(sub, F_OK) == 0)
            return bench_store_fail(sub, "already exists; give an empty --dir");
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

/* Removes what this run created: the two stores, and the directory if ours. */
static void remove_dir(const store_args_t *a)
{
    char sub[300];
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof(sub), "%s/%s", a->dir, i ? "baseline" : "segd");
        if (access(sub, F_OK) == 0 && nftw(sub, remove_entry, 16, FTW_DEPTH | FTW_PHYS))
            bench_store_fail("could not remove", sub);
    }
    if (a->made_dir && rmdir(a->dir))
        bench_store_fail("could not remove", a->dir);
}

int segd_bench_store(int argc, char **argv)
{
    store_args_t a;
    model_result_t s = {0}, b = {0};
    retire_phase_t ph[RETIRE_PHASES] = {0};
    int rc = SEGD_EXIT_FAIL;
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    if (make_dir(&a))
        return SEGD_EXIT_USAGE;
    /* one fixed now for writes, merges, compaction and reads of both models */
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    fprintf(stderr, "bench store: segd model, %" PRId64 " users, in %s\n", a.users, a.dir);
    if (segd_model(&a, now_ms, &s, ph))
        goto out_remove_dir;
    fprintf(stderr, "bench store: baseline model, %" PRId64 " users\n", a.baseline_users);
    if (baseline_model(&a, now_ms, &b))
        goto out_remove_dir;
    report(&a, &s, &b, ph);
    rc = SEGD_EXIT_OK;
out_remove_dir:
    if (!a.keep)
        remove_dir(&a);
    return rc;
}
