/* What a segd program (the CLI, the benchmarks) does once per process: open
 * the store with its compaction filter plugged in, and turn SIGINT/SIGTERM
 * into a stop flag. The daemon's wiring of pipeline and publisher is
 * app/daemon.h. */
#ifndef SEGD_APP_H
#define SEGD_APP_H

#include <signal.h>
#include <stdint.h>

#include "config/config.h"
#include "store/store.h"

/* Fills o with the store defaults plus segd's compaction filter: what every
 * program that opens a store for real uses. SEGD_STORE_MIN_FREE_MB (as for
 * `segd run`'s store.min.free.mb) sets min_free_mb. */
void segd_app_store_opts(segd_store_opts_t *o);

/* Opens the store at dir (segd_app_store_opts), now_s (0 = wall clock),
 * read-only or not; prints "segd CMD: cannot open store: ..." on failure. */
segd_store_t *segd_app_open_store(const char *cmd, const char *dir, int64_t now_s,
                                  int read_only);

/* Fills o (segd_app_store_opts) with cfg->db and the config's store.*
 * settings: granularity, horizon, grace, compaction, free-disk reserve, and
 * the block cache and memtables of memory.limit.mb's split, the RocksDB
 * LOG level and cfg->log (borrowed). */
void segd_app_config_store_opts(const segd_config_t *cfg, segd_store_opts_t *o);

/* Opens cfg->db read-write with segd_app_config_store_opts, as `segd run`
 * and `segd replay` do; now_s as for segd_app_open_store. */
segd_store_t *segd_app_open_config_store(const char *cmd, const segd_config_t *cfg,
                                         int64_t now_s);

/* The same, writable, for commands that must not create a store (erase,
 * compact): a directory without RocksDB's CURRENT file is refused with
 * "segd CMD: DIR is not a segd store". */
segd_store_t *segd_app_open_existing_store(const char *cmd, const char *dir, int64_t now_s);

/* The same, read-only: for the commands that only read (get, offsets show,
 * identity check|members, segments list-retired). RocksDB's read-only open
 * takes no lock, so they work beside a running `segd run` and see the store
 * as of opening (its WAL included). */
segd_store_t *segd_app_open_reader(const char *cmd, const char *dir, int64_t now_s);

/* Makes SIGINT/SIGTERM set the returned flag (finish and exit cleanly); a
 * second signal exits at once with status 130. */
volatile sig_atomic_t *segd_app_stop_on_signals(void);

#endif
