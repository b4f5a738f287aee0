/* Opening and closing the store: the RocksDB options of each column family,
 * the checks of format and settings under existing data, and the read-only
 * open beside a running writer. Also the meta family's read helpers and the
 * accessors store_int.h gives the store layer. The rest of the store's work
 * lives in its own modules, listed in store_impl.h. */
#include "store/store.h"

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "store/merge.h"
#include "store/sst.h"
#include "store/store_impl.h"
#include "store/store_int.h"

const char *const segd_store_cf_names[CF_COUNT] = {"default", "profiles", "meta",
                                                     "outbox",  "links",    "ids"};

void segd_store_opts_default(segd_store_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->block_cache_mb = 256;
    o->write_buffer_mb = 64;
    o->horizon_ms = 7LL * 86400 * 1000; /* store.horizon.s's default (config/config.c) */
    o->granularity_s = 0; /* the store's; SEGD_STORE_GRANULARITY_S for a new one */
    o->periodic_compaction_s = 86400;
    o->min_free_mb = 256;
    o->gc_grace_ms = 2LL * 86400 * 1000;
    o->info_log_level = SEGD_STORE_LOG_FATAL;
}

segd_err_t segd_store_rocks_err(char *rerr, segd_err_t code, char *errstr, size_t n,
                                const char *what)
{
    segd_errf(code, errstr, n, "%s: %s", what, rerr);
    rocksdb_free(rerr);
    return code;
}

segd_err_t segd_store_iter_close(rocksdb_iterator_t *it, const char *what, char *errstr,
                                 size_t n)
{
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    return rerr ? segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, what) : SEGD_OK;
}

static segd_err_t meta_get_at(segd_store_t *s, const rocksdb_readoptions_t *ro, const char *key,
                              size_t klen, char **val, size_t *vlen, char *errstr, size_t n)
{
    char *rerr = NULL;
    *val = rocksdb_get_cf(s->db, ro, s->cf[CF_META], key, klen, vlen, &rerr);
    if (rerr)
        return segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "read meta");
    return *val ? SEGD_OK : SEGD_ERR_NOTFOUND;
}

segd_err_t segd_store_meta_get(segd_store_t *s, const char *key, size_t klen, char **val,
                               size_t *vlen, char *errstr, size_t n)
{
    return meta_get_at(s, s->ropts, key, klen, val, vlen, errstr, n);
}

segd_err_t segd_store_meta_get_be64(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                    const char *key, size_t klen, int64_t *out, char *errstr,
                                    size_t n)
{
    char *v = NULL;
    size_t vlen;
    segd_err_t err = meta_get_at(s, ro, key, klen, &v, &vlen, errstr, n);
    if (err)
        return err;
    if (vlen == 8)
        *out = (int64_t)get_be64(v);
    else
        err = SEGD_ERR_CORRUPT;
    rocksdb_free(v);
    return err;
}

segd_err_t segd_store_meta_get_i64_at(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                      const char *key, int64_t *out, char *errstr, size_t n)
{
    *out = 0;
    segd_err_t err = segd_store_meta_get_be64(s, ro, key, strlen(key), out, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return SEGD_OK;
    if (err == SEGD_ERR_CORRUPT)
        segd_errf(err, errstr, n, "bad %s in meta", key);
    return err;
}

segd_err_t segd_store_meta_get_i64(segd_store_t *s, const char *key, int64_t *out,
                                   char *errstr, size_t n)
{
    return segd_store_meta_get_i64_at(s, s->ropts, key, out, errstr, n);
}

static void configure_profiles(segd_store_t *s, rocksdb_options_t *o)
{
    rocksdb_options_set_merge_operator(o, segd_merge_operator_new(s->policy));
    if (s->filter_factory)
        rocksdb_options_set_compaction_filter_factory(o, s->filter_factory(s->policy));
    rocksdb_options_set_block_based_table_factory(o, s->table_opts);
    /* Values are entropy-coded already, and zstd saved less than 2% on
     * them. Without block compression a block-cache miss is a copy instead
     * of a decompression. */
    rocksdb_options_set_compression(o, rocksdb_no_compression);
    rocksdb_options_set_bottommost_compression(o, rocksdb_no_compression);
    rocksdb_options_set_max_write_buffer_number(o, 4);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(o, 1);
    rocksdb_options_set_max_bytes_for_level_base(o, 256 << 20);
    rocksdb_options_set_target_file_size_base(o, 64 << 20);
}

static segd_err_t make_options(segd_store_t *s, const segd_store_opts_t *o)
{
    s->cache = rocksdb_cache_create_lru(o->block_cache_mb << 20);
    s->table_opts = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(s->table_opts, s->cache);
    rocksdb_block_based_options_set_block_size(s->table_opts, 4 << 10);
    rocksdb_block_based_options_set_filter_policy(s->table_opts,
                                                  rocksdb_filterpolicy_create_bloom(10));
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(s->table_opts, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(s->table_opts, 1);
    s->db_opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(s->db_opts, !o->must_exist);
    rocksdb_options_set_create_missing_column_families(s->db_opts, 1);
    rocksdb_options_set_max_open_files(s->db_opts, -1);
    /* Compactions run at the lowest CPU priority, so that on a machine
     * with few cores they take the CPU the pipeline thread leaves idle
     * instead of delaying its writes: with them at normal priority, the
     * pipeline thread spent as long waiting for a CPU as running
     * (bench/RESULTS.md, issue 22). Flushes keep normal priority, since a
     * flush that falls behind stalls writes. The thread pool belongs to
     * RocksDB's default env and is shared by every store of the process. */
    s->env = rocksdb_create_default_env();
    rocksdb_env_lower_thread_pool_cpu_priority(s->env);
    rocksdb_options_set_env(s->db_opts, s->env);
    rocksdb_options_increase_parallelism(s->db_opts, 2);
    rocksdb_options_set_max_background_jobs(s->db_opts, 2);
    /* The info LOG logs only FATAL by default. RocksDB 7.8's LOG writer
     * asserts on the next line after a failed append, and Debian's builds
     * keep assertions, so on a full disk its own error messages would abort
     * the process. segd reports what matters itself (write errors,
     * background errors, properties), and store.log.level opts in knowing
     * that. The files are capped either way. */
    rocksdb_options_set_info_log_level(s->db_opts, o->info_log_level);
    rocksdb_options_set_max_log_file_size(s->db_opts, SEGD_STORE_LOG_FILE_BYTES);
    rocksdb_options_set_keep_log_file_num(s->db_opts, SEGD_STORE_LOG_FILES);
    /* The meta and outbox families take few writes and would otherwise
     * never flush. They would pin every WAL file until RocksDB's default
     * limit, four times the write buffers (about 2.5 GiB), forced a flush. */
    rocksdb_options_set_max_total_wal_size(s->db_opts, 256 << 20);
    /* This is memory.limit.mb's share for memtables. RocksDB 7.8's C API
     * has no write buffer manager charged to the block cache. Instead
     * db_write_buffer_size caps all families' memtables together, flushing
     * the largest when exceeded, and write_buffer_size times
     * max_write_buffer_number caps each family. */
    rocksdb_options_set_write_buffer_size(s->db_opts, (o->write_buffer_mb ? o->write_buffer_mb
                                                                          : 64) << 20);
    if (o->memtable_mb)
        rocksdb_options_set_db_write_buffer_size(s->db_opts, o->memtable_mb << 20);
    if (o->compaction_rate_mb > 0) { /* the options keep their own reference */
        rocksdb_ratelimiter_t *rl =
            rocksdb_ratelimiter_create(o->compaction_rate_mb << 20, 100000, 10);
        rocksdb_options_set_ratelimiter(s->db_opts, rl);
        rocksdb_ratelimiter_destroy(rl);
    }
    for (int i = 0; i < CF_COUNT; i++) {
        s->cf_opts[i] = rocksdb_options_create_copy(s->db_opts);
        if (i == CF_PROFILES)
            configure_profiles(s, s->cf_opts[i]);
    }
    s->wopts = rocksdb_writeoptions_create();
    s->sync_wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->sync_wopts, 1);
    s->ropts = rocksdb_readoptions_create();
    return SEGD_OK;
}

/* The format version and the granularity are fixed once data exists. When
 * no granularity is configured (o->granularity_s == 0) the store's own is
 * used, and only an explicit different value is an error. */
static segd_err_t check_settings(segd_store_t *s, const segd_store_opts_t *o, char *errstr,
                                 size_t n)
{
    char *v = NULL, buf[32], *rerr = NULL;
    size_t vlen;
    segd_err_t err = segd_store_meta_get(s, "granularity_s", 13, &v, &vlen, errstr, n);
    if (err == SEGD_OK) {
        snprintf(buf, sizeof(buf), "%.*s", (int)(vlen < 31 ? vlen : 31), v);
        rocksdb_free(v);
        s->granularity_s = strtoll(buf, NULL, 10);
        if (!o->read_only && o->granularity_s && s->granularity_s != o->granularity_s)
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "store.granularity_s is %" PRId64 " in %s but %" PRId64
                             " was configured; it cannot change under existing data",
                             s->granularity_s, o->path, o->granularity_s);
        return SEGD_OK;
    }
    if (err != SEGD_ERR_NOTFOUND)
        return err;
    s->granularity_s = o->granularity_s ? o->granularity_s : SEGD_STORE_GRANULARITY_S;
    if (o->read_only)
        return SEGD_OK;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    int len = snprintf(buf, sizeof(buf), "%" PRId64, s->granularity_s);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_META], "granularity_s", 13, buf, (size_t)len);
    len = snprintf(buf, sizeof(buf), "%d", SEGD_STORE_FORMAT);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_META], "format", 6, buf, (size_t)len);
    rocksdb_write(s->db, s->wopts, wb, &rerr);
    rocksdb_writebatch_destroy(wb);
    return rerr ? segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "write meta") : SEGD_OK;
}

static segd_err_t check_format(segd_store_t *s, char *errstr, size_t n)
{
    char *v = NULL;
    size_t vlen;
    segd_err_t err = segd_store_meta_get(s, "format", 6, &v, &vlen, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return SEGD_OK;
    if (err)
        return err;
    int ok = vlen == 1 && v[0] == '0' + SEGD_STORE_FORMAT;
    rocksdb_free(v);
    return ok ? SEGD_OK
              : segd_errf(SEGD_ERR_CONFIG, errstr, n, "unsupported store format");
}

/* A read-only open cannot create column families, and RocksDB refuses to
 * open one that is missing. A store written by an older segd lacks `links`
 * and `ids` (DESIGN §10.2), so those two are opened only when present, and
 * otherwise their handles stay NULL and read as empty. Every other family
 * must be there. A store whose first writer is still creating them, as when
 * a reader starts beside a starting `segd run`, is refused as before and
 * never opened without `meta`. */
static void open_read_only(segd_store_t *s, const char *path, const rocksdb_options_t **cfo,
                           char **rerr)
{
    size_t n_present = 0;
    char **present = rocksdb_list_column_families(s->db_opts, path, &n_present, rerr);
    if (*rerr) {
        rocksdb_list_column_families_destroy(present, n_present); /* malloc(0) on error */
        return;
    }
    const char *names[CF_COUNT];
    const rocksdb_options_t *opts[CF_COUNT];
    rocksdb_column_family_handle_t *handles[CF_COUNT];
    int which[CF_COUNT], n = 0;
    for (int i = 0; i < CF_COUNT && !*rerr; i++) {
        size_t j = 0;
        while (j < n_present && strcmp(present[j], segd_store_cf_names[i]) != 0)
            j++;
        if (j < n_present) {
            names[n] = segd_store_cf_names[i];
            opts[n] = cfo[i];
            which[n++] = i;
        } else if (i != CF_LINKS && i != CF_IDS) {
            char msg[128];
            snprintf(msg, sizeof(msg), "Invalid argument: column family not found: %s",
                     segd_store_cf_names[i]);
            *rerr = strdup(msg);
        }
    }
    rocksdb_list_column_families_destroy(present, n_present);
    if (*rerr)
        return;
    s->db = rocksdb_open_for_read_only_column_families(s->db_opts, path, n, names, opts,
                                                       handles, 0, rerr);
    if (*rerr)
        return;
    for (int k = 0; k < n; k++)
        s->cf[which[k]] = handles[k];
}

/* The numbers of the write-ahead logs (NNNNNN.log) in the store's
 * directory, into a malloc'd array; -1 when it cannot be listed. */
static int list_wals(const char *path, uint64_t **out)
{
    DIR *d = opendir(path);
    struct dirent *e;
    uint64_t *v = NULL;
    int n = 0, cap = 0;
    *out = NULL;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        char *end = NULL;
        unsigned long long num = strtoull(e->d_name, &end, 10);
        if (end == e->d_name || strcmp(end, ".log"))
            continue;
        if (n == cap) {
            uint64_t *g = realloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(*v));
            if (!g) {
                n = -1;
                break;
            }
            v = g;
        }
        v[n++] = num;
    }
    closedir(d);
    if (n < 0)
        free(v);
    else
        *out = v;
    return n;
}

/* Whether each of the n logs listed before an open is still there. */
static int wals_kept(const char *path, const uint64_t *nums, int n)
{
    char f[4096];
    for (int i = 0; i < n; i++) {
        snprintf(f, sizeof(f), "%s/%06llu.log", path, (unsigned long long)nums[i]);
        if (access(f, F_OK) != 0)
            return 0;
    }
    return 1;
}

static void close_read_only(segd_store_t *s)
{
    for (int i = 0; i < CF_COUNT; i++)
        if (s->cf[i]) {
            rocksdb_column_family_handle_destroy(s->cf[i]);
            s->cf[i] = NULL;
        }
    rocksdb_close(s->db);
    s->db = NULL;
}

/* One read-only open, judged: 0 when it holds the store as it was or was
 * refused for good, 1 when it should be tried again (its handles then
 * closed; *rerr, if set, says why it failed).
 *
 * Beside a live writer an open reads CURRENT and the MANIFEST, then opens
 * each table file the MANIFEST names, then lists and replays the
 * write-ahead logs. A flush or compaction finishing in between deletes
 * files: a table file makes RocksDB refuse with "No such file or
 * directory" (CI saw "Can't access /000022.sst" from `segd stats` beside
 * `segd run`); a log the MANIFEST still needed goes unnoticed, and the
 * reader silently lacks that log's writes while it has later ones (an
 * export's unit could name offsets past data it lacks). A log is deleted
 * only once every older one goes too, and a live writer always has one, so
 * a log of those listed before the open that is gone after it means the
 * open may have missed one. The writer installs the newer MANIFEST before
 * it deletes, so the next try reads a version whose files exist. Once
 * open, every table file is held open (max_open_files -1) and the logs
 * were read: later deletions do not reach the reader. */
static int open_read_only_once(segd_store_t *s, const char *path,
                               const rocksdb_options_t **cfo, char **rerr)
{
    char current[4096];
    uint64_t *wals = NULL;
    int n = list_wals(path, &wals), again = 0;
    open_read_only(s, path, cfo, rerr);
    snprintf(current, sizeof(current), "%s/CURRENT", path);
    if (*rerr) {
        /* a path without CURRENT is no store: refused at once */
        again = strstr(*rerr, "No such file or directory") && access(current, F_OK) == 0;
    } else if (s->db && n > 0 && !wals_kept(path, wals, n)) {
        close_read_only(s);
        again = 1;
    }
    free(wals);
    return again;
}

/* The tries are bounded by time (RO_OPEN_WAIT_MS, at least 3 tries): a
 * store whose file is really gone is still refused with RocksDB's message,
 * and one whose logs keep changing under every open is refused by name.
 * 30 s: under TSan beside a writer flushing and compacting without pause,
 * every open of 10 s hit a file the writer had just deleted (1 of 300 opens
 * in test_reader_beside_compacting_writer, session 14's final CI). */
#define RO_OPEN_WAIT_MS 30000

static void open_read_only_retrying(segd_store_t *s, const char *path,
                                    const rocksdb_options_t **cfo, char **rerr)
{
    int64_t deadline = segd_mono_ms() + RO_OPEN_WAIT_MS;
    for (int attempt = 0;; attempt++) {
        if (!open_read_only_once(s, path, cfo, rerr))
            return;
        if (attempt >= 2 && segd_mono_ms() >= deadline)
            break;
        rocksdb_free(*rerr);
        *rerr = NULL;
        /* 1, 2, 4 ... ms, then 50 ms apart */
        segd_sleep_ms(attempt < 6 ? 1L << attempt : 50L);
    }
    if (!*rerr) /* opened each time, but a log went during every open */
        *rerr = strdup("Busy: the writer's flushes deleted write-ahead logs during every "
                       "read-only open for 10 s; try again");
}

static segd_err_t open_db(segd_store_t *s, const segd_store_opts_t *o, char *errstr,
                          size_t n)
{
    char *rerr = NULL;
    const rocksdb_options_t *cfo[CF_COUNT];
    for (int i = 0; i < CF_COUNT; i++)
        cfo[i] = s->cf_opts[i];
    if (o->read_only) {
        open_read_only_retrying(s, o->path, cfo, &rerr);
        if (!rerr && !s->db) /* a refusal whose message could not be allocated */
            return segd_errf(SEGD_ERR_NOMEM, errstr, n, "%s: out of memory", o->path);
    }
    else
        s->db = rocksdb_open_column_families(s->db_opts, o->path, CF_COUNT,
                                             segd_store_cf_names, cfo, s->cf, &rerr);
    if (rerr && strstr(rerr, "While lock file")) {
        /* Another process holds RocksDB's LOCK file (an fcntl lock). The
         * usual cause is a running writer, which the operator is told by
         * name, with the commands that can run beside it. */
        segd_errf(SEGD_ERR_BUSY, errstr, n,
                  "%s is in use: another process holds its RocksDB lock %s/LOCK (a running "
                  "`segd run`, backfill, replay or compact?); stop it first, or use a "
                  "read-only command (get, stats, offsets show, identity check|members, segments "
                  "list-retired, snapshot export) beside it",
                  o->path, o->path);
        rocksdb_free(rerr);
        return SEGD_ERR_BUSY;
    }
    if (rerr)
        return segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, o->path);
    if (!o->read_only && o->periodic_compaction_s > 0) {
        char val[32];
        snprintf(val, sizeof(val), "%" PRId64, o->periodic_compaction_s);
        const char *keys[] = {"periodic_compaction_seconds"}, *vals[] = {val};
        rocksdb_set_options_cf(s->db, s->cf[CF_PROFILES], 1, keys, vals, &rerr);
        if (rerr)
            return segd_store_rocks_err(rerr, SEGD_ERR_STORE, errstr, n, "periodic compaction");
    }
    return SEGD_OK;
}

segd_err_t segd_store_open(segd_store_t **out, const segd_store_opts_t *o, char *errstr,
                           size_t n)
{
    *out = NULL;
    if (!o->path || o->granularity_s < 0 || o->horizon_ms < 0 || o->gc_grace_ms < 0)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "store: bad path or settings");
    segd_store_t *s = calloc(1, sizeof(*s));
    if (!s)
        return SEGD_ERR_NOMEM;
    pthread_mutex_init(&s->floors_lock, NULL);
    s->read_only = o->read_only;
    s->filter_factory = o->filter_factory;
    s->min_free_bytes = o->min_free_mb > 0 ? (uint64_t)o->min_free_mb << 20 : 0;
    s->disk_avail = o->disk_avail;
    s->disk_avail_ctx = o->disk_avail_ctx;
    s->log = o->log;
    if (!(s->path = strdup(o->path))) {
        free(s);
        return SEGD_ERR_NOMEM;
    }
    segd_err_t err = segd_policy_new(&s->policy, o->horizon_ms);
    if (err)
        goto out_close;
    segd_policy_set_now(s->policy, o->now_ms);
    segd_policy_set_gc_grace(s->policy, o->gc_grace_ms);
    if ((err = make_options(s, o)) || (err = open_db(s, o, errstr, n)) ||
        (err = check_format(s, errstr, n)) || (err = check_settings(s, o, errstr, n)) ||
        (err = segd_store_floors_load(s, errstr, n)))
        goto out_close;
    s->gc_moved_ms = segd_policy_now_ms(s->policy);
    segd_store_outbox_load(s);
    *out = s;
    return SEGD_OK;
out_close:
    segd_store_close(s);
    return err;
}

void segd_store_close(segd_store_t *s)
{
    if (!s)
        return;
    /* A broken store is left open on purpose (write.c says why). Its WAL
     * holds every acknowledged write. */
    if (atomic_load(&s->broken)) {
        segd_log(s->log, SEGD_LOG_ERROR, "store", "store %s left unclosed after a failed write",
                 s->path);
        return;
    }
    for (int i = 0; i < CF_COUNT; i++)
        if (s->cf[i])
            rocksdb_column_family_handle_destroy(s->cf[i]);
    if (s->db)
        rocksdb_close(s->db);
    for (int i = 0; i < CF_COUNT; i++)
        if (s->cf_opts[i])
            rocksdb_options_destroy(s->cf_opts[i]);
    if (s->db_opts)
        rocksdb_options_destroy(s->db_opts);
    if (s->table_opts)
        rocksdb_block_based_options_destroy(s->table_opts);
    if (s->cache)
        rocksdb_cache_destroy(s->cache);
    if (s->env)
        rocksdb_env_destroy(s->env);
    if (s->wopts)
        rocksdb_writeoptions_destroy(s->wopts);
    if (s->sync_wopts)
        rocksdb_writeoptions_destroy(s->sync_wopts);
    if (s->ropts)
        rocksdb_readoptions_destroy(s->ropts);
    segd_policy_destroy(s->policy);
    segd_store_floors_free(s);
    pthread_mutex_destroy(&s->floors_lock);
    free(s->path);
    free(s);
}

segd_policy_t *segd_store_policy(segd_store_t *s) { return s->policy; }
int64_t segd_store_granularity(const segd_store_t *s) { return s->granularity_s; }

/* The accessors of store_int.h, for sst.c and identity.c. */

rocksdb_t *segd_store_rocks(segd_store_t *s) { return s->db; }
rocksdb_column_family_handle_t *segd_store_profiles_cf(segd_store_t *s)
{
    return s->cf[CF_PROFILES];
}
rocksdb_column_family_handle_t *segd_store_outbox_cf(segd_store_t *s)
{
    return s->cf[CF_OUTBOX];
}
rocksdb_column_family_handle_t *segd_store_links_cf(segd_store_t *s)
{
    return s->cf[CF_LINKS];
}
rocksdb_column_family_handle_t *segd_store_ids_cf(segd_store_t *s)
{
    return s->cf[CF_IDS];
}
int segd_store_is_read_only(const segd_store_t *s)
{
    return s->read_only;
}
const rocksdb_options_t *segd_store_profiles_options(segd_store_t *s)
{
    return s->cf_opts[CF_PROFILES];
}
const rocksdb_readoptions_t *segd_store_read_options(segd_store_t *s) { return s->ropts; }
const char *segd_store_path(segd_store_t *s) { return s->path; }
