/* segd: one binary, one subcommand per job. This file only dispatches. */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const segd_cmd_t commands[] = {
    {"demo", segd_cmd_demo, "self-contained demo: broker, producer, pipeline, reads"},
    {"run", segd_cmd_run, "the daemon: Kafka -> store, exactly-once offsets, DLQ"},
    {"dev-broker", segd_cmd_dev_broker, "serve an in-process Kafka cluster on loopback"},
    {"produce", segd_cmd_produce, "synthetic DMP: produce the seed workload to Kafka"},
    {"replay", segd_cmd_replay, "re-apply a topic range to a store; stored offsets untouched"},
    {"rebuild", segd_cmd_rebuild, "rebuild a store from its topics beside it; swapped in at restart"},
    {"offsets", segd_cmd_offsets, "show (beside segd run) or set (offline) the stored input offsets"},
    {"backfill", segd_cmd_backfill, "apply SegmentEvents from JSON-lines or Avro files"},
    {"get", segd_cmd_get, "print a user's live segments as a bidder reads them"},
    {"owner", segd_cmd_owner, "a user's input partition and the group member holding it"},
    {"compact", segd_cmd_compact, "full manual compaction (drops dead entries)"},
    {"stats", segd_cmd_stats, "users, live segments, bytes on disk"},
    {"generate", segd_cmd_generate, "write a seed-workload file (JSON lines)"},
    {"erase", segd_cmd_erase, "erase users by hand (ERASE_USER), carried to caches"},
    {"segments", segd_cmd_segments, "store-wide segment retirement (retire, list-retired)"},
    {"snapshot", segd_cmd_snapshot,
     "export / verify consistent snapshots: one unit per input partition"},
    {"cache", segd_cmd_cache, "edge cache: snapshot + change stream, served over HTTP and RESP"},
    {"bench", segd_cmd_bench, "benchmarks, one per part; `segd bench --help` lists them"},
    {"identity", segd_cmd_identity,
     "identity graph: rebuild, check, members, stats, produce, backfill"},
    {"version", segd_cmd_version, "segd's version and its libraries' (also segd --version)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: segd COMMAND [options]   (segd COMMAND --help for its flags)\n\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (argc > 2)
            for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (!strcmp(argv[2], commands[i].name)) {
                    char *help_argv[] = {argv[2], "--help", NULL};
                    return commands[i].run(2, help_argv);
                }
        usage(stdout);
        return SEGD_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version") && argc == 2)
        return segd_version_print(stdout);
    /* `segd CMD -h` asks for CMD's help whatever CMD's own parser knows: a
     * command's first argument can only be an option or a subcommand, never
     * an option's value, so reading it as --help changes nothing else. */
    static char long_help[] = "--help";
    if (argc > 2 && !strcmp(argv[2], "-h"))
        argv[2] = long_help;
    /* libcurl's lazy global init is not thread-safe, and segd run exports
     * snapshots and reaches the registry from several threads */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) {
            int rc = commands[i].run(argc - 1, argv + 1);
            curl_global_cleanup();
            return rc;
        }
    fprintf(stderr, "segd: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return SEGD_EXIT_USAGE;
}
