/* `segd demo [--dir DIR] [--users N]`: the README's first command. Generates
 * a seed-workload sample, backfills it into a fresh store, and prints what a
 * bidder would read for one user plus the store's figures. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

static int run(int (*cmd)(int, char **), char **argv)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    return cmd(argc, argv);
}

int segd_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"users", required_argument, 0, 'u'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    char dir[512] = "segd-demo", file[600], db[600], users[32] = "2000", now[32];
    int64_t v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd')
            snprintf(dir, sizeof(dir), "%s", optarg);
        else if (c == 'u') {
            if (segd_cli_int("demo", "--users", optarg, 1, 10000000, &v))
                return SEGD_EXIT_USAGE;
            snprintf(users, sizeof(users), "%lld", (long long)v);
        } else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: segd demo [--dir DIR] [--users N]   (default ./segd-demo, 2000)\n");
            return c == 'h' ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
        }
    }
    mkdir(dir, 0755);
    snprintf(file, sizeof(file), "%s/seed.jsonl", dir);
    snprintf(db, sizeof(db), "%s/db-%lld", dir, (long long)time(NULL));
    snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
    printf("== 1. generate the seed workload (%s users x 50 events x 20 segments)\n", users);
    char *gen[] = {"generate", "--out", file, "--users", users, "--now", now, NULL};
    if (run(segd_cmd_generate, gen))
        return SEGD_EXIT_FAIL;
    printf("\n== 2. backfill into %s (merge operands, no read-modify-write)\n", db);
    char *bf[] = {"backfill", "--db", db, file, NULL};
    if (run(segd_cmd_backfill, bf))
        return SEGD_EXIT_FAIL;
    printf("\n== 3. what a bidder reads for user u0000000000 (live segments expiring after "
           "tomorrow, first lines)\n");
    char tomorrow[32];
    snprintf(tomorrow, sizeof(tomorrow), "%lld", (long long)time(NULL) + 86400);
    char *get[] = {"get", "--db", db, "--expiring-after", tomorrow, "--count-range",
                   "0:9999", "u0000000000", NULL};
    fflush(stdout);
    if (run(segd_cmd_get, get))
        return SEGD_EXIT_FAIL;
    printf("\n== 4. full compaction, then store figures\n");
    char *cp[] = {"compact", "--db", db, NULL};
    char *st[] = {"stats", "--db", db, NULL};
    if (run(segd_cmd_compact, cp) || run(segd_cmd_stats, st))
        return SEGD_EXIT_FAIL;
    printf("\nTry: segd get --db %s --json u0000000042\n", db);
    return SEGD_EXIT_OK;
}
