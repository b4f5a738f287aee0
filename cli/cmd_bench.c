/* `segd bench WHAT`: dispatches to the benchmarks in bench/. */
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"

int segd_cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "store"))
        return segd_bench_store(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "ingest"))
        return segd_bench_ingest(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "cache"))
        return segd_bench_cache(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "snapshot"))
        return segd_bench_snapshot(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "backfill"))
        return segd_bench_backfill(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "restore"))
        return segd_bench_restore(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "resp"))
        return segd_bench_resp(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "serve"))
        return segd_bench_serve(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "identity"))
        return segd_bench_identity(argc - 1, argv + 1);
    fprintf(argc >= 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
            "usage: segd bench store [--users N] [--dir DIR] [--baseline-users N]\n"
            "       segd bench ingest [--users N] [--partitions P] [--batch N] [--memory-mb M]\n"
            "       segd bench snapshot [--users N] [--rounds R] [--buckets B] [--dir DIR]\n"
            "       segd bench cache [--users N] [--lookups N]\n"
            "       segd bench backfill [--users N] [--dir DIR] [--keep]\n"
            "       segd bench restore [--users N] [--partitions P] [--dir DIR]\n"
            "       segd bench resp [--users U] [--segments S] [--requests N] [--clients C]\n"
            "                       [--threads T] [--client-threads K]\n"
            "       segd bench serve [--users U] [--segments S] [--duration S]\n"
            "                        [--connections C] [--wrk-threads T]\n"
            "       segd bench identity [--persons N] [--lookups N] [--link-events N] [--dir DIR]\n");
    return argc >= 2 && !strcmp(argv[1], "--help") ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
}
