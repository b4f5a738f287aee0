/* `segd backfill --db DIR [--now S] FILE...`: applies SegmentEvents from
 * JSON-lines files and Avro object container files. A bad record is reported
 * as file:line (or file:#record) with its reason, counted and skipped. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "consumer/apply.h"
#include "wire/avro_codec.h"
#include "wire/json_event.h"
#include "base/clock.h"

#define BACKFILL_BATCH 1000

typedef struct backfill {
    segd_applier_t ap;
    segd_limits_t limits;
    const char *file;
    uint64_t skipped;
    int failed; /* a store write failed: stop */
    volatile sig_atomic_t *stop;
} backfill_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: segd backfill --db DIR [--now UNIX_SECONDS] [--no-changes] FILE...\n"
               "  FILE: JSON lines (one SegmentEvent per line) or an Avro object\n"
               "  container file of SegmentEvent. Exit 0 if every record applied,\n"
               "  3 if some were skipped (reported on stderr), 1 on failure.\n"
               "  Events older than the store's GC watermark + grace (too_late) or more\n"
               "  than 10 min after now (from_future) are skipped; a fresh store (no\n"
               "  watermark yet) takes history of any age.\n"
               "  The changes go to the outbox, published by the next `segd run` to\n"
               "  the change stream; --no-changes skips that (caches reload a snapshot).\n");
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

/* Validates and applies one event; flushes every BACKFILL_BATCH events. */
static int apply_one(backfill_t *b, const segd_event_t *ev, const char *where, long record_no)
{
    char err[256];
    if (segd_event_validate(ev, &b->limits, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "%s: %s\n", where, err);
        b->skipped++;
        return 0;
    }
    /* DESIGN §3, as segd run's too_late / from_future dead letters */
    segd_policy_t *pol = segd_store_policy(b->ap.store);
    segd_ts_verdict_t v = segd_policy_check_ts(pol, ev->ts_ms, b->limits.max_clock_skew_ms);
    if (v != SEGD_TS_OK) {
        if (v == SEGD_TS_TOO_LATE)
            fprintf(stderr, "%s: too_late: ts_ms %lld is below %lld (GC watermark + grace)\n",
                    where, (long long)ev->ts_ms, (long long)segd_policy_ts_floor(pol));
        else
            fprintf(stderr, "%s: from_future: ts_ms %lld is more than %lld ms after now\n",
                    where, (long long)ev->ts_ms, (long long)b->limits.max_clock_skew_ms);
        b->skipped++;
        return 0;
    }
    /* the change stream's source: the file, its line or record number */
    segd_err_t e = segd_applier_add_from(&b->ap, ev, b->file, 0, record_no, 0);
    if (e)
        snprintf(err, sizeof(err), "%s", segd_err_str(e));
    else if (segd_batch_count(b->ap.batch) >= BACKFILL_BATCH)
        e = flush_waiting(b, err, sizeof(err));
    if (e) {
        fprintf(stderr, "segd backfill: store write failed: %s\n", err);
        b->failed = 1;
        return -1;
    }
    return 0;
}

static int backfill_json(backfill_t *b, FILE *f)
{
    segd_event_t ev;
    segd_event_init(&ev);
    char *line = NULL, where[512], err[256];
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        snprintf(where, sizeof(where), "%s:%ld", b->file, lineno);
        if ((size_t)len > b->limits.max_message) {
            fprintf(stderr, "%s: line of %zd bytes exceeds %zu\n", where, len,
                    b->limits.max_message);
            b->skipped++;
            continue;
        }
        if (segd_json_event_parse(line, (size_t)len, &ev, err, sizeof(err)) != SEGD_OK) {
            fprintf(stderr, "%s: %s\n", where, err);
            b->skipped++;
            continue;
        }
        if (apply_one(b, &ev, where, lineno))
            break;
    }
    if (!b->failed && ferror(f)) {
        fprintf(stderr, "%s: read error after line %ld: %s\n", b->file, lineno,
                strerror(errno));
        b->skipped++;
    }
    free(line);
    segd_event_free(&ev);
    return b->failed ? -1 : 0;
}

static int avro_record_cb(void *ctx, const segd_event_t *ev, long record_no,
                          const char *decode_error)
{
    backfill_t *b = ctx;
    char where[512];
    snprintf(where, sizeof(where), "%s:#%ld", b->file, record_no);
    if (decode_error) {
        fprintf(stderr, "%s: %s\n", where, decode_error);
        b->skipped++;
        return 0;
    }
    return apply_one(b, ev, where, record_no);
}

static int is_avro_container(FILE *f)
{
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    rewind(f);
    return n == 4 && memcmp(magic, "Obj\x01", 4) == 0;
}

static int backfill_file(backfill_t *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    char err[512];
    struct stat st;
    if (!f) {
        fprintf(stderr, "segd backfill: cannot open %s: %s\n", path, strerror(errno));
        b->skipped++;
        return 0;
    }
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) { /* a directory reads as empty */
        fprintf(stderr, "segd backfill: %s: not a regular file\n", path);
        fclose(f);
        b->skipped++;
        return 0;
    }
    b->file = path;
    int rc;
    if (is_avro_container(f)) {
        fclose(f);
        if (segd_avro_file_foreach(path, avro_record_cb, b, err, sizeof(err)) != SEGD_OK &&
            !b->failed) {
            /* an unreadable tail: what was read is applied, the rest reported */
            fprintf(stderr, "%s: %s\n", path, err);
            b->skipped++;
        }
        return b->failed ? -1 : 0;
    }
    rc = backfill_json(b, f);
    fclose(f);
    return rc;
}

int segd_cmd_backfill(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"now", required_argument, 0, 'n'},
                                         {"no-changes", no_argument, 0, 'x'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL;
    int64_t now_s = 0;
    int c, changes = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'n':
            if (segd_arg_int("backfill", "--now", optarg, 1, INT64_MAX / 1000, &now_s))
                return SEGD_EXIT_USAGE;
            break;
        case 'x': changes = 0; break;
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: usage(stderr); return SEGD_EXIT_USAGE;
        }
    }
    if (!db || optind >= argc) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    segd_store_t *store = segd_app_open_store("backfill", db, now_s, 0);
    if (!store)
        return SEGD_EXIT_FAIL;
    backfill_t b = {0};
    b.stop = segd_app_stop_on_signals();
    char err[512];
    segd_limits_default(&b.limits);
    int rc = SEGD_EXIT_FAIL;
    double t0 = segd_mono_s();
    if (segd_applier_init(&b.ap, store) != SEGD_OK)
        goto out_close;
    if (changes)
        segd_applier_enable_outbox(&b.ap);
    for (int i = optind; i < argc; i++)
        if (backfill_file(&b, argv[i]))
            goto out_free;
    if (flush_waiting(&b, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd backfill: store write failed: %s\n", err);
        goto out_free;
    }
    double dt = segd_mono_s() - t0;
    printf("applied %llu events (%llu segments), skipped %llu, %.2f s, %.0f segments/s\n",
           (unsigned long long)b.ap.events, (unsigned long long)b.ap.segments,
           (unsigned long long)b.skipped, dt, dt > 0 ? (double)b.ap.segments / dt : 0.0);
    rc = b.skipped ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
out_free:
    segd_applier_free(&b.ap);
out_close:
    segd_store_close(store);
    return rc;
}
