/* `segd snapshot export|verify`: consistent bucketed snapshots for caches
 * (DESIGN §6). Export opens the store read-only, so it runs beside a live
 * `segd run`; verify's exit status says whether SRC holds a whole snapshot. */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cache/snapshot_read.h"
#include "publisher/snapshot.h"
#include "base/clock.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: segd snapshot export --db DIR --to DEST [--buckets 32] [--now S]\n"
            "                            [--changes-topic T] [--codec deflate] [--level 1]\n"
            "                            [--horizon-s 86400] [--format avro|native]\n"
            "       segd snapshot verify SRC\n"
            "  DEST/SRC: a directory, http(s)://host/path (PUT/GET) or s3://bucket/prefix\n"
            "  (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,\n"
            "  AWS_REGION; SEGD_S3_ENDPOINT for an S3-compatible server)\n"
            "  --buckets: a power of two; --codec: deflate (every Avro reader; avro's\n"
            "  default), zstandard (smaller and faster; Java, Python with zstandard, Rust,\n"
            "  Go) or null (native's default: its records are already compressed);\n"
            "  --level: the codec's level (deflate 1-9, zstandard 1-19)\n"
            "  --horizon-s: the store's late-arrival horizon (store.horizon.s of segd run):\n"
            "  dead entries younger than it are kept in the snapshot\n"
            "  --changes-topic: whose acknowledged positions the manifest lists\n"
            "  (default segments.changes)\n"
            "  --format: avro (default: one Avro record per entry, for any Avro tool) or\n"
            "  native (the store's own record bytes, docs/record-format.md: smaller and\n"
            "  faster, for segd's caches and restores); verify and caches read both\n");
}

static int export_cmd(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"to", required_argument, 0, 't'},
                                         {"buckets", required_argument, 0, 'b'},
                                         {"now", required_argument, 0, 'n'},
                                         {"changes-topic", required_argument, 0, 'c'},
                                         {"level", required_argument, 0, 'l'},
                                         {"codec", required_argument, 0, 'x'},
                                         {"horizon-s", required_argument, 0, 'z'},
                                         {"format", required_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    const char *db = NULL, *to = NULL;
    int64_t buckets = o.buckets, now_s = 0, level = o.level, horizon_s = 86400;
    int c, codec_given = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': db = optarg; break;
        case 't': to = optarg; break;
        case 'b': bad = segd_arg_int("snapshot", "--buckets", optarg, 1, 65536, &buckets); break;
        case 'n': bad = segd_arg_int("snapshot", "--now", optarg, 1, INT64_MAX / 1000, &now_s); break;
        case 'c': o.changes_topic = optarg; break;
        case 'l': bad = segd_arg_int("snapshot", "--level", optarg, 0, 19, &level); break;
        case 'z':
            bad = segd_arg_int("snapshot", "--horizon-s", optarg, 0, 90 * 86400, &horizon_s);
            break;
        case 'x':
            codec_given = 1;
            if (!strcmp(optarg, "deflate"))
                o.codec = SEGD_OCF_DEFLATE;
            else if (!strcmp(optarg, "zstandard"))
                o.codec = SEGD_OCF_ZSTANDARD;
            else if (!strcmp(optarg, "null"))
                o.codec = SEGD_OCF_NULL;
            else
                bad = 1;
            break;
        case 'f': bad = segd_snapfmt_parse(optarg, &o.format) != 0; break;
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: usage(stderr); return SEGD_EXIT_USAGE;
        }
        if (bad)
            return SEGD_EXIT_USAGE;
    }
    if (!db || !to || optind < argc || (buckets & (buckets - 1))) {
        fprintf(stderr, "segd snapshot export: --db and --to are required; --buckets must be "
                        "a power of two\n");
        return SEGD_EXIT_USAGE;
    }
    o.buckets = (uint32_t)buckets;
    o.level = (int)level;
    if (!codec_given)
        o.codec = segd_snapshot_default_codec(o.format);
    if (level == 0)
        o.codec = SEGD_OCF_NULL;
    o.progress = isatty(2);
    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = db;
    so.read_only = 1;
    so.now_ms = now_s * 1000;
    so.horizon_ms = horizon_s * 1000;
    segd_store_t *s = NULL;
    char oerr[512];
    if (segd_store_open(&s, &so, oerr, sizeof(oerr))) {
        fprintf(stderr, "segd snapshot export: cannot open store: %s\n", oerr);
        return SEGD_EXIT_FAIL;
    }
    segd_manifest_t m;
    char err[512] = "";
    double t0 = segd_mono_s();
    segd_err_t e = segd_snapshot_export(s, to, &o, &m, err, sizeof(err));
    segd_store_close(s);
    if (e) {
        fprintf(stderr, "segd snapshot export: %s (no manifest written)\n", err);
        return SEGD_EXIT_FAIL;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < m.n_files; i++)
        bytes += m.files[i].bytes;
    printf("snapshot: %" PRIu64 " users, %" PRIu64 " entries, %u buckets, %" PRIu64
           " bytes in %.2f s -> %s\n",
           m.records, m.segments, m.buckets, bytes, segd_mono_s() - t0, to);
    segd_manifest_free(&m);
    return SEGD_EXIT_OK;
}

static int verify_cmd(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "--help")) {
        usage(argc == 2 ? stdout : stderr);
        return argc == 2 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    }
    segd_manifest_t m;
    char err[512] = "";
    segd_dest_opts_t d;
    segd_dest_opts_default(&d);
    segd_err_t e = segd_snapshot_read(argv[1], &d, &m, NULL, NULL, err, sizeof(err));
    if (e) {
        printf("invalid: %s\n", err);
        if (!err[0] || e != SEGD_ERR_CORRUPT)
            fprintf(stderr, "segd snapshot verify: %s\n", segd_err_str(e));
    } else {
        printf("valid: %" PRIu64 " users, %" PRIu64 " entries in %zu files, created_at_ms=%" PRId64
               ", record_format=%s\n", m.records, m.segments, m.n_files, m.created_at_ms,
               segd_snapfmt_name(m.format));
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
    usage(stderr);
    return SEGD_EXIT_USAGE;
}
