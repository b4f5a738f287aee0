/* `segd segments retire|list-retired`: store-wide segment and partner
 * retirement markers (DESIGN §3, §3.2), kept in the meta family. retire writes each marker with an
 * outbox entry, so the change stream carries it to caches as a RETIRE
 * control event (DESIGN §5); it holds the store's lock (stop segd run
 * first). list-retired only reads: it opens the store read-only and works
 * beside a running segd run. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "cli/erase_live.h"
#include "wire/outbox.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: segd segments retire --db DIR [--before-ms MS] [--partner] ID...\n"
               "       segd segments retire --brokers B [--topic T]\n"
               "                            (--config FILE | --framing F) [--db DIR]\n"
               "                            [--wait-s N] [--before-ms MS] [--partner] ID...\n"
               "       segd segments list-retired --db DIR [--json]\n"
               "  retire: entries of each ID with ts_ms <= MS (default: now) are dead at\n"
               "    once, in the store and (through the change stream) in caches; later\n"
               "    events recreate the segment. With --db alone it writes the store:\n"
               "    stop segd run first. Live (--brokers, or a --config with brokers): a\n"
               "    control event (user id segd.control:retire) is produced to every\n"
               "    partition of the input topic T and the running segd run applies it\n"
               "    with its batch. It is framed as segd run reads: --framing F, else\n"
               "    input.format of --config or SEGD_INPUT_FORMAT; with none of them\n"
               "    nothing is sent (exit 2). With --db it waits up to --wait-s (default\n"
               "    60) until the store lists every retirement (exit 0) or says why not\n"
               "    (exit 1); without --db the effect is not checked (\"sent; not\n"
               "    checked\", exit 6).\n"
               "  --partner: each ID is a partner id (int32, an entry's partner_id): every\n"
               "    entry of that partner with ts_ms <= MS is dead, whatever its segment\n"
               "    (a partner's contract ended); live, the control event's user id is\n"
               "    segd.control:retire-partner. A negative partner id goes after --.\n"
               "  list-retired: every retirement marker (segment id, retired_before_ms;\n"
               "    a partner's as partner:P, JSON partner_id), a table or JSON lines;\n"
               "    read-only, works beside a running segd run.\n");
}

static int print_retired(void *ctx, int64_t segment_id, int64_t before_ms)
{
    const int *json = ctx;
    int32_t partner;
    if (segd_retire_key_partner(segment_id, &partner)) {
        if (*json)
            printf("{\"partner_id\":%" PRId32 ",\"retired_before_ms\":%" PRId64 "}\n", partner,
                   before_ms);
        else
            printf("partner:%-12" PRId32 " %20" PRId64 "\n", partner, before_ms);
        return 0;
    }
    if (*json)
        printf("{\"segment_id\":%" PRId64 ",\"retired_before_ms\":%" PRId64 "}\n", segment_id,
               before_ms);
    else
        printf("%-20" PRId64 " %20" PRId64 "\n", segment_id, before_ms);
    return 0;
}

static int cmd_list(const char *db, int json)
{
    segd_store_t *s = segd_app_open_reader("segments list-retired", db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    char err[512];
    segd_store_view_t *v = NULL;
    if (!json)
        printf("%-20s %20s\n", "SEGMENT_ID", "RETIRED_BEFORE_MS");
    segd_err_t e = segd_store_view_open(s, &v, err, sizeof(err));
    if (!e)
        e = segd_store_view_retirements(v, print_retired, &json, err, sizeof(err));
    segd_store_view_close(v);
    segd_store_close(s);
    if (e)
        fprintf(stderr, "segd segments list-retired: %s\n", err);
    return e ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}

/* The marker keys of args[0..n): segment ids, or with partner the keys of
 * partner ids (core/record.h). NULL after a usage message. */
static int64_t *parse_keys(char **args, int n, int partner)
{
    int64_t *keys = calloc((size_t)n, sizeof(*keys)), v;
    for (int i = 0; keys && i < n; i++) {
        if (partner ? segd_arg_int("segments retire", "partner id", args[i], INT32_MIN, INT32_MAX, &v)
                    : segd_arg_int("segments retire", "ID", args[i], 0, INT64_MAX, &v)) {
            free(keys);
            return NULL;
        }
        keys[i] = partner ? segd_retire_key_of_partner((int32_t)v) : v;
    }
    return keys;
}

static void say_retired(int64_t key, int64_t before_ms)
{
    int32_t partner;
    if (segd_retire_key_partner(key, &partner))
        printf("retired partner %" PRId32 " before %" PRId64 "\n", partner, before_ms);
    else
        printf("retired segment %" PRId64 " before %" PRId64 "\n", key, before_ms);
}

static int cmd_retire(const char *db, int64_t before_ms, const int64_t *keys, int n)
{
    segd_store_t *s = segd_app_open_store("segments retire", db, 0, 0); /* may make one: retire, then load */
    if (!s)
        return SEGD_EXIT_FAIL;
    if (!before_ms)
        before_ms = segd_policy_now_ms(segd_store_policy(s));
    int rc = SEGD_EXIT_OK;
    char err[512];
    segd_batch_t *b = NULL;
    segd_buf_t value = {0};
    if (segd_batch_new(s, &b) != SEGD_OK) {
        segd_store_close(s);
        return SEGD_EXIT_FAIL;
    }
    for (int i = 0; i < n && rc == SEGD_EXIT_OK; i++) {
        segd_retirement_t r = {keys[i], before_ms};
        if (segd_outbox_retire_value(&r, 1, segd_policy_now_ms(segd_store_policy(s)), &value)) {
            rc = SEGD_EXIT_FAIL;
            break;
        }
        segd_batch_outbox_append(b, value.data, value.len);
        if (segd_store_retire(s, keys[i], before_ms, b, err, sizeof(err)) != SEGD_OK) {
            fprintf(stderr, "segd segments retire: %s\n", err);
            rc = SEGD_EXIT_FAIL;
        } else
            say_retired(keys[i], before_ms);
    }
    segd_buf_free(&value);
    segd_batch_destroy(b);
    segd_store_close(s);
    return rc;
}

static int retire_live(segd_erase_live_t *live, const char *db, int64_t before_ms,
                       const int64_t *keys, int n)
{
    live->db = db;
    live->at_ms = before_ms ? before_ms : segd_wall_ms();
    return segd_retire_live(live, keys, n);
}

int segd_cmd_segments(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"before-ms", required_argument, 0, 'b'},
                                         {"json", no_argument, 0, 'j'},
                                         {"brokers", required_argument, 0, 'B'},
                                         {"topic", required_argument, 0, 't'},
                                         {"config", required_argument, 0, 'c'},
                                         {"framing", required_argument, 0, 'F'},
                                         {"wait-s", required_argument, 0, 'w'},
                                         {"partner", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL;
    int64_t before_ms = 0;
    int c, json = 0, partner = 0;
    segd_erase_live_t live = {.wait_s = 60};
    const char *sub = argc >= 2 ? argv[1] : "";
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        usage(stdout);
        return SEGD_EXIT_OK;
    }
    int retire = !strcmp(sub, "retire"), list = !strcmp(sub, "list-retired");
    if (!retire && !list) {
        fprintf(stderr, "segd segments: unknown subcommand '%s' (see segd segments --help)\n",
                sub);
        return SEGD_EXIT_USAGE;
    }
    /* each subcommand its own flags: list-retired refuses retire's */
    struct option mine[sizeof(opts) / sizeof(opts[0])];
    segd_args_pick(opts, retire ? "dbBtcFwph" : "djh", mine, sizeof(mine) / sizeof(mine[0]));
    const char *cmd = retire ? "segments retire" : "segments list-retired";
    optind = 2;
    while ((c = segd_args_next(cmd, argc, argv, "h", mine)) != -1) {
        if (c == 'd')
            db = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'p')
            partner = 1;
        else if (c == 'B')
            live.brokers = optarg;
        else if (c == 't')
            live.topic = optarg;
        else if (c == 'c')
            live.config = optarg;
        else if (c == 'F')
            live.framing = optarg;
        else if (c == 'w') {
            if (segd_arg_int(cmd, "--wait-s", optarg, 0, 86400, &live.wait_s))
                return SEGD_EXIT_USAGE;
        }
        else if (c == 'b') {
            if (segd_arg_int(cmd, "--before-ms", optarg, 1, INT64_MAX, &before_ms))
                return SEGD_EXIT_USAGE;
        } else if (c == 'h') {
            usage(stdout);
            return SEGD_EXIT_OK;
        } else
            return SEGD_EXIT_USAGE; /* said by segd_args_next */
    }
    int is_live = live.brokers || live.config || live.framing;
    const char *why = !db && !(retire && is_live)
                          ? retire ? "--db DIR or --brokers B (or a --config) is required"
                                   : "--db DIR is required"
                      : retire && optind >= argc ? "give at least one ID"
                      : list && optind != argc   ? "list-retired takes no operand"
                                                 : NULL;
    if (why) {
        fprintf(stderr, "segd %s: %s (see segd %s --help)\n", cmd, why, cmd);
        return SEGD_EXIT_USAGE;
    }
    if (list)
        return cmd_list(db, json);
    int n = argc - optind;
    int64_t *keys = parse_keys(argv + optind, n, partner);
    if (!keys)
        return SEGD_EXIT_USAGE;
    int rc = is_live ? retire_live(&live, db, before_ms, keys, n)
                     : cmd_retire(db, before_ms, keys, n);
    free(keys);
    return rc;
}
