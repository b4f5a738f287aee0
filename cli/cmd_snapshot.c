/* `segd snapshot export|verify`: consistent per-partition snapshot units
 * for caches and restores (DESIGN §6). Export opens the store read-only, so it runs beside a live
 * `segd run`; verify's exit status says whether SRC holds a whole snapshot. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "snapread/snapshot.h"
#include "publisher/snapshot.h"
#include "base/clock.h"
#include "config/config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: segd snapshot export --db DIR --to DEST [--topic T] [--partitions P,...]\n"
            "                            [--partition-count P] [--buckets 32]\n"
            "                            [--partitioner murmur2_random] [--config FILE]\n"
            "                            [--now S] [--changes-topic T] [--codec deflate]\n"
            "                            [--level 1] [--horizon-s 604800]\n"
            "                            [--format avro|native]\n"
            "       segd snapshot verify SRC\n"
            "  DEST/SRC: a directory, http(s)://host/path (PUT/GET) or s3://bucket/prefix\n"
            "  (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,\n"
            "  AWS_REGION; SEGD_S3_ENDPOINT for an S3-compatible server)\n"
            "  A snapshot is one unit per input partition: DEST/<topic>/p-PPPPP/ (manifest.json\n"
            "  + Avro container file) and DEST/<topic>/topology.json. verify SRC: DEST/<topic>,\n"
            "  or DEST holding one topic; it prints each unit's records_format.\n"
            "  --topic: the input topic (default: the --config's first topic, else the only\n"
            "  topic the store holds offsets for)\n"
            "  --partitions: the units to export (default: every partition the store holds an\n"
            "  offset for; all P for a store without offsets)\n"
            "  --partition-count: P (default: the DEST's topology.json when above every stored\n"
            "  partition, else the largest stored partition + 1; --buckets without offsets)\n"
            "  --buckets: P for a store without offsets (filled by backfill; any count\n"
            "  1-65536; default: the --config's snapshot.buckets, else 32)\n"
            "  --partitioner: the producers' key partitioner: murmur2_random (Java default),\n"
            "  consistent_random (librdkafka default) or fnv1a_random (default: the\n"
            "  --config's input.partitioner, else murmur2_random)\n"
            "  --codec: deflate (every Avro reader; avro's default), zstandard (smaller and\n"
            "  faster; Java, Python with zstandard, Rust, Go) or null (native's default: its\n"
            "  records are already compressed); --level: the codec's level (deflate 1-9,\n"
            "  zstandard 1-19)\n"
            "  --horizon-s: the store's late-arrival horizon, named in the manifests\n"
            "  (default: the configuration's store.horizon.s, as segd run uses it)\n"
            "  Units keep the dead entries (tombstones, expired entries) at or above the\n"
            "  store's GC watermark W, which caches need to join older deltas exactly; a\n"
            "  store still taking history (W = 0: backfilled) keeps them all: once it\n"
            "  has its history, `segd compact --end-history` moves W (said on stderr)\n"
            "  --changes-topic: whose acknowledged positions the manifests list\n"
            "  (default: the configuration's changes.topic, else segments.changes)\n"
            "  The configuration: --config FILE, then SEGD_* variables, as for segd run\n"
            "  (changes.topic, input.topics, input.partitioner, snapshot.buckets,\n"
            "  snapshot.format, snapshot.upload.*, identity.links.topic); flags win\n"
            "  --format: every unit's records_format: avro (one Avro record per entry, for\n"
            "  any Avro tool) or native (the store's own record bytes, docs/record-format.md:\n"
            "  smaller and faster, for segd's caches and restores); default: the --config's\n"
            "  snapshot.format, else avro. verify and caches read both\n");
}

/* "0,3,7" into a malloc'd array. */
static int parse_partitions(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 1;
    for (const char *c = s; *c; c++)
        cap += *c == ',';
    int32_t *a = malloc(cap * sizeof(*a));
    char *copy = strdup(s), *save = NULL;
    int bad = !a || !copy;
    *n = 0;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !bad;
         tok = strtok_r(NULL, ",", &save)) {
        int64_t v;
        bad = segd_arg_int("snapshot", "--partitions", tok, 0, 99999, &v);
        if (!bad)
            a[(*n)++] = (int32_t)v;
    }
    free(copy);
    if (bad || !*n) {
        free(a);
        return -1;
    }
    free(*out);
    *out = a;
    return 0;
}

typedef struct export_args {
    segd_snapshot_opts_t o;
    const char *db, *to, *partitioner;
    int64_t buckets, partition_count, now_s, level, horizon_s;
    int buckets_given, codec_given, format_given, horizon_given;
    int32_t *partitions;
    segd_config_t cfg;
} export_args_t;

static int parse_codec(const char *s, segd_snapshot_opts_t *o)
{
    if (!strcmp(s, "deflate"))
        o->codec = SEGD_OCF_DEFLATE;
    else if (!strcmp(s, "zstandard"))
        o->codec = SEGD_OCF_ZSTANDARD;
    else if (!strcmp(s, "null"))
        o->codec = SEGD_OCF_NULL;
    else
        return 1;
    return 0;
}

static const struct option export_opts[] = {{"db", required_argument, 0, 'd'},
                                            {"to", required_argument, 0, 't'},
                                            {"topic", required_argument, 0, 'T'},
                                            {"partitions", required_argument, 0, 'p'},
                                            {"partition-count", required_argument, 0, 'P'},
                                            {"partitioner", required_argument, 0, 'r'},
                                            {"config", required_argument, 0, 'C'},
                                            {"buckets", required_argument, 0, 'b'},
                                            {"now", required_argument, 0, 'n'},
                                            {"changes-topic", required_argument, 0, 'c'},
                                            {"level", required_argument, 0, 'l'},
                                            {"codec", required_argument, 0, 'x'},
                                            {"horizon-s", required_argument, 0, 'z'},
                                            {"format", required_argument, 0, 'f'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};

/* The long name of export's flag c, for a message. */
static const char *export_flag(int c)
{
    for (const struct option *o = export_opts; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

/* One flag, after the file and environment (segd_args_parse_config): 0,
 * -1 with err set, -2 said. */
static int apply_export(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n)
{
    export_args_t *a = ctx;
    const char *cmd = "snapshot export";
    int bad = 0;
    (void)cfg;
    switch (c) {
    case 'd': a->db = arg; break;
    case 't': a->to = arg; break;
    case 'T': a->o.topic = arg; break;
    case 'p': bad = parse_partitions(arg, &a->partitions, &a->o.n_partitions); break;
    case 'P': return segd_arg_int(cmd, "--partition-count", arg, 1, 100000, &a->partition_count) ? -2 : 0;
    case 'r': a->partitioner = arg; break;
    case 'b':
        a->buckets_given = 1;
        return segd_arg_int(cmd, "--buckets", arg, 1, 65536, &a->buckets) ? -2 : 0;
    case 'n': return segd_arg_int(cmd, "--now", arg, 1, INT64_MAX / 1000, &a->now_s) ? -2 : 0;
    case 'c': a->o.changes_topic = arg; break;
    case 'l': return segd_arg_int(cmd, "--level", arg, 0, 19, &a->level) ? -2 : 0;
    case 'z':
        a->horizon_given = 1;
        return segd_arg_int(cmd, "--horizon-s", arg, 0, 90 * 86400, &a->horizon_s) ? -2 : 0;
    case 'x':
        bad = parse_codec(arg, &a->o);
        a->codec_given = 1;
        break;
    case 'f':
        bad = segd_snapfmt_parse(arg, &a->o.format) != 0;
        a->format_given = 1;
        break;
    }
    if (bad)
        return snprintf(err, n, "bad --%s '%s'", export_flag(c), arg), -1;
    return 0;
}

/* 0 = parsed, 1 = --help, 2 = usage error (said). */
static int parse_export(int argc, char **argv, export_args_t *a)
{
    static const segd_args_spec_t spec = {"snapshot export", export_opts, "h", usage,
                                          SEGD_ARGS_ENV, NULL, apply_export};
    int rc = segd_args_parse_config(&spec, argc, argv, &a->cfg, a);
    if (rc)
        return rc;
    if (!a->db || !a->to || optind < argc) {
        fprintf(stderr, "segd snapshot export: --db and --to are required\n");
        return 2;
    }
    return 0;
}

/* The configuration's (file, environment, else its defaults) topic,
 * partitioner, change topic, buckets and format under the flags; the
 * options point into a (and its config). */
static int resolve_export(export_args_t *a)
{
    if (!a->o.topic && a->cfg.n_topics)
        a->o.topic = a->cfg.topics[0];
    if (!a->o.changes_topic)
        a->o.changes_topic = a->cfg.changes_topic;
    a->o.links_topic = a->cfg.identity_links_topic;
    if (!a->buckets_given)
        a->buckets = a->cfg.snapshot_buckets;
    if (!a->horizon_given) /* the manifests name the horizon segd run uses */
        a->horizon_s = a->cfg.horizon_s;
    a->o.dest.max_retries = (int)a->cfg.snapshot_upload_retries;
    a->o.dest.backoff_ms = (long)a->cfg.snapshot_upload_backoff_ms;
    if (!a->format_given)
        a->o.format = a->cfg.snapshot_native ? SEGD_SNAPFMT_NATIVE : SEGD_SNAPFMT_AVRO;
    if (!a->codec_given)
        a->o.codec = segd_snapshot_default_codec(a->o.format);
    if (!a->o.changes_topic)
        a->o.changes_topic = "segments.changes";
    a->o.partitioner = a->cfg.partitioner;
    if (a->partitioner && segd_partitioner_parse(a->partitioner, &a->o.partitioner)) {
        fprintf(stderr, "segd snapshot export: --partitioner %s: not murmur2_random, "
                        "consistent_random or fnv1a_random\n", a->partitioner);
        return 2;
    }
    a->o.partitions = a->partitions;
    a->o.buckets = (uint32_t)a->buckets;
    a->o.partition_count = (int32_t)a->partition_count;
    a->o.level = (int)a->level;
    if (a->level == 0)
        a->o.codec = SEGD_OCF_NULL;
    a->o.progress = isatty(2);
    return 0;
}

static void print_export(const export_args_t *a, const segd_manifest_t *m, double dt)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < m->n_files; i++)
        bytes += m->files[i].bytes;
    printf("snapshot: %u units of %s (%d partitions, %s), %" PRIu64 " users, %" PRIu64
           " entries, %" PRIu64 " bytes in %.2f s -> %s/%s\n",
           m->units, m->topic ? m->topic : "?", (int)m->partitions,
           segd_partitioner_name(m->partitioner), m->records, m->segments, bytes, dt, a->to,
           m->topic ? m->topic : "");
}

/* A unit keeps every dead entry (tombstone, expired entry) at or above its
 * W, expired ones included: a cache joins older deltas into it (late events
 * the store still takes), and only the kept entry makes such a delta lose as
 * it loses in the store (DESIGN §6). With W = 0 (a store still taking history, typically
 * filled by backfill) that is every dead entry: say why, and what ends it. */
static void note_dead_kept(const segd_manifest_t *m)
{
    if (!m->units || !m->segments || m->gc_watermark_ms)
        return;
    fprintf(stderr, "segd snapshot export: note: the store's GC watermark W is 0 (it is still "
            "taking history, e.g. filled by backfill, or W has not started yet), so the units keep every tombstone and "
            "expired entry (a cache needs them to join older deltas exactly); once the store "
            "has all its history, `segd compact --end-history` moves W and later exports "
            "leave out the dead entries older than it\n");
}

static int run_export(export_args_t *a)
{
    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = a->db;
    so.read_only = 1;
    so.now_ms = a->now_s * 1000;
    so.horizon_ms = a->horizon_s * 1000;
    segd_store_t *s = NULL;
    char err[512] = "";
    if (segd_store_open(&s, &so, err, sizeof(err))) {
        fprintf(stderr, "segd snapshot export: cannot open store: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    segd_manifest_t m;
    size_t failed = 0;
    double t0 = segd_mono_s();
    segd_err_t e = segd_snapshot_export(s, a->to, &a->o, &m, &failed, err, sizeof(err));
    segd_store_close(s);
    if (m.units)
        print_export(a, &m, segd_mono_s() - t0);
    note_dead_kept(&m);
    segd_manifest_free(&m);
    if (!e)
        return SEGD_EXIT_OK;
    if (failed)
        fprintf(stderr, "segd snapshot export: %zu units failed (their previous units stay): "
                        "%s\n", failed, err);
    else
        fprintf(stderr, "segd snapshot export: %s\n", err);
    return e == SEGD_ERR_CONFIG ? SEGD_EXIT_USAGE : SEGD_EXIT_FAIL;
}

static int export_cmd(int argc, char **argv)
{
    export_args_t a;
    memset(&a, 0, sizeof(a));
    segd_snapshot_opts_default(&a.o);
    a.o.changes_topic = NULL; /* decided by resolve_export */
    a.buckets = a.o.buckets;
    a.level = a.o.level;
    segd_config_init(&a.cfg);
    int rc = parse_export(argc, argv, &a);
    if (!rc)
        rc = resolve_export(&a);
    rc = rc == 1 ? SEGD_EXIT_OK : rc ? SEGD_EXIT_USAGE : run_export(&a);
    free(a.partitions);
    segd_config_free(&a.cfg);
    return rc;
}

static void verify_unit(void *ctx, const segd_unit_report_t *r)
{
    (void)ctx;
    if (r->m)
        printf("p-%05d: valid: %" PRIu64 " users, %" PRIu64 " entries, created_at_ms=%" PRId64
               ", records_format=%s\n", (int)r->partition, r->m->records, r->m->segments,
               r->m->created_at_ms, segd_snapfmt_name(r->m->records_format));
    else
        printf("p-%05d: invalid: %s\n", (int)r->partition, r->errmsg);
}

static int verify_cmd(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("snapshot verify", argc, argv, "h", opts)) != -1)
        if (c == 'h')
            return usage(stdout), SEGD_EXIT_OK;
        else
            return SEGD_EXIT_USAGE;
    if (optind + 1 != argc) {
        fprintf(stderr, "segd snapshot verify: give one SRC (see segd snapshot verify "
                        "--help)\n");
        return SEGD_EXIT_USAGE;
    }
    argv += optind - 1;
    segd_manifest_t m;
    char err[512] = "";
    segd_dest_opts_t d;
    segd_dest_opts_default(&d);
    segd_snapshot_read_opts_t ro = {.dest = &d, .keep_going = 1, .on_unit = verify_unit};
    segd_err_t e = segd_snapshot_read(argv[1], &ro, &m, NULL, NULL, err, sizeof(err));
    if (e) {
        printf("invalid: %s\n", err);
        if (!err[0] || e != SEGD_ERR_CORRUPT)
            fprintf(stderr, "segd snapshot verify: %s\n", segd_err_str(e));
    } else {
        printf("valid: %s, %u units (%d partitions, %s), %" PRIu64 " users, %" PRIu64
               " entries in %zu files, oldest created_at_ms=%" PRId64 ", records_format=%s\n",
               m.topic, m.units, (int)m.partitions, segd_partitioner_name(m.partitioner),
               m.records, m.segments, m.n_files, m.created_at_ms,
               m.records_mixed ? "mixed" : segd_snapfmt_name(m.records_format));
    }
    segd_manifest_free(&m);
    return e ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}

int segd_cmd_snapshot(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "export"))
        return export_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify"))
        return verify_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return SEGD_EXIT_OK;
    }
    fprintf(stderr, "segd snapshot: unknown subcommand '%s' (see segd snapshot --help)\n",
            argv[1]);
    return SEGD_EXIT_USAGE;
}
