/* `segd bench restore` (issue 11): what a partition assigned to an instance
 * without its history costs, restored from its snapshot units versus
 * replayed from its input, in one run: the seed workload goes through the
 * in-process broker into a store by segd run's pipeline (the replay), the
 * store is exported as units, their files are read raw, and the units are
 * restored into an empty store the way segd run's restorer does (shared
 * load: SST merge operands, one per user). Prints a markdown report. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/app.h"
#include "base/args.h"
#include "base/buf.h"
#include "base/clock.h"
#include "bench/bench.h"
#include "load/restore.h"
#include "snapread/unit.h"
#include "publisher/snapshot.h"
#include "workload/dev_broker.h"
#include "workload/seed_producer.h"

#define TOPIC "bench.events"

typedef struct restore_args {
    int64_t users, partitions;
    char dir[256];
    int own_dir; /* made here: removed at the end */
} restore_args_t;

static int parse(int argc, char **argv, restore_args_t *a)
{
    a->users = 4000;
    a->partitions = 8;
    a->own_dir = 0;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-restore-XXXXXX");
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"partitions", required_argument, 0, 'p'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, have_dir = 0;
    optind = 1;
    while ((c = segd_args_next("bench restore", argc, argv, "h", opts)) != -1) {
        if (c == 'u' && !segd_arg_int("bench restore", "--users", optarg, 1, 10000000, &a->users))
            continue;
        if (c == 'p' && !segd_arg_int("bench restore", "--partitions", optarg, 1, 256, &a->partitions))
            continue;
        if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            continue;
        }
        if (c != 'h')
            return -1; /* said */
        fprintf(stdout,
                "usage: segd bench restore [--users N] [--partitions P] [--dir DIR]\n");
        return c == 'h' ? 1 : -1;
    }
    if (have_dir)
        return 0;
    a->own_dir = mkdtemp(a->dir) != NULL;
    return a->own_dir ? 0 : -1;
}

static segd_store_t *open_store(const char *dir, const char *name, char *err, size_t n)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = path;
    segd_store_t *s = NULL;
    return segd_store_open(&s, &so, err, n) ? NULL : s;
}

/* Every unit file read into memory, as the restore reads it before
 * decoding: the floor under any restore. */
typedef struct raw {
    double seconds;
    uint64_t bytes;
} raw_t;

static int raw_read(const char *topic_url, int32_t partitions, raw_t *r, char *err, size_t n)
{
    segd_buf_t buf = {0};
    segd_topology_t t;
    segd_unit_read_opts_t check = {0};
    double t0 = segd_mono_s();
    segd_dest_t *d = NULL;
    int rc = segd_dest_open(&d, topic_url, NULL, err, n) || segd_snapread_topology(d, &t, err, n)
                 ? -1
                 : 0;
    for (int32_t p = 0; !rc && p < partitions; p++) {
        segd_manifest_t m;
        char dir[32];
        /* the unit read and checked without a callback, for its manifest;
         * then each file fetched again */
        rc = segd_snapread_unit(d, &t, p, &check, &m, err, n) ? -1 : 0;
        segd_unit_dir_name(dir, sizeof(dir), p);
        for (size_t i = 0; !rc && i < m.n_files; i++) {
            rc = segd_dest_get_mem_in(d, dir, m.files[i].name, &buf, err, n) ? -1 : 0;
            r->bytes += buf.len;
        }
        segd_manifest_free(&m);
    }
    segd_dest_close(d);
    if (rc)
        return -1;
    r->seconds = segd_mono_s() - t0;
    segd_buf_free(&buf);
    return 0;
}

typedef struct restored {
    double seconds;
    uint64_t users, segments;
} restored_t;

/* Each unit as segd run's restorer loads it (load/restore.h). */
static int restore_all(segd_store_t *s, const char *dest, int32_t partitions, restored_t *out,
                       char *err, size_t n)
{
    double t0 = segd_mono_s();
    for (int32_t p = 0; p < partitions; p++) {
        segd_unit_load_t u = {.from = dest, .topic = TOPIC, .partition = p,
                              .partitions = partitions, .partitioner = SEGD_PARTITIONER_MURMUR2,
                              .memory_bytes = 256ull << 20};
        segd_unit_load_stats_t st;
        if (segd_unit_load(s, &u, &st, err, n))
            return -1;
        out->users += st.users;
        out->segments += st.segments;
    }
    out->seconds = segd_mono_s() - t0;
    return 0;
}

static int export_units(segd_store_t *s, const char *dest, int32_t partitions,
                        segd_snapfmt_t format, char *err, size_t n)
{
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = TOPIC;
    o.partition_count = partitions;
    o.format = format;
    o.codec = segd_snapshot_default_codec(format);
    segd_manifest_t m;
    int rc = segd_snapshot_export(s, dest, &o, &m, NULL, err, n) ? -1 : 0;
    segd_manifest_free(&m);
    return rc;
}

/* One format's run: its units' files, their raw read and their restore. */
typedef struct format_run {
    segd_snapfmt_t format;
    raw_t raw;
    restored_t rs;
    segd_store_stats_t st;
} format_run_t;

static void report_row(const format_run_t *f, double replay_s)
{
    const char *name = segd_snapfmt_name(f->format);
    double segs = (double)f->rs.segments;
    printf("| %s: raw read of the unit files (%.1f MB) | %.3f | - | %.0f | - |\n", name,
           (double)f->raw.bytes / 1e6, f->raw.seconds,
           (double)f->raw.bytes / 1e6 / f->raw.seconds);
    printf("| %s: restore (read, SHA-256, record checks, SST merge operands in key order: native bytes as read, avro encoded once; ingest, offset) "
           "| %.3f | %.1f M | %.0f | %.1fx |\n", name, f->rs.seconds,
           segs / f->rs.seconds / 1e6, (double)f->raw.bytes / 1e6 / f->rs.seconds,
           replay_s / f->rs.seconds);
}

static void report(const restore_args_t *a, uint64_t events, double replay_s,
                   uint64_t replay_segs, const format_run_t *f, size_t nf,
                   const segd_store_stats_t *st_replayed)
{
    double segs = (double)f[0].rs.segments;
    printf("## segd bench restore --users %" PRId64 " --partitions %" PRId64 "\n\n", a->users,
           a->partitions);
    printf("%" PRIu64 " events (%" PRIu64 " segment updates) replayed into a store of %" PRIu64
           " users and %" PRIu64 " entries, exported as %" PRId64 " units per format\n\n",
           events, replay_segs, f[0].rs.users, f[0].rs.segments, a->partitions);
    printf("| path | seconds | entries/s | MB/s of unit files | faster than replay |\n"
           "|---|---|---|---|---|\n");
    printf("| replay of the same partitions' input (segd run's pipeline, in-process broker, "
           "no change stream) | %.3f | %.1f M | - | 1.0x |\n", replay_s, segs / replay_s / 1e6);
    for (size_t i = 0; i < nf; i++)
        report_row(&f[i], replay_s);
    printf("\ntargets: restore >= 10 M entries/s, >= 20x faster than replay\n");
    for (size_t i = 0; i < nf; i++)
        printf("same state (%s): %" PRIu64 " / %" PRIu64 " users and %" PRIu64 " / %" PRIu64
               " live segments (replayed / restored store)\n", segd_snapfmt_name(f[i].format),
               st_replayed->users, f[i].st.users, st_replayed->live_segments,
               f[i].st.live_segments);
}

/* Exports the replayed store in f's format, reads the files raw, restores
 * them into a new store and takes its figures. */
static int run_format(const restore_args_t *a, segd_store_t *replayed, format_run_t *f,
                      char *err, size_t n)
{
    char dest[320], topic_url[400], name[32];
    const char *fmt = segd_snapfmt_name(f->format);
    snprintf(dest, sizeof(dest), "%s/units-%s", a->dir, fmt);
    snprintf(topic_url, sizeof(topic_url), "%s/" TOPIC, dest);
    snprintf(name, sizeof(name), "restored-%s", fmt);
    int32_t parts = (int32_t)a->partitions;
    segd_store_t *s = NULL;
    int rc = export_units(replayed, dest, parts, f->format, err, n) ||
                     raw_read(topic_url, parts, &f->raw, err, n) ||
                     !(s = open_store(a->dir, name, err, n)) ||
                     restore_all(s, dest, parts, &f->rs, err, n) ||
                     segd_store_compact(s, err, n) || segd_store_stats(s, &f->st, err, n)
                 ? -1
                 : 0;
    segd_store_close(s);
    return rc;
}

int segd_bench_restore(int argc, char **argv)
{
    restore_args_t a;
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    const char *topics[] = {TOPIC, TOPIC ".dlq", TOPIC ".changes"};
    segd_dev_broker_t *b = NULL;
    segd_store_t *replayed = NULL;
    char err[512];
    int rc = SEGD_EXIT_FAIL;
    int32_t parts = (int32_t)a.partitions;
    if (segd_dev_broker_new(&b, 1, parts, topics, 3, err, sizeof(err)))
        goto fail;
    segd_seed_produce_opts_t o = {0};
    segd_seed_produce_result_t res;
    o.brokers = segd_dev_broker_bootstraps(b);
    o.topic = TOPIC;
    segd_seed_opts_default(&o.seed);
    o.seed.users = (uint64_t)a.users;
    o.seed.now_ms = (int64_t)time(NULL) * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    if (segd_seed_produce(&o, NULL, &res, err, sizeof(err)))
        goto fail;
    double replay_s = 0;
    uint64_t replay_segs = 0;
    if (segd_bench_consume(o.brokers, a.dir, 1000, TOPIC, "replayed", (int64_t)res.events, 0,
                           &replay_s, &replay_segs)) {
        snprintf(err, sizeof(err), "not every message was replayed (mock broker keeps 5 MiB "
                                   "per partition: fewer --users or more --partitions)");
        goto fail;
    }
    format_run_t f[2] = {{.format = SEGD_SNAPFMT_AVRO}, {.format = SEGD_SNAPFMT_NATIVE}};
    segd_store_stats_t st_a;
    if (!(replayed = open_store(a.dir, "replayed", err, sizeof(err))) ||
        segd_store_stats(replayed, &st_a, err, sizeof(err)) ||
        run_format(&a, replayed, &f[0], err, sizeof(err)) ||
        run_format(&a, replayed, &f[1], err, sizeof(err)))
        goto fail;
    report(&a, res.events, replay_s, replay_segs, f, 2, &st_a);
    rc = SEGD_EXIT_OK;
    for (int i = 0; i < 2; i++)
        if (f[i].st.users != st_a.users || f[i].st.live_segments != st_a.live_segments) {
            fprintf(stderr, "bench restore: the %s restore differs from the replayed store\n",
                    segd_snapfmt_name(f[i].format));
            rc = SEGD_EXIT_FAIL;
        }
    goto out;
fail:
    fprintf(stderr, "bench restore: %s\n", err);
out:
    segd_store_close(replayed);
    segd_dev_broker_destroy(b);
    char cmd[320];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", a.dir);
    if (a.own_dir && system(cmd) != 0)
        fprintf(stderr, "bench restore: could not remove %s\n", a.dir);
    return rc;
}
