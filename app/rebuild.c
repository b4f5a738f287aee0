/* The swap half of the rebuild path; see rebuild.h. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include "app/rebuild.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"
#include "app/swap_changes.h"
#include "consumer/pipeline.h"
#include "transport/kconf.h"
#include "core/record.h"

#define CARRY_BATCH_USERS 1024 /* erase markers per store write */

void segd_rebuild_tmp_path(const char *db, char *out, size_t n)
{
    snprintf(out, n, "%s.rebuild.tmp", db);
}

void segd_rebuild_done_path(const char *db, char *out, size_t n)
{
    snprintf(out, n, "%s.rebuilt", db);
}

/* Takes DB/LOCK as RocksDB does (a write lock on the whole file), so a
 * `segd run` or offline command holding the store refuses the swap rather
 * than losing its store to a rename. An open-file-description lock where
 * there is one: closing another descriptor of LOCK in this process (a
 * read-only open of the store) does not release it. */
static segd_err_t lock_store(const char *db, int *fd, char *errstr, size_t n)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/LOCK", db);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0)
        return segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: open %s: %s", path,
                         strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
#ifdef F_OFD_SETLK
    int r = fcntl(*fd, F_OFD_SETLK, &fl);
#else
    int r = fcntl(*fd, F_SETLK, &fl);
#endif
    if (r == 0)
        return SEGD_OK;
    int e = errno;
    close(*fd);
    *fd = -1;
    if (e == EAGAIN || e == EACCES)
        return segd_errf(SEGD_ERR_BUSY, errstr, n, "rebuild swap refused: the store %s is in "
                         "use by another process (a running segd run or offline command); "
                         "stop it, then start segd run again to swap in the rebuilt store",
                         db);
    return segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: lock %s: %s", path, strerror(e));
}

typedef struct carry {
    segd_store_t *dst;
    segd_batch_t *b;
    segd_buf_t operand;
    segd_profile_t marker;
    size_t pending;
    uint64_t erasures, retirements, floors, replaced;
    segd_partitioner_t partitioner; /* input.partitioner: which users are the live store's */
    segd_err_t err;
    char *errstr;
    size_t n;
} carry_t;

/* An erase marker of the live store merged into the rebuilt one: a marker
 * only record joins by max, so the copy is exact whatever the rebuilt store
 * already holds. */
static int carry_erasure(void *ctx, const char *user, size_t user_len, const uint8_t *value,
                         size_t value_len)
{
    carry_t *c = ctx;
    segd_record_head_t h;
    if (segd_record_head(value, value_len, &h)) {
        c->err = segd_errf(SEGD_ERR_CORRUPT, c->errstr, c->n, "rebuild swap: corrupt record "
                           "of user '%.*s' in the live store", (int)(user_len > 300 ? 300 :
                           user_len), user);
        return 1;
    }
    if (h.erased_before_ms <= 0)
        return 0;
    c->marker.erased_before_ms = h.erased_before_ms;
    if ((c->err = segd_record_encode(&c->marker, &c->operand))) {
        segd_errf(c->err, c->errstr, c->n, "rebuild swap: %s", segd_err_str(c->err));
        return 1;
    }
    segd_batch_merge(c->b, user, user_len, c->operand.data, c->operand.len);
    c->erasures++;
    if (++c->pending < CARRY_BATCH_USERS)
        return 0;
    c->pending = 0;
    c->err = segd_store_write(c->dst, c->b, c->errstr, c->n);
    segd_batch_clear(c->b);
    return c->err != SEGD_OK;
}

static int carry_retirement(void *ctx, int64_t segment_id, int64_t before_ms)
{
    carry_t *c = ctx;
    c->err = segd_store_retire(c->dst, segment_id, before_ms, NULL, c->errstr, c->n);
    c->retirements++;
    return c->err != SEGD_OK;
}

static int carry_floor(void *ctx, const char *topic, int32_t partition, int64_t floor_ms)
{
    carry_t *c = ctx;
    c->err = segd_store_raise_import_floor(c->dst, topic, partition, floor_ms, c->errstr, c->n);
    c->floors++;
    return c->err != SEGD_OK;
}

/* The live store's change positions: the rebuilt store published nothing,
 * and a unit it exports without them would send a cache to the change
 * topic's start (refused once retention passed it). The swap's replacing
 * deltas are published after these positions, so a unit of the rebuilt
 * store plus the deltas after them is exact. */
static int carry_position(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    carry_t *c = ctx;
    segd_batch_set_change_position(c->b, topic, partition, next);
    return 0;
}

/* The larger of the two stores' totals of a counter into c->b. */
static segd_err_t carry_counter(carry_t *c, segd_store_view_t *v, const char *name)
{
    int64_t live = 0, rebuilt = 0;
    segd_err_t err = segd_store_view_counter(v, name, &live, c->errstr, c->n);
    if (!err)
        err = segd_store_counter_get(c->dst, name, &rebuilt, c->errstr, c->n);
    if (!err && live > rebuilt)
        segd_batch_set_counter(c->b, name, live);
    return err;
}

/* What the live store knows that its input topics do not: offline erasures
 * (`segd erase --db`), offline retirements, the import floors of restored
 * snapshot units, and the misrouting counters that keep the sweep off. All
 * are max-joins, so raising the rebuilt store's to the live store's is
 * exact; written synced before any rename. Then the replacing deltas that
 * bring running caches to the rebuilt store (app/swap_changes.h). */
static segd_err_t carry_markers(const segd_store_opts_t *so, const char *done, carry_t *c)
{
    segd_store_opts_t lo = *so, ro = *so;
    segd_store_t *live = NULL;
    segd_store_view_t *v = NULL;
    lo.read_only = 1;
    ro.path = done;
    ro.read_only = 0;
    ro.must_exist = 1; /* never an empty store to swap in */
    segd_err_t err = segd_store_open(&live, &lo, c->errstr, c->n);
    if (!err && (err = segd_store_open(&c->dst, &ro, c->errstr, c->n)))
        goto out;
    if (err || (err = segd_batch_new(c->dst, &c->b)) ||
        (err = segd_store_view_open(live, &v, c->errstr, c->n)))
        goto out;
    if ((err = segd_store_view_scan_raw(v, carry_erasure, c, c->errstr, c->n)) || c->err ||
        (err = segd_store_view_retirements(v, carry_retirement, c, c->errstr, c->n)) ||
        c->err)
        goto out;
    segd_store_import_floors(live, carry_floor, c);
    if (c->err ||
        (err = segd_store_view_positions(v, "changes", carry_position, c, c->errstr, c->n)) ||
        (err = carry_counter(c, v, SEGD_COUNTER_MISROUTED)) ||
        (err = carry_counter(c, v, SEGD_COUNTER_UNCHECKED)))
        goto out;
    if (!(err = segd_store_write_sync(c->dst, c->b, c->errstr, c->n)))
        err = segd_swap_replace_deltas(live, v, c->dst, c->partitioner, &c->replaced,
                                       c->errstr, c->n);
out:
    if (!err && c->err)
        err = c->err;
    if (v)
        segd_store_view_close(v);
    if (c->b)
        segd_batch_destroy(c->b);
    if (c->dst)
        segd_store_close(c->dst);
    if (live)
        segd_store_close(live);
    return err;
}

/* The renames reach the disk before the store is opened again. */
static segd_err_t sync_parent(const char *db, char *errstr, size_t n)
{
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", db);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: fsync %s: %s", dir, strerror(e));
    }
    close(fd);
    return SEGD_OK;
}

static void say_swapped(segd_log_t *log, const char *db, const char *done, const char *old,
                        const carry_t *c)
{
    if (log)
        segd_log_kv(log, SEGD_LOG_INFO, "store", "rebuilt store swapped in",
                    "db=%s rebuilt=%s replaced=%s erasures_kept=%llu retirements_kept=%llu "
                    "import_floors_kept=%llu replacing_deltas=%llu", db, done, old,
                    (unsigned long long)c->erasures, (unsigned long long)c->retirements,
                    (unsigned long long)c->floors, (unsigned long long)c->replaced);
    else
        fprintf(stderr, "rebuilt store %s swapped in at %s; the old one is %s (%llu erasures, "
                "%llu retirements, %llu import floors kept; %llu replacing deltas for caches)\n",
                done, db, old, (unsigned long long)c->erasures,
                (unsigned long long)c->retirements, (unsigned long long)c->floors,
                (unsigned long long)c->replaced);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether the LOCK that fd holds is still DB's. A start that opened LOCK
 * just before another start renamed DB away holds the replaced store's
 * lock, which guards nothing at DB. */
static int lock_is_current(int fd, const char *db)
{
    char path[4200];
    struct stat held, now;
    snprintf(path, sizeof(path), "%s/LOCK", db);
    return fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
           held.st_ino == now.st_ino;
}

#define LOCK_TRIES 3 /* DB renamed under the lock that many times: give up */

/* Takes DB's lock when DB exists (*lock_fd = -1 when it does not). */
static segd_err_t lock_current(const char *db, int *lock_fd, char *errstr, size_t n)
{
    *lock_fd = -1;
    for (int i = 0; i < LOCK_TRIES; i++) {
        if (!is_dir(db))
            return SEGD_OK;
        segd_err_t err = lock_store(db, lock_fd, errstr, n);
        if (err || lock_is_current(*lock_fd, db))
            return err;
        close(*lock_fd);
        *lock_fd = -1;
    }
    return segd_errf(SEGD_ERR_BUSY, errstr, n, "rebuild swap refused: the store %s kept "
                     "being replaced while this start waited for its lock", db);
}

static void say_raced(segd_log_t *log, const char *db)
{
    if (log)
        segd_log_kv(log, SEGD_LOG_INFO, "store", "rebuilt store already swapped in by "
                    "another start", "db=%s", db);
    else
        fprintf(stderr, "the rebuilt store was already swapped in at %s by another start\n",
                db);
}

segd_err_t segd_rebuild_swap_locked(const segd_store_opts_t *so, segd_partitioner_t partitioner,
                                    segd_log_t *log, int *swapped, char *errstr, size_t n)
{
    const char *db = so->path;
    char done[4096], old[4200];
    struct stat st;
    carry_t c = {.errstr = errstr, .n = n, .partitioner = partitioner};
    int lock_fd = -1;
    *swapped = 0;
    segd_rebuild_done_path(db, done, sizeof(done));
    segd_profile_init(&c.marker);
    segd_err_t err = lock_current(db, &lock_fd, errstr, n);
    if (err)
        goto out;
    /* Decided again under the lock: another start may have swapped since
     * this one saw DB.rebuilt, and DB is then the rebuilt store. */
    if (!is_dir(done)) {
        say_raced(log, db);
        goto out;
    }
    int have_db = lock_fd >= 0;
    snprintf(old, sizeof(old), "%s/CURRENT", db);
    if (have_db && stat(old, &st) == 0 && (err = carry_markers(so, done, &c)))
        goto out; /* DB not a store: nothing to carry */
    snprintf(old, sizeof(old), "%s.replaced-%lld", db, (long long)time(NULL));
    if (have_db && rename(db, old)) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: rename %s to %s: %s", db, old,
                        strerror(errno));
        goto out;
    }
    if (rename(done, db)) {
        if (!have_db && errno == ENOENT && !is_dir(done)) { /* no DB to lock: raced */
            say_raced(log, db);
            goto out;
        }
        err = segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: rename %s to %s: %s (the old "
                        "store is at %s)", done, db, strerror(errno), have_db ? old : "nowhere");
        goto out;
    }
    if ((err = sync_parent(db, errstr, n)))
        goto out;
    say_swapped(log, db, done, old, &c);
    *swapped = 1;
out:
    if (lock_fd >= 0)
        close(lock_fd); /* after the renames: the lock held across them */
    segd_profile_free(&c.marker);
    segd_buf_free(&c.operand);
    return err;
}

segd_err_t segd_rebuild_swap(const segd_store_opts_t *so, segd_partitioner_t partitioner,
                             segd_log_t *log, int *swapped, char *errstr, size_t n)
{
    char done[4096];
    *swapped = 0;
    segd_rebuild_done_path(so->path, done, sizeof(done));
    if (!is_dir(done)) /* the common start: nothing to swap, no lock taken */
        return SEGD_OK;
    return segd_rebuild_swap_locked(so, partitioner, log, swapped, errstr, n);
}

#define LOG_START_TIMEOUT_MS 5000

typedef struct log_start {
    rd_kafka_t *rk;
    segd_log_t *log;
    int unreachable, behind;
    char *errstr;
    size_t n;
} log_start_t;

static int check_partition(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    log_start_t *l = ctx;
    int64_t low = 0, high = 0;
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(l->rk, topic, partition, &low,
                                                             &high, LOG_START_TIMEOUT_MS);
    if (e) {
        segd_log(l->log, SEGD_LOG_WARN, "store", "rebuild swap: the log start of %s [%d] "
                 "cannot be read (%s): not checked", topic, (int)partition, rd_kafka_err2str(e));
        l->unreachable = 1;
        return 1; /* one slow broker is enough waiting */
    }
    if (next >= low)
        return 0;
    segd_errf(SEGD_ERR_TOO_LATE, l->errstr, l->n, "rebuild swap refused: retention deleted "
              "%s [%d] up to offset %lld past the rebuilt store's next offset %lld (the "
              "swapped store would skip those messages); remove the rebuilt store and run "
              "segd rebuild again", topic, (int)partition, (long long)low, (long long)next);
    l->behind = 1;
    return 1;
}

static segd_err_t make_probe(const segd_config_t *cfg, rd_kafka_t **rk, char *errstr, size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", cfg->brokers, "group.id",
                                    "segd-rebuild-swap", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "rebuild swap", defaults, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++)
        err = segd_kconf_set(conf, "rebuild swap", cfg->kafka[i].key, cfg->kafka[i].value,
                             errstr, n);
    if (!err)
        segd_kconf_set_logger(conf, cfg->log);
    if (!err && !(*rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf))))
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "rebuild swap: consumer: %s", errbuf);
    if (err)
        rd_kafka_conf_destroy(conf);
    return err;
}

/* " T [p]" (or " T (none)") appended to a list of what is missing. */
static void note_missing(char *list, size_t cap, size_t *len, const char *topic, int32_t p)
{
    if (*len >= cap)
        return;
    int w = p < 0 ? snprintf(list + *len, cap - *len, "%s%s (no offsets at all)",
                             *len ? ", " : "", topic)
                  : snprintf(list + *len, cap - *len, "%s%s [%d]", *len ? ", " : "", topic,
                             (int)p);
    *len += w > 0 ? (size_t)w : 0;
}

/* Every partition of every topic segd run is about to consume (cfg->topics:
 * its config's and --topic's) has an offset in the rebuilt store: one
 * without would start from input.offset.reset after the swap and, with
 * `latest`, lose its history without a word. The partitions are counted as
 * the rebuild stored them with its offsets (meta partitions/<topic>): no
 * broker is needed to tell a topic the rebuild never read. */
static segd_err_t check_coverage(const segd_config_t *cfg, segd_store_t *s, const char *done,
                                 char *errstr, size_t n)
{
    char missing[1024] = "";
    size_t len = 0;
    for (size_t t = 0; t < cfg->n_topics; t++) {
        const char *topic = cfg->topics[t];
        int32_t parts = 0;
        int64_t next;
        segd_err_t err = segd_store_partition_count(s, topic, &parts, errstr, n);
        if (err == SEGD_ERR_NOTFOUND)
            note_missing(missing, sizeof(missing), &len, topic, -1);
        else if (err)
            return err;
        for (int32_t p = 0; !err && p < parts; p++) {
            segd_err_t e = segd_store_offset_get(s, topic, p, &next, errstr, n);
            if (e == SEGD_ERR_NOTFOUND)
                note_missing(missing, sizeof(missing), &len, topic, p);
            else if (e)
                return e;
        }
    }
    if (!len)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_CONFIG, errstr, n, "rebuild swap refused: the rebuilt store %s "
                     "has no offsets of %s, which segd run consumes (after the swap they would "
                     "start from input.offset.reset, without their history); run segd rebuild "
                     "with every topic segd run consumes (remove %s first), or start segd run "
                     "with the topics the rebuild covers", done, missing, done);
}

typedef struct gone_walk {
    segd_store_t *s;
    segd_log_t *log;
} gone_walk_t;

static int say_gone(void *ctx, const char *topic, int32_t partition, int64_t from)
{
    gone_walk_t *g = ctx;
    int64_t start = -1;
    char err[256];
    segd_store_position_get(g->s, SEGD_POS_REBUILD_LOG_START, topic, partition, &start, err,
                            sizeof(err));
    segd_log(g->log, SEGD_LOG_WARN, "store", "rebuild swap: the rebuilt store lacks %s [%d] "
             "offsets [%lld, %lld), deleted by retention before the rebuild (swapped in with "
             "--accept-history-loss)", topic, (int)partition, (long long)from,
             (long long)start);
    return 0;
}

segd_err_t segd_rebuild_check_log_start(const segd_config_t *cfg, char *errstr, size_t n)
{
    char done[4096];
    struct stat st;
    segd_rebuild_done_path(cfg->db, done, sizeof(done));
    if (stat(done, &st) || !S_ISDIR(st.st_mode))
        return SEGD_OK;
    segd_store_opts_t so;
    segd_app_config_store_opts(cfg, &so);
    so.path = done;
    so.read_only = 1;
    segd_store_t *s = NULL;
    segd_store_view_t *v = NULL;
    log_start_t l = {.log = cfg->log, .errstr = errstr, .n = n};
    segd_err_t err = segd_store_open(&s, &so, errstr, n);
    if (!err)
        err = check_coverage(cfg, s, done, errstr, n);
    if (!err)
        err = segd_store_view_open(s, &v, errstr, n);
    gone_walk_t g = {.s = s, .log = cfg->log};
    if (!err)
        err = segd_store_view_positions(v, SEGD_POS_REBUILD_GONE_FROM, say_gone, &g, errstr, n);
    if (!err)
        err = make_probe(cfg, &l.rk, errstr, n);
    if (!err)
        err = segd_store_view_positions(v, "offset", check_partition, &l, errstr, n);
    if (!err && l.behind)
        err = SEGD_ERR_TOO_LATE;
    if (v)
        segd_store_view_close(v);
    if (l.rk)
        rd_kafka_destroy(l.rk);
    if (s)
        segd_store_close(s);
    return err;
}
