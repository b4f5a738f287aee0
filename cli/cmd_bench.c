/* `segd bench WHAT`: dispatches to the benchmarks in bench/. Each benchmark
 * owns its flags and its usage (`segd bench WHAT --help`); this file only
 * names them. */
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"

static const segd_cmd_t benches[] = {
    {"store", segd_bench_store, "profile per user vs one key per segment: write, compact, read"},
    {"ingest", segd_bench_ingest, "segd run's pipeline (broker -> decode -> store) vs raw consume"},
    {"snapshot", segd_bench_snapshot, "export vs raw scan, snapshot size vs store, load time"},
    {"cache", segd_bench_cache, "edge table lookups vs the store's record decode"},
    {"backfill", segd_bench_backfill, "backfill merge path and bulk load from JSON lines and Avro"},
    {"restore", segd_bench_restore, "a unit restored into an empty store vs raw read vs replay"},
    {"resp", segd_bench_resp, "segd cache --resp beside redis-server, under redis-benchmark"},
    {"serve", segd_bench_serve, "the cache's HTTP API under wrk vs the in-process lookup"},
    {"identity", segd_bench_identity, "linked reads of 1-, 5-, 20-id components; links applied/s"},
    {"queue", segd_bench_queue, "bytes a message costs in librdkafka's consumer queue, per payload size"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: segd bench WHAT [options]   (segd bench WHAT --help for its flags)\n"
               "  each prints a markdown report on stdout (results: bench/RESULTS.md)\n\n");
    for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
        fprintf(f, "  %-9s %s\n", benches[i].name, benches[i].summary);
}

int segd_cmd_bench(int argc, char **argv)
{
    for (size_t i = 0; argc >= 2 && i < sizeof(benches) / sizeof(benches[0]); i++)
        if (!strcmp(argv[1], benches[i].name))
            return benches[i].run(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return SEGD_EXIT_OK;
    }
    if (argc < 2) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    /* a flag before WHAT belongs to no benchmark */
    fprintf(stderr, "segd bench: unknown %s %s (see segd bench --help)\n",
            argv[1][0] == '-' ? "option" : "benchmark", argv[1]);
    return SEGD_EXIT_USAGE;
}
