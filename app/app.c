/* Per-process setup shared by the CLI and the benchmarks; see app.h. */
#include "app/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compactor/filter.h"

void segd_app_store_opts(segd_store_opts_t *o)
{
    segd_store_opts_default(o);
    segd_compactor_install(o);
    /* the offline commands have no config file: the variable `segd run`
     * reads for store.min.free.mb applies to them too */
    const char *mb = getenv("SEGD_STORE_MIN_FREE_MB");
    char *end;
    long long v = mb ? strtoll(mb, &end, 10) : -1;
    if (mb && *mb && !*end && v >= 0)
        o->min_free_mb = v;
}

segd_store_t *segd_app_open_store(const char *cmd, const char *dir, int64_t now_s,
                                  int read_only)
{
    segd_store_opts_t o;
    char err[512];
    segd_store_t *s = NULL;
    segd_app_store_opts(&o);
    o.path = dir;
    o.read_only = read_only;
    o.now_ms = now_s * 1000;
    if (segd_store_open(&s, &o, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd %s: cannot open store: %s\n", cmd, err);
        return NULL;
    }
    return s;
}

void segd_app_config_store_opts(const segd_config_t *cfg, segd_store_opts_t *o)
{
    segd_app_store_opts(o);
    o->path = cfg->db;
    o->granularity_s = cfg->granularity_s;
    o->horizon_ms = cfg->horizon_s * 1000;
    o->block_cache_mb = (size_t)cfg->block_cache_mb;
    o->write_buffer_mb = (size_t)cfg->memory.write_buffer_mb;
    o->memtable_mb = (size_t)cfg->memory.memtable_mb;
    o->compaction_rate_mb = cfg->compaction_rate_mb;
    o->periodic_compaction_s = cfg->periodic_compaction_s;
    o->min_free_mb = cfg->min_free_mb;
    o->gc_grace_ms = cfg->gc_grace_s * 1000;
    o->info_log_level = (int)cfg->store_log_level;
    o->log = cfg->log;
}

segd_store_t *segd_app_open_config_store(const char *cmd, const segd_config_t *cfg,
                                         int64_t now_s)
{
    segd_store_opts_t o;
    char err[512];
    segd_store_t *s = NULL;
    segd_app_config_store_opts(cfg, &o);
    o.now_ms = now_s * 1000;
    if (segd_store_open(&s, &o, err, sizeof(err)) == SEGD_OK)
        return s;
    if (cfg->log) /* segd run */
        segd_log(cfg->log, SEGD_LOG_ERROR, "store", "cannot open store: %s", err);
    else
        fprintf(stderr, "segd %s: cannot open store: %s\n", cmd, err);
    return s;
}

/* RocksDB creates a store where there is none: a mistyped --db would take
 * a writer's writes and report success, and a reader would print RocksDB's
 * raw "No such file or directory" */
static int is_store(const char *cmd, const char *dir)
{
    char current[4096];
    struct stat st;
    snprintf(current, sizeof(current), "%s/CURRENT", dir);
    if (stat(current, &st)) {
        fprintf(stderr, "segd %s: %s is not a segd store (no %s)\n", cmd, dir, current);
        return 0;
    }
    return 1;
}

segd_store_t *segd_app_open_existing_store(const char *cmd, const char *dir, int64_t now_s)
{
    return is_store(cmd, dir) ? segd_app_open_store(cmd, dir, now_s, 0) : NULL;
}

segd_store_t *segd_app_open_reader(const char *cmd, const char *dir, int64_t now_s)
{
    return is_store(cmd, dir) ? segd_app_open_store(cmd, dir, now_s, 1) : NULL;
}

/* The one piece of global state: a signal handler can reach nothing else. */
static volatile sig_atomic_t stop_flag;

static void on_stop_signal(int sig)
{
    (void)sig;
    if (stop_flag)
        _exit(130);
    stop_flag = 1;
}

volatile sig_atomic_t *segd_app_stop_on_signals(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return &stop_flag;
}
