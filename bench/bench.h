/* Benchmarks behind `segd bench`; each prints a markdown report on stdout. */
#ifndef SEGD_BENCH_H
#define SEGD_BENCH_H

/* argv[0] = "store"; returns a CLI exit code. */
int segd_bench_store(int argc, char **argv);

/* argv[0] = "ingest": broker -> decode -> store vs raw consume. */
int segd_bench_ingest(int argc, char **argv);

/* argv[0] = "snapshot": export vs raw scan, size vs store, load time. */
int segd_bench_snapshot(int argc, char **argv);

/* argv[0] = "cache": edge table lookup latency vs the store's record decode. */
int segd_bench_cache(int argc, char **argv);

/* argv[0] = "backfill": the file merge path (JSON lines, OCF; 1 and 2
 * threads) and the reader alone, each variant in a forked child. */
int segd_bench_backfill(int argc, char **argv);

#endif
