/* `segd generate`: writes the seed workload (DESIGN §8) as JSON lines, the
 * backfill input format, so demos and tests share one generator. */
#include <getopt.h>
#include <time.h>

#include "workload/seed.h"
#include "cli/cli.h"
#include "wire/json_event.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: segd generate --out FILE [--users N] [--seed S] [--now S]\n"
               "  seed workload: 50 UPSERT events of 20 segments per user, ids in\n"
               "  [0, 82000), ts over the 30 days before --now, ttl 1/7/30/60 days\n");
}

int segd_cmd_generate(int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"users", required_argument, 0, 'u'},
                                         {"seed", required_argument, 0, 's'},
                                         {"now", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    segd_seed_opts_t so;
    segd_seed_opts_default(&so);
    const char *out = NULL;
    int64_t v, now_s = (int64_t)time(NULL);
    int c;
    optind = 1;
    while ((c = segd_args_next("generate", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'u':
            if (segd_arg_int("generate", "--users", optarg, 1, INT64_MAX, &v))
                return SEGD_EXIT_USAGE;
            so.users = (uint64_t)v;
            break;
        case 's':
            if (segd_arg_int("generate", "--seed", optarg, 0, INT64_MAX, &v))
                return SEGD_EXIT_USAGE;
            so.seed = (uint64_t)v;
            break;
        case 'n':
            if (segd_arg_int("generate", "--now", optarg, 1, INT64_MAX / 1000, &now_s))
                return SEGD_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: return SEGD_EXIT_USAGE; /* said by segd_args_next */
        }
    }
    if (!out) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    so.now_ms = now_s * 1000;
    segd_seed_t *g = NULL;
    FILE *f = fopen(out, "w");
    if (!f || segd_seed_new(&g, &so) != SEGD_OK) {
        fprintf(stderr, "segd generate: cannot write %s\n", out);
        if (f)
            fclose(f);
        return SEGD_EXIT_FAIL;
    }
    segd_event_t ev;
    segd_event_init(&ev);
    uint64_t n = 0;
    int rc = SEGD_EXIT_OK;
    while (segd_seed_next(g, &ev) && rc == SEGD_EXIT_OK) {
        rc = segd_json_event_write(&ev, f) ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
        n++;
    }
    if (fclose(f) != 0)
        rc = SEGD_EXIT_FAIL;
    if (rc)
        fprintf(stderr, "segd generate: write to %s failed\n", out);
    else
        printf("wrote %llu events for %llu users to %s\n", (unsigned long long)n,
               (unsigned long long)so.users, out);
    segd_event_free(&ev);
    segd_seed_destroy(g);
    return rc;
}
