/* Benchmarks behind `segd bench`; each prints a markdown report on stdout. */
#ifndef SEGD_BENCH_H
#define SEGD_BENCH_H

#include <stdint.h>

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

/* argv[0] = "restore": a partition unit loaded into an empty store vs the
 * raw read of its files vs replaying the partition's input. */
int segd_bench_restore(int argc, char **argv);

/* argv[0] = "resp": segd cache --resp's read path beside a redis-server
 * holding the same sorted sets, both read by redis-benchmark. */
int segd_bench_resp(int argc, char **argv);
/* argv[0] = "serve": the cache's HTTP API under wrk (single GETs, 100-user
 * batches) beside the in-process lookup of the same table. */
int segd_bench_serve(int argc, char **argv);
/* argv[0] = "identity": linked reads of 1-, 5- and 20-id components of 1000
 * segments per id (p50/p99), and link events applied per second. */
int segd_bench_identity(int argc, char **argv);
/* argv[0] = "queue": the bytes a message costs in librdkafka's consumer
 * queue beyond its payload, for payloads of 50, 200, 500 and 2000 bytes. */
int segd_bench_queue(int argc, char **argv);

/* For the benchmarks (bench_ingest.c): segd run's pipeline over `want`
 * messages of topic into the store dir/name, with or without the change
 * stream; *seconds from the first message to the last one applied (and its
 * delta acknowledged with changes). 0 when every message was consumed. */
int segd_bench_consume(const char *brokers, const char *dir, int64_t batch, const char *topic,
                       const char *name, int64_t want, int changes, double *seconds,
                       uint64_t *segments);

#endif
