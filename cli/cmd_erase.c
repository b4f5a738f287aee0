/* `segd erase --db DIR [--at-ms MS] [--file F] USER...`: operator-initiated
 * erasure (GDPR requests, support tickets) with ERASE_USER semantics
 * (DESIGN §3): every entry of the user with ts_ms <= MS is dead at once and
 * later events recreate the user. All erasures are one WriteBatch with their
 * outbox entry, so the change stream carries them to caches. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "cli/erase_live.h"
#include "consumer/apply.h"

/* the change stream's source label for erasures made by hand */
#define ERASE_SOURCE "segd erase"

typedef struct erase_job {
    segd_applier_t ap;
    segd_limits_t limits;
    segd_event_t ev;
    int64_t at_ms;
    uint64_t users;
} erase_job_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: segd erase --db DIR [--at-ms MS] [--now UNIX_SECONDS] [--file F] USER...\n"
               "       segd erase --brokers B [--topic T] (--config FILE | --framing F)\n"
               "                  [--db DIR] [--wait-s N] [--at-ms MS] USER...\n"
               "  Erases each USER as an ERASE_USER event at MS (default: now) would:\n"
               "  entries with ts_ms <= MS are dead at once, later events recreate the\n"
               "  user.\n"
               "  Offline (--db alone; stop segd run first): all erasures are written\n"
               "  atomically with their outbox entry; the next `segd run` publishes them\n"
               "  to the change stream so caches erase too. --file F reads more user ids,\n"
               "  one per line.\n"
               "  Live (--brokers, or a --config with brokers): one ERASE_USER event per\n"
               "  user is produced to the input topic T (default: the config's first\n"
               "  topic), in the partition input.partitioner gives the user and in the\n"
               "  framing segd run reads, so the running segd run applies it like any\n"
               "  event (ordering, outbox, caches). The framing is --framing F (raw,\n"
               "  single-object, confluent, auto), else input.format of --config (segd\n"
               "  run's configuration file) or SEGD_INPUT_FORMAT; with none of them\n"
               "  nothing is sent (exit 2): an event framed otherwise is dead-lettered.\n"
               "  With --db (the store segd run writes, read-only here) it waits up to\n"
               "  --wait-s (default 60) until the store shows every erasure, and says so\n"
               "  (exit 0) or why not (exit 1). Without --db the effect is not checked:\n"
               "  it says \"sent; not checked\" and exits 6.\n"
               "  MS below the store's ingest floor (too_late) or more than\n"
               "  10 min after now (from_future) is refused: exit 2, nothing written.\n");
}

/* Validates user as an ERASE_USER event and adds it to the batch. Returns a
 * CLI exit code; nothing is written until every user passed. */
static int add_user(erase_job_t *j, const char *user, size_t len)
{
    char err[256];
    segd_event_reset(&j->ev);
    j->ev.op = SEGD_OP_ERASE_USER;
    j->ev.ts_ms = j->at_ms;
    if (segd_event_set_user(&j->ev, user, len) != SEGD_OK ||
        segd_event_validate(&j->ev, &j->limits, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd erase: user '%.*s': %s\n", (int)(len > 300 ? 300 : len), user,
                len > SEGD_MAX_USER_ID ? "longer than 256 bytes" : err);
        return SEGD_EXIT_USAGE;
    }
    segd_err_t e = segd_applier_add_from(&j->ap, &j->ev, ERASE_SOURCE, 0, (int64_t)j->users, 0);
    if (e) {
        fprintf(stderr, "segd erase: %s\n", segd_err_str(e));
        return SEGD_EXIT_FAIL;
    }
    j->users++;
    return SEGD_EXIT_OK;
}

static int add_file(erase_job_t *j, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "segd erase: cannot open %s\n", path);
        return SEGD_EXIT_USAGE;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = SEGD_EXIT_OK;
    while (rc == SEGD_EXIT_OK && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len > 0)
            rc = add_user(j, line, (size_t)len);
    }
    if (rc == SEGD_EXIT_OK && ferror(f)) {
        fprintf(stderr, "segd erase: read error on %s\n", path);
        rc = SEGD_EXIT_FAIL;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    return rc;
}

/* An erase stamped below W + grace could miss entries a compaction already
 * joined away (DESIGN §3.1); one from the future would erase later events. */
static int check_time(erase_job_t *j)
{
    segd_policy_t *pol = segd_store_policy(j->ap.store);
    segd_ts_verdict_t v = segd_policy_check_ts_floor(pol, j->at_ms, j->limits.max_clock_skew_ms,
                                                     segd_policy_import_floor(pol));
    char floor[160];
    segd_policy_floor_explain(pol, segd_policy_import_floor(pol), floor, sizeof(floor));
    if (v == SEGD_TS_TOO_LATE)
        fprintf(stderr, "segd erase: too_late: --at-ms %" PRId64 " is below the ingest floor "
                "%s\n", j->at_ms, floor);
    else if (v == SEGD_TS_FROM_FUTURE)
        fprintf(stderr, "segd erase: from_future: --at-ms %" PRId64 " is more than %" PRId64
                " ms after now\n", j->at_ms, j->limits.max_clock_skew_ms);
    return v == SEGD_TS_OK ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
}

static int erase_all(erase_job_t *j, const char *file, int argc, char **argv)
{
    char err[512];
    int rc = check_time(j);
    for (int i = 0; rc == SEGD_EXIT_OK && i < argc; i++)
        rc = add_user(j, argv[i], strlen(argv[i]));
    if (rc == SEGD_EXIT_OK && file)
        rc = add_file(j, file);
    if (rc != SEGD_EXIT_OK)
        return rc;
    if (segd_applier_flush(&j->ap, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd erase: store write failed, nothing erased: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    printf("erased %" PRIu64 " users before ts_ms %" PRId64 "\n", j->users, j->at_ms);
    return SEGD_EXIT_OK;
}

int segd_cmd_erase(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"at-ms", required_argument, 0, 'a'},
                                         {"now", required_argument, 0, 'n'},
                                         {"file", required_argument, 0, 'f'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"topic", required_argument, 0, 't'},
                                         {"config", required_argument, 0, 'c'},
                                         {"framing", required_argument, 0, 'F'},
                                         {"wait-s", required_argument, 0, 'w'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL, *file = NULL;
    int64_t at_ms = 0, now_s = 0;
    segd_erase_live_t live = {.wait_s = 60};
    int c;
    optind = 1;
    while ((c = segd_args_next("erase", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'f': file = optarg; break;
        case 'b': live.brokers = optarg; break;
        case 't': live.topic = optarg; break;
        case 'c': live.config = optarg; break;
        case 'F': live.framing = optarg; break;
        case 'w':
            if (segd_arg_int("erase", "--wait-s", optarg, 0, 86400, &live.wait_s))
                return SEGD_EXIT_USAGE;
            break;
        case 'a':
            if (segd_arg_int("erase", "--at-ms", optarg, 1, INT64_MAX, &at_ms))
                return SEGD_EXIT_USAGE;
            break;
        case 'n':
            if (segd_arg_int("erase", "--now", optarg, 1, INT64_MAX / 1000, &now_s))
                return SEGD_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: return SEGD_EXIT_USAGE; /* said by segd_args_next */
        }
    }
    if (live.brokers || live.config || live.framing) {
        if (file || optind >= argc) {
            fprintf(stderr, "segd erase: live: give the users as arguments (no --file)\n");
            return SEGD_EXIT_USAGE;
        }
        live.db = db;
        live.at_ms = at_ms ? at_ms : now_s ? now_s * 1000 : segd_wall_ms();
        return segd_erase_live(&live, argv + optind, argc - optind);
    }
    if (!db || (optind >= argc && !file)) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    segd_store_t *store = segd_app_open_existing_store("erase", db, now_s);
    if (!store)
        return SEGD_EXIT_FAIL;
    erase_job_t j = {0};
    int rc = SEGD_EXIT_FAIL;
    segd_limits_default(&j.limits);
    segd_event_init(&j.ev);
    j.at_ms = at_ms ? at_ms : segd_policy_now_ms(segd_store_policy(store));
    if (segd_applier_init(&j.ap, store) != SEGD_OK)
        goto out_close;
    segd_applier_enable_outbox(&j.ap);
    segd_applier_set_sync(&j.ap); /* "erased" must survive a power loss */
    rc = erase_all(&j, file, argc - optind, argv + optind);
    segd_applier_free(&j.ap);
out_close:
    segd_event_free(&j.ev);
    segd_store_close(store);
    return rc;
}
