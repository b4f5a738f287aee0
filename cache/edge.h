/* The edge cache's table: user id -> profile in memory, kept equal to the
 * store by joining snapshot records and change-stream deltas with the
 * DESIGN §3 join (core/profile.h), and read by bidders at their own clock.
 * No RocksDB and no Kafka here: a bidder can embed this module (with
 * base/, core/ and wire/; installed as libsegd-cache, include/segd/cache.h)
 * and feed it however it likes.
 *
 * Threads: any number of readers (lookup, get_profile, stats) beside
 * writers (put, apply, retire); the table is split into shards, each under a
 * reader-writer lock, so a writer blocks only the readers of one shard.
 *
 * Layout: per user one allocation holding the user id, the erase marker, a
 * dictionary of the user's distinct (ts, expiry, flags, partner) tuples and,
 * per entry, the segment id and a 16-bit tuple index (10 bytes/entry). A
 * lookup tests each tuple's liveness once and then copies the live entries:
 * about 1 µs for 1000 segments, where decoding the store's Rice-coded record
 * would take ~9 µs. */
#ifndef SEGD_EDGE_H
#define SEGD_EDGE_H

#include <stddef.h>
#include <stdint.h>

#include "wire/change.h"
#include "base/err.h"
#include "core/partition.h"
#include "core/profile.h"
#include "wire/member.h"

typedef struct segd_edge segd_edge_t;

typedef struct segd_edge_opts {
    int64_t horizon_ms; /* informational: the store's GC watermark, not this,
                         * decides what the cache drops (DESIGN §3) */
    int64_t now_ms;     /* 0 = wall clock */
    size_t shards;      /* power of two, default 64 */
} segd_edge_opts_t;

typedef struct segd_edge_stats {
    uint64_t users;     /* profiles held (live or not) */
    uint64_t entries;   /* entries held, dead ones within the horizon included */
    uint64_t bytes;     /* memory of the profiles and of the identity table
                         * (not the hash tables' slot arrays) */
    uint64_t retirements;
    uint64_t puts, deltas, control_events;
    uint64_t ids;          /* identity registers held (segd_edge_apply_member) */
    uint64_t id_bytes;     /* their share of bytes */
    uint64_t member_events, member_stale; /* member events applied, and lost to
                                           * the register held */
} segd_edge_stats_t;

void segd_edge_opts_default(segd_edge_opts_t *o);
/* o may be NULL (defaults). */
segd_err_t segd_edge_new(segd_edge_t **out, const segd_edge_opts_t *o);
void segd_edge_destroy(segd_edge_t *e);

/* The clock that decides liveness and what the join may drop; 0 = wall clock. */
void segd_edge_set_now(segd_edge_t *e, int64_t now_ms);
int64_t segd_edge_now_ms(const segd_edge_t *e);

/* The cache's GC watermark W, one per input partition (DESIGN §3.1, §6):
 * dead entries and erase markers with ts_ms < W are dropped by later joins,
 * and a delta's entries older than W are skipped, each by the W of the
 * user's partition. A cache loaded from snapshot units exported by several
 * stores must judge each user by the W of the store that exported it: a
 * smaller W taken from another unit would let a re-delivered old delta
 * resurrect what that store dropped. Take W from the store only (a unit
 * manifest's gc_watermark_ms): the cache's own clock must never decide a
 * drop, or a late delta the store still applies exactly could resurrect what
 * the cache dropped. Every W starts at 0 (drops nothing); W is only raised.
 *
 * A new cache has one partition (P = 1): every user has the one W, which is
 * what an embedding fed from one store wants. segd_edge_set_partitions maps
 * users to `partitions` W values by segd_partition_of(partitioner, user, P),
 * each starting at the current W of partition 0; call it before deltas and
 * before raising W per partition, never beside put/apply/raise on other
 * threads (lookups may run). Calling it again with the same partitioning is
 * a no-op; another partitioning than the one set is SEGD_ERR_INVALID. */
segd_err_t segd_edge_set_partitions(segd_edge_t *e, segd_partitioner_t partitioner,
                                    int32_t partitions);
int32_t segd_edge_partitions(const segd_edge_t *e);
/* Raises every partition's W to at least w_ms. */
void segd_edge_raise_gc_watermark(segd_edge_t *e, int64_t w_ms);
/* Raises partition p's W (a unit's manifest); SEGD_ERR_INVALID when p is
 * not one of the cache's partitions. */
segd_err_t segd_edge_raise_partition_gc_watermark(segd_edge_t *e, int32_t partition,
                                                  int64_t w_ms);
/* The smallest W over the partitions (reporting), and partition p's (-1
 * when p is out of range). */
int64_t segd_edge_gc_watermark(const segd_edge_t *e);
int64_t segd_edge_partition_gc_watermark(const segd_edge_t *e, int32_t partition);

/* Joins a profile into the user's (a snapshot record; loading a snapshot
 * after some deltas is as correct as before them). */
segd_err_t segd_edge_put(segd_edge_t *e, const char *user, size_t len,
                         const segd_profile_t *p);
/* Drops every profile of a user u with segd_partition_of(partitioner, u,
 * partitions) == partition: what a snapshot load took from a unit that a
 * newer export replaced while it was read (cache/edge_load.h). Identity
 * registers stay. Beside puts of other partitions' users and lookups. */
void segd_edge_drop_partition(segd_edge_t *e, segd_partitioner_t partitioner,
                              int32_t partitions, int32_t partition);
/* Applies one change event. A DELTA is joined into its user's profile, except
 * for entries older than the GC watermark W of the user's partition: the unit
 * that carried that W already holds their effect. A replacing DELTA (a
 * rebuild swap's, wire/change.h segd_change_is_replace) replaces the user's
 * profile with its own (none left: the user is removed). A RETIRE raises the
 * retirement markers. */
segd_err_t segd_edge_apply(segd_edge_t *e, const segd_change_t *c);
/* Raises one retirement marker (entries with ts_ms <= before_ms are dead). */
segd_err_t segd_edge_retire(segd_edge_t *e, int64_t segment_id, int64_t before_ms);

/* The user's live entries at the cache's clock, sorted by segment id, copied
 * into out[0..cap). *n is the number of live entries; SEGD_ERR_LIMIT when
 * that exceeds cap (nothing useful in out then). An unknown user has none. */
segd_err_t segd_edge_lookup(segd_edge_t *e, const char *user, size_t len, segd_entry_t *out,
                            size_t cap, size_t *n);
/* segd_edge_lookup, and *known (when not NULL) says whether the table holds
 * a profile for the user at all (a snapshot record or a delta reached it,
 * live entries or not): "never seen" against "nothing live". */
segd_err_t segd_edge_find(segd_edge_t *e, const char *user, size_t len, segd_entry_t *out,
                          size_t cap, size_t *n, int *known);
/* Everything a user's live entries at the cache's clock depend on. Readers
 * that keep something computed from those entries (the RESP front's reply
 * cache, cache/resp_reply_cache.h) compare stamps to know it is still right.
 * Two lookups of the same user with equal profile and retirements versions
 * return the same live entries at any clock second c with now_s <= c < e,
 * where e is the smallest expiry among the entries live at now_s. Versions
 * come from one counter per process, so they never repeat, not even across
 * edges (a reload into a new edge).
 *   profile: the version of the user's stored record. Every change to it (a
 *            put or delta joined, the user dropped) gives a new one; 0 means
 *            there is no record.
 *   retirements: the version of the retirement markers, new on every raise.
 *   now_s: the second at which liveness was judged (expiry_s > now_s). */
typedef struct segd_edge_stamp {
    uint64_t profile, retirements;
    int64_t now_s;
} segd_edge_stamp_t;

/* segd_edge_lookup, and the stamp of the entries returned (read with them,
 * under the same lock); st NULL: none, exactly segd_edge_lookup. */
segd_err_t segd_edge_lookup_stamped(segd_edge_t *e, const char *user, size_t len,
                                    segd_entry_t *out, size_t cap, size_t *n,
                                    segd_edge_stamp_t *st);
/* The stamp a lookup of user would return now, without the entries. */
void segd_edge_stamp(segd_edge_t *e, const char *user, size_t len, segd_edge_stamp_t *st);

/* The stored profile, dead entries and erase marker included (tests, tools).
 * SEGD_ERR_NOTFOUND for an unknown user. */
segd_err_t segd_edge_get_profile(segd_edge_t *e, const char *user, size_t len,
                                 segd_profile_t *out);

void segd_edge_get_stats(segd_edge_t *e, segd_edge_stats_t *st);

/* ---------- identity (DESIGN §10.5, cache side) ----------
 * Each id has a master register fed by MemberEvents (cache/members.h). An
 * event replaces the register only when segd_member_wins(event, register)
 * says so, which makes applying events order-free and idempotent, like the
 * profiles' join. An id without a register is its own master. The component
 * of X is its master M (the one X's register names, or X itself) together
 * with every id whose register names M; an index finds those ids without a
 * scan. */

/* Applies one MemberEvent (a change-topic message or a snapshot unit's
 * members file). SEGD_ERR_INVALID for an empty id or master, or one longer
 * than 256 bytes. */
segd_err_t segd_edge_apply_member(segd_edge_t *e, const segd_member_t *m);
/* Deltas (segd_edge_apply) begun and finished so far: they differ while
 * one is being joined. A loader tells by them whether a delta touched the
 * table while it could drop profiles (cache/edge_load.c). */
void segd_edge_delta_counts(segd_edge_t *e, uint64_t *begun, uint64_t *done);

/* Calls cb for the members of id's component, the master first, then the
 * others bytewise; an id the table does not know yields itself alone.
 * Bytes borrowed for the call, which runs with no lock held; non-zero from
 * cb stops with SEGD_ERR_ABORTED. */
typedef int (*segd_edge_member_cb)(void *ctx, const char *member, size_t len);
segd_err_t segd_edge_members(segd_edge_t *e, const char *id, size_t len,
                             segd_edge_member_cb cb, void *ctx);

/* The §3 join over id's component, computed exactly as the store's
 * segd_ident_get_linked does, so a cache and the store answer alike. Each
 * member's profile (dead entries included, as segd_edge_get_profile holds
 * it) has its own erase marker applied and then dropped, and then all of
 * them are joined with segd_profile_join without pruning. out is replaced
 * and carries no erase marker. cb, if not NULL, hears each member (the
 * master first) before any profile is read; a non-zero return stops the
 * call with SEGD_ERR_ABORTED. *known, if not NULL, is set to 1 when the
 * table holds a profile for at least one member.
 *
 * Consistency: the member list is one state of the identity table; each
 * member's profile is read whole under its own shard's lock, one after the
 * other, so a delta or a membership event applied meanwhile may be seen for
 * one member and not yet for another. Since every apply is a join (states
 * only grow), the answer lies between the component's state when the call
 * began and when it ended, member by member (the members together may
 * never have held exactly that state at one instant), and never older than
 * what a lookup that ended before this one began saw. */
segd_err_t segd_edge_get_linked(segd_edge_t *e, const char *id, size_t len,
                                segd_profile_t *out, segd_edge_member_cb cb, void *ctx,
                                int *known);
/* The live entries of segd_edge_get_linked's join at the cache's clock,
 * judged by expiry and retirements (the join leaves no erase marker),
 * sorted by segment id into out[0..cap), the way segd_edge_find answers for
 * one user. *n is their number; SEGD_ERR_LIMIT when that exceeds cap. */
segd_err_t segd_edge_lookup_linked(segd_edge_t *e, const char *id, size_t len,
                                   segd_entry_t *out, size_t cap, size_t *n, int *known,
                                   segd_edge_member_cb cb, void *ctx);

/* Every identity register (id, master, master_first_seen_ms, epoch_ms), in
 * no order, under the identity table's read lock (tests, tools): cb must not
 * call into e's identity functions. */
typedef int (*segd_edge_register_cb)(void *ctx, const segd_member_t *reg);
segd_err_t segd_edge_scan_registers(segd_edge_t *e, segd_edge_register_cb cb, void *ctx);

#endif
