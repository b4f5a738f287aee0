/* The RocksDB store (DESIGN §4): column families `profiles` (user id ->
 * profile record, merge-only on ingest), `meta` (input offsets, retirement
 * markers, format and settings, the group instance id) and `outbox`
 * (unacknowledged change deltas).
 * A segd_batch_t is the unit of exactly-once: merges, offsets and outbox
 * entries go into one WriteBatch written with the WAL on.
 *
 * Threads: a segd_store_t is shared. Functions taking the store (write,
 * get, scan, offsets, views, stats, flush, compact, retire, the outbox
 * calls) are safe from any thread at once, as RocksDB's DB is; the merge
 * operator and compaction filter run on RocksDB's threads and read only the
 * policy (core/policy.h, atomics and copy-on-write). A segd_batch_t and a
 * segd_store_view_t belong to one thread at a time. open/close are not
 * concurrent with anything: close only after every batch, view and thread
 * using the store is done.
 * Ownership: the store owns its policy, RocksDB handles and the filter
 * factory it made from opts->filter_factory; it keeps no pointer into
 * segd_store_opts_t (path is copied by RocksDB at open). Bytes passed in are
 * copied; bytes handed to callbacks are borrowed for the call only. */
#ifndef SEGD_STORE_H
#define SEGD_STORE_H

#include <rocksdb/c.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/log.h"
#include "core/policy.h"
#include "core/profile.h"

#define SEGD_STORE_FORMAT 1
#define SEGD_STORE_GRANULARITY_S 3600 /* a new store's when none is given */

typedef struct segd_store segd_store_t;
typedef struct segd_batch segd_batch_t;

#define SEGD_STORE_LOG_FATAL 4                     /* RocksDB's FATAL_LEVEL */
#define SEGD_STORE_LOG_FILE_BYTES (16u << 20)       /* DIR/LOG rotated at this size */
#define SEGD_STORE_LOG_FILES 4                      /* LOG files kept */

typedef struct segd_store_opts {
    const char *path;
    int read_only;                 /* no lock: readers beside a running writer */
    int must_exist;                /* 1: no store at path is an error, never a new
                                    * empty one (the rebuild swap's DB.rebuilt) */
    size_t block_cache_mb;         /* default 256 */
    size_t write_buffer_mb;        /* one memtable of any family; default 64 (the
                                    * profiles family keeps up to 4, others 2) */
    size_t memtable_mb;            /* all families' memtables together (RocksDB's
                                    * db_write_buffer_size); 0 (default) = no cap */
    int64_t horizon_ms;            /* default 7 days (store.horizon.s) */
    int64_t granularity_s;         /* fixed in meta by the first open; 0 (default) =
                                    * the store's, SEGD_STORE_GRANULARITY_S if new;
                                    * a different explicit value is an error */
    int64_t periodic_compaction_s; /* default 86400: cold records get visited */
    int64_t compaction_rate_mb;    /* background I/O cap in MiB/s; 0 = none */
    int64_t now_ms;                /* 0 = wall clock; tests and --now set it */
    int64_t min_free_mb;           /* writes wait (SEGD_ERR_IO) below this much free
                                      disk; default 256, 0 = no check */
    /* Free bytes on the store's file system; NULL = statvfs(path). Tests set
     * it: a real disk shared with parallel tests moves under a threshold. */
    int (*disk_avail)(void *ctx, const char *path, uint64_t *avail_bytes);
    void *disk_avail_ctx;
    /* The profiles family's compaction filter factory, made for the store's
     * policy at open (compactor/ plugs itself in with segd_compactor_install);
     * NULL = no filter: dead entries then go only through full merges. */
    rocksdb_compactionfilterfactory_t *(*filter_factory)(segd_policy_t *policy);
    int64_t gc_grace_ms;           /* default 2 days: bound on how long a merge
                                    * operand stays unmerged (DESIGN §3) */
    /* RocksDB's own info log: the C API (7.8) takes no logger callback, so
     * it stays in files DIR/LOG and DIR/LOG.old.* (rotated at 16 MiB, 4
     * kept). Its level, RocksDB's InfoLogLevel: 0 debug, 1 info, 2 warn,
     * 3 error, 4 fatal (default: nothing in practice; see store.c). */
    int info_log_level;
    const segd_log_t *log;         /* segd's own lines; borrowed; NULL = default */
} segd_store_opts_t;

typedef struct segd_store_stats {
    uint64_t users;          /* keys with at least one live segment */
    uint64_t records;        /* non-empty records, live or not */
    uint64_t live_segments;
    uint64_t stored_entries; /* live + dead kept within the horizon */
    uint64_t sst_bytes;      /* on-disk bytes of the profiles family */
    uint64_t corrupt;        /* records skipped because they do not decode */
    /* For judging bytes per live segment (segd_store_stats_bytes_per_live). */
    uint64_t sst_data_bytes;   /* of sst_bytes, the data blocks (the rest: per-file
                                * index, filter, properties, footer) */
    uint64_t sst_entries;      /* keys (records) in those files */
    uint64_t memtable_bytes;   /* profiles writes not yet flushed (in-memory size) */
    uint64_t memtable_entries; /* and how many writes that is */
} segd_store_stats_t;

/* Whether sst_bytes / live_segments says what the store costs per segment. */
typedef enum segd_bps_verdict {
    SEGD_BPS_OK = 0,
    SEGD_BPS_NO_LIVE,     /* nothing live to divide by */
    SEGD_BPS_NOT_FLUSHED, /* writes sit in memtables, outside sst_bytes */
    SEGD_BPS_TOO_SMALL,   /* per-file overheads, not data, are most of sst_bytes */
} segd_bps_verdict_t;

void segd_store_opts_default(segd_store_opts_t *o);

segd_err_t segd_store_open(segd_store_t **out, const segd_store_opts_t *o, char *errstr,
                           size_t errstr_size);
void segd_store_close(segd_store_t *s);

/* Borrowed; valid until segd_store_close. Thread-safe. */
segd_policy_t *segd_store_policy(segd_store_t *s);
int64_t segd_store_granularity(const segd_store_t *s);

segd_err_t segd_batch_new(segd_store_t *s, segd_batch_t **out);
void segd_batch_destroy(segd_batch_t *b);
void segd_batch_clear(segd_batch_t *b);
size_t segd_batch_count(const segd_batch_t *b);
/* The operand bytes are copied into the batch. */
void segd_batch_merge(segd_batch_t *b, const char *user, size_t user_len,
                      const uint8_t *operand, size_t operand_len);
void segd_batch_set_offset(segd_batch_t *b, const char *topic, int32_t partition,
                           int64_t next_offset);
/* Appends an outbox entry (DESIGN §5) under the store's next outbox sequence
 * number, allocated now (an atomic counter; a batch never written leaves a
 * gap, which is harmless). The publisher deletes acknowledged entries up to
 * the highest sequence it read, so the store has ONE appender at a time:
 * the ingest pipeline in `segd run`, or one offline command (backfill,
 * retire) holding the store's lock; two concurrent appenders could write a
 * lower sequence after the publisher passed it. Returns the sequence. An
 * append from a thread other than the store's first appender appends
 * nothing and returns SEGD_OUTBOX_REFUSED; the batch then fails every
 * write with SEGD_ERR_INVALID until cleared. */
#define SEGD_OUTBOX_REFUSED UINT64_MAX
uint64_t segd_batch_outbox_append(segd_batch_t *b, const void *value, size_t vlen);
/* Deletes the outbox entry seq (an absent one is a no-op). */
void segd_batch_outbox_delete(segd_batch_t *b, uint64_t seq);
/* Records the change topic's next offset after the highest acknowledged
 * delta of a partition (a snapshot's "tail from here" position). */
void segd_batch_set_change_position(segd_batch_t *b, const char *topic, int32_t partition,
                                    int64_t next_offset);

/* Writes the batch atomically with the WAL on; the batch is left intact
 * (the caller clears or retries it). Thread-safe for distinct batches.
 * SEGD_ERR_IO while the disk has less than min_free_mb free (retry later);
 * SEGD_ERR_ABORTED once a write has failed in RocksDB: the store takes no
 * more writes until the process restarts (see write.c, write_failed). */
segd_err_t segd_store_write(segd_store_t *s, segd_batch_t *b, char *errstr,
                            size_t errstr_size);

/* As segd_store_write, with the WAL synced before it returns: for the rare
 * offline writes an operator acts on at once (segd offsets set). */
segd_err_t segd_store_write_sync(segd_store_t *s, segd_batch_t *b, char *errstr,
                                 size_t errstr_size);

/* Counters kept with the data they count: meta `count/<name>`, 8-byte
 * big-endian. Written in the same WriteBatch as a batch's data and offsets,
 * a counter stays exact under crashes (the pipeline's `misrouted`): a batch
 * lost with its offsets is re-read and counted again, never twice. The
 * writer reads the counter at start and sets the new total (one writer per
 * store: RocksDB's lock). */
void segd_batch_set_counter(segd_batch_t *b, const char *name, int64_t value);
/* 0 when the counter was never written. */
segd_err_t segd_store_counter_get(segd_store_t *s, const char *name, int64_t *value,
                                  char *errstr, size_t errstr_size);

/* An input topic's partition count as the writer last saw it in the
 * brokers' metadata (meta `partitions/<topic>`): readers without a broker
 * (segd get) place users in partitions with it. */
void segd_batch_set_partition_count(segd_batch_t *b, const char *topic, int32_t count);
/* SEGD_ERR_NOTFOUND when none is stored. */
segd_err_t segd_store_partition_count(segd_store_t *s, const char *topic, int32_t *count,
                                      char *errstr, size_t errstr_size);

/* What history `segd rebuild` began each input partition with (DESIGN
 * §3.2), kept in the rebuilt store so that the swap sees it too: meta
 * `rebuild_log_start/<topic>/<partition>`, the partition's log start when
 * the rebuild began, and `rebuild_gone_from/<topic>/<partition>`, present
 * only when the store lacks [gone_from, log start): offsets neither the
 * topic nor a base unit held. 8-byte big-endian positions like the offsets:
 * read with segd_store_view_positions (these kinds) or segd_store_position_get. */
#define SEGD_POS_REBUILD_LOG_START "rebuild_log_start"
#define SEGD_POS_REBUILD_GONE_FROM "rebuild_gone_from"
void segd_batch_set_position(segd_batch_t *b, const char *kind, const char *topic,
                             int32_t partition, int64_t value);
void segd_batch_delete_position(segd_batch_t *b, const char *kind, const char *topic,
                                int32_t partition);
/* SEGD_ERR_NOTFOUND when the store holds no such position. */
segd_err_t segd_store_position_get(segd_store_t *s, const char *kind, const char *topic,
                                   int32_t partition, int64_t *value, char *errstr,
                                   size_t errstr_size);

/* SEGD_ERR_NOTFOUND when the partition has no stored offset. */
segd_err_t segd_store_offset_get(segd_store_t *s, const char *topic, int32_t partition,
                                 int64_t *next_offset, char *errstr, size_t errstr_size);

/* Reads one user's record, pruned at the policy's now (dead entries stay:
 * callers filter with segd_entry_live or the query module). An absent user
 * yields an empty profile and SEGD_OK. */
segd_err_t segd_store_get(segd_store_t *s, const char *user, size_t user_len,
                          segd_profile_t *out, char *errstr, size_t errstr_size);
/* *known = 1 when the store holds a record for user at all, live entries or
 * not (until a compaction deletes an empty one): "never seen" against
 * "nothing live", the "known" of the cache's HTTP API and `segd get --json`. */
segd_err_t segd_store_known(segd_store_t *s, const char *user, size_t user_len, int *known,
                            char *errstr, size_t errstr_size);

/* Calls cb for every non-empty record in key order; cb returns non-zero to
 * stop. The profile is borrowed for the call. */
typedef int (*segd_scan_cb)(void *ctx, const char *user, size_t user_len,
                            const segd_profile_t *p);
segd_err_t segd_store_scan(segd_store_t *s, segd_scan_cb cb, void *ctx, char *errstr,
                           size_t errstr_size);

/* Flushes the memtables to SST files (operand chains become partial merges). */
segd_err_t segd_store_flush(segd_store_t *s, char *errstr, size_t errstr_size);

/* Full manual compaction of the profiles family at the policy's now. Every
 * operand is merged into its base by the first pass, so the GC watermark may
 * then jump to its target (segd_store_gc_advance with SEGD_GC_MERGED_ALL) before
 * the second pass drops what lies below it. Call without concurrent writers
 * (segd compact, tests, segd run before it consumes). */
segd_err_t segd_store_compact(segd_store_t *s, char *errstr, size_t errstr_size);
/* The same; SEGD_COMPACT_KEEP_HISTORY: a store still taking history (W = 0,
 * no start phase: a fresh or backfilled store) keeps taking it, W is not
 * moved (segd compact without --end-history). */
#define SEGD_COMPACT_KEEP_HISTORY 1
segd_err_t segd_store_compact_ex(segd_store_t *s, int flags, char *errstr,
                                 size_t errstr_size);

/* One full compaction of the profiles family as RocksDB's periodic
 * compaction runs it beside writers: every file rewritten once through the
 * merge operator and the filter at the current W, which it does not move
 * (so concurrent writes are safe). For benchmarks of ingest under it.
 * SEGD_ERR_IO when it raised a background error. */
segd_err_t segd_store_compact_beside_writers(segd_store_t *s, char *errstr,
                                             size_t errstr_size);

/* Advances the GC watermark W (DESIGN §3) toward now - horizon - grace,
 * writing it to `meta` (synced) before the merge operator and the filter may
 * use it. W moves no faster than the policy clock has moved between calls
 * (time the store was closed does not count: no compaction merged anything
 * then). A fresh store (W = 0) takes history of any age until a caller that
 * has caught up with its input passes SEGD_GC_CAUGHT_UP: from then on events
 * below now - horizon are refused, and W starts once that has held for grace
 * of open time. SEGD_GC_MERGED_ALL (every operand was just merged, no writer
 * since) lets W jump to its target. A read-only store does nothing. */
#define SEGD_GC_MERGED_ALL 1
#define SEGD_GC_CAUGHT_UP 2
#define SEGD_GC_KEEP_HISTORY 4 /* with MERGED_ALL: W = 0 and no start phase stay so */
segd_err_t segd_store_gc_advance(segd_store_t *s, int flags, char *errstr,
                                 size_t errstr_size);
/* The persisted GC watermark (0 = none yet). */
int64_t segd_store_gc_watermark(segd_store_t *s);
/* Raises the import floor of (topic, partition) to at least floor_ms for
 * good (meta `import_floor/<topic>/<partition>`, synced before it applies):
 * state restored from that partition's snapshot unit lacks the dead entries
 * its store dropped below that store's W, so events of that partition older
 * than that must be refused here as they are there (DESIGN §3.1, §7).
 * Refusing more is always safe; nothing is dropped by it. Per partition:
 * the history of the store's other partitions stays acceptable. */
segd_err_t segd_store_raise_import_floor(segd_store_t *s, const char *topic, int32_t partition,
                                         int64_t floor_ms, char *errstr, size_t errstr_size);
/* The import floor of (topic, partition); 0 = none. Thread-safe. */
int64_t segd_store_import_floor(segd_store_t *s, const char *topic, int32_t partition);
/* Every import floor: cb(ctx, topic, partition, floor_ms); cb returns
 * non-zero to stop (a rebuilt store takes the live one's, app/rebuild.h). */
typedef int (*segd_floor_cb)(void *ctx, const char *topic, int32_t partition, int64_t floor_ms);
void segd_store_import_floors(segd_store_t *s, segd_floor_cb cb, void *ctx);

segd_err_t segd_store_stats(segd_store_t *s, segd_store_stats_t *st, char *errstr,
                            size_t errstr_size);
/* Bytes per live segment from st into *bps (always set, 0 with nothing
 * live) and whether it means anything; why (may be NULL) gets a sentence
 * for the reader when it does not. */
segd_bps_verdict_t segd_store_stats_bytes_per_live(const segd_store_stats_t *st, double *bps,
                                                   char *why, size_t why_size);

/* Retires segment_id store-wide for entries with ts_ms <= before_ms. extra
 * (may be NULL) is written in the same WriteBatch (e.g. the outbox entry that
 * carries the retirement to caches) and left cleared. */
/* The marker of segd_store_retire (raised to the stored one) put into b, to
 * be written with the rest of b; the policy learns it only from
 * segd_store_retire_applied, called after b was written (DESIGN 3.2: a
 * retirement through the log joins its message's batch). */
void segd_batch_retire(segd_batch_t *b, int64_t segment_id, int64_t before_ms);
segd_err_t segd_store_retire_applied(segd_store_t *s, int64_t segment_id, int64_t before_ms);
segd_err_t segd_store_retire(segd_store_t *s, int64_t segment_id, int64_t before_ms,
                             segd_batch_t *extra, char *errstr, size_t errstr_size);

/* ---------- outbox ---------- */

/* Calls cb for outbox entries with seq >= from_seq in order, at most max of
 * them; cb returns non-zero to stop. Values are borrowed for the call. */
typedef int (*segd_outbox_cb)(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen);
segd_err_t segd_store_outbox_scan(segd_store_t *s, uint64_t from_seq, size_t max,
                                  segd_outbox_cb cb, void *ctx, char *errstr,
                                  size_t errstr_size);
/* The sequence number the next appended entry gets. */
uint64_t segd_store_outbox_next_seq(segd_store_t *s);
/* Entries in the outbox now, exactly: counted at open, then moved by every
 * successful write by the entries it appended and deleted (thread-safe). */
uint64_t segd_store_outbox_depth(segd_store_t *s);

/* ---------- health and RocksDB figures (metrics, /readyz) ---------- */

/* Whether a write would be taken now: SEGD_ERR_ABORTED after a failed write
 * (the store is stopped until a restart), SEGD_ERR_IO while the disk holds
 * less than min_free_mb (writes wait), with the reason in errstr. Cheap (one
 * statvfs); thread-safe. */
segd_err_t segd_store_writable(segd_store_t *s, char *errstr, size_t errstr_size);

/* The column families whose figures the metrics show, by index, and their names. */
#define SEGD_STORE_FAMILIES 3
const char *segd_store_family_name(int family); /* "profiles", "meta", "outbox" */

/* A RocksDB integer property ("rocksdb.estimate-live-data-size") of one
 * family, or of the DB (family -1: "rocksdb.actual-delayed-write-rate");
 * 0 on success, -1 when RocksDB does not know it. Thread-safe. */
int segd_store_property(segd_store_t *s, int family, const char *name, uint64_t *value);

/* A RocksDB text property ("rocksdb.cfstats") of one family, or of the DB
 * (family -1), as a malloc'd string the caller frees; NULL when RocksDB
 * does not know it. Thread-safe. */
char *segd_store_property_text(segd_store_t *s, int family, const char *name);

/* The block cache's usage and capacity in bytes (shared by the families). */
void segd_store_block_cache(segd_store_t *s, uint64_t *usage, uint64_t *capacity);

/* ---------- consumer-group instance id (static membership) ---------- */

/* The store's group.instance.id, "segd-" + 16 hex digits: generated once
 * and kept in `meta` under "instance_id", so a restarted `segd run` on the
 * same store takes its old place in the group. SEGD_ERR_NOTFOUND from a
 * read-only store that has none. */
segd_err_t segd_store_instance_id(segd_store_t *s, char *out, size_t out_size, char *errstr,
                                  size_t errstr_size);

/* ---------- fault injection (tests) ---------- */

/* SQLite-style: after segd_store_fault_set(s, point, nth, times), calls
 * nth .. nth+times-1 (counted from 1 at the set) at that point fail;
 * nth = 0 turns the point off. Always compiled in: an unset point costs one
 * relaxed atomic load. */
typedef enum segd_store_fault {
    SEGD_FAULT_OFFSET_GET, /* segd_store_offset_get: SEGD_ERR_IO */
    SEGD_FAULT_WRITE,      /* segd_store_write: SEGD_ERR_IO, nothing written */
    SEGD_FAULT_APPLY,      /* the applier's allocations: SEGD_ERR_NOMEM */
    SEGD_FAULTS
} segd_store_fault_t;
void segd_store_fault_set(segd_store_t *s, segd_store_fault_t point, uint64_t nth,
                          uint64_t times);
/* Counts a call at point; 1 when it must fail. */
int segd_store_fault_hit(segd_store_t *s, segd_store_fault_t point);

/* ---------- revocation sweep (consumer/sweep.h, DESIGN §7) ---------- */

/* Deletes a user's record (a RocksDB delete: no tombstone entries, no
 * delta; the sweep reclaims the space of users another instance owns). */
void segd_batch_delete_user(segd_batch_t *b, const char *user, size_t user_len);
/* Deletes a partition's stored input offset: it is restored or replayed
 * as one assigned without an offset. */
void segd_batch_delete_offset(segd_batch_t *b, const char *topic, int32_t partition);
/* meta `sweep/<topic>/<partition>` (read with segd_store_view_positions,
 * kind "sweep"): the partition's offset is gone and some of its users may
 * remain, to be deleted before its data comes back. since_ms: when the
 * sweep began. */
void segd_batch_set_sweep_mark(segd_batch_t *b, const char *topic, int32_t partition,
                               int64_t since_ms);
void segd_batch_clear_sweep_mark(segd_batch_t *b, const char *topic, int32_t partition);

/* Calls cb for up to max user keys of the profiles family in key order,
 * starting after `after` (NULL: at the first); *end = 1 when no key
 * follows the last one passed. cb returns non-zero to stop. */
typedef int (*segd_key_cb)(void *ctx, const char *user, size_t user_len);
segd_err_t segd_store_scan_users(segd_store_t *s, const char *after, size_t after_len,
                                 size_t max, segd_key_cb cb, void *ctx, int *end,
                                 char *errstr, size_t errstr_size);

/* ---------- consistent views (snapshots) ---------- */

/* A RocksDB snapshot: scans, offsets and markers read through one view agree
 * with each other, while writers go on. */
typedef struct segd_store_view segd_store_view_t;

segd_err_t segd_store_view_open(segd_store_t *s, segd_store_view_t **out, char *errstr,
                                size_t errstr_size);
void segd_store_view_close(segd_store_view_t *v);
/* As segd_store_scan, through the view. */
segd_err_t segd_store_view_scan(segd_store_view_t *v, segd_scan_cb cb, void *ctx,
                                char *errstr, size_t errstr_size);
/* Every stored value of the profiles family through the view, in key order,
 * as read (operands merged, not decoded, not pruned, empty values included):
 * for exporters that decode only the users they keep and may copy a value
 * that needs no pruning (snapshot.format = native). Borrowed for the call;
 * cb returns non-zero to stop. */
typedef int (*segd_scan_raw_cb)(void *ctx, const char *user, size_t user_len,
                                const uint8_t *value, size_t value_len);
segd_err_t segd_store_view_scan_raw(segd_store_view_t *v, segd_scan_raw_cb cb, void *ctx,
                                    char *errstr, size_t errstr_size);
/* Input offsets (kind "offset") or change positions (kind "changes"):
 * cb(ctx, topic, partition, next_offset); cb returns non-zero to stop. */
typedef int (*segd_position_cb)(void *ctx, const char *topic, int32_t partition,
                                int64_t next_offset);
segd_err_t segd_store_view_positions(segd_store_view_t *v, const char *kind,
                                     segd_position_cb cb, void *ctx, char *errstr,
                                     size_t errstr_size);
/* As segd_store_get, through the view: reads of several users through one
 * view see one state of the store (a linked read, DESIGN §10.5). */
segd_err_t segd_store_view_get(segd_store_view_t *v, const char *user, size_t user_len,
                               segd_profile_t *out, char *errstr, size_t errstr_size);
/* A counter (segd_store_counter_get) as the view holds it. */
segd_err_t segd_store_view_counter(segd_store_view_t *v, const char *name, int64_t *value,
                                   char *errstr, size_t errstr_size);
/* Retirement markers: cb(ctx, segment_id, retired_before_ms). */
typedef int (*segd_retired_cb)(void *ctx, int64_t segment_id, int64_t before_ms);
segd_err_t segd_store_view_retirements(segd_store_view_t *v, segd_retired_cb cb, void *ctx,
                                       char *errstr, size_t errstr_size);

#endif
