/* `segd segments retire --db DIR [--before-ms MS] ID...`: store-wide segment
 * retirement markers (DESIGN §3), kept in the meta family. Each marker is
 * written with an outbox entry, so the change stream carries it to caches as
 * a RETIRE control event (DESIGN §5). */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "cli/cli.h"
#include "wire/outbox.h"

int segd_cmd_segments(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"before-ms", required_argument, 0, 'b'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL;
    int64_t before_ms = 0, id;
    int c;
    optind = 2;
    if (argc < 2 || strcmp(argv[1], "retire") != 0) {
        fprintf(stderr, "usage: segd segments retire --db DIR [--before-ms MS] ID...\n");
        return argc >= 2 && !strcmp(argv[1], "--help") ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    }
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd')
            db = optarg;
        else if (c == 'b') {
            if (segd_arg_int("segments", "--before-ms", optarg, 1, INT64_MAX, &before_ms))
                return SEGD_EXIT_USAGE;
        } else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: segd segments retire --db DIR [--before-ms MS] ID...\n"
                    "  entries of ID with ts_ms <= MS (default: now) are dead at once\n");
            return c == 'h' ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
        }
    }
    if (!db || optind >= argc) {
        fprintf(stderr, "segd segments retire: --db and at least one ID are required\n");
        return SEGD_EXIT_USAGE;
    }
    segd_store_t *s = segd_app_open_store("segments", db, 0, 0);
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
    for (int i = optind; i < argc && rc == SEGD_EXIT_OK; i++) {
        segd_retirement_t r;
        if (segd_arg_int("segments", "ID", argv[i], 0, INT64_MAX, &id)) {
            rc = SEGD_EXIT_USAGE;
            break;
        }
        r.segment_id = id;
        r.retired_before_ms = before_ms;
        if (segd_outbox_retire_value(&r, 1, segd_policy_now_ms(segd_store_policy(s)), &value)) {
            rc = SEGD_EXIT_FAIL;
            break;
        }
        segd_batch_outbox_append(b, value.data, value.len);
        if (segd_store_retire(s, id, before_ms, b, err, sizeof(err)) != SEGD_OK) {
            fprintf(stderr, "segd segments retire: %s\n", err);
            rc = SEGD_EXIT_FAIL;
        } else
            printf("retired segment %" PRId64 " before %" PRId64 "\n", id, before_ms);
    }
    segd_buf_free(&value);
    segd_batch_destroy(b);
    segd_store_close(s);
    return rc;
}
