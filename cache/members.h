/* The edge cache's identity table (DESIGN §10.5, cache side): per id the
 * master register the change stream's MemberEvents (wire/member.h) and a
 * snapshot unit's members file set, and the master -> members index a
 * linked lookup reads without a scan. No profiles here: cache/edge.c joins
 * the members' profiles.
 *
 * The register rule: an id with no register is its own master; an event
 * replaces an id's register only when segd_member_wins(event, register)
 * (the larger epoch_ms, then the smaller (master_first_seen_ms, master
 * bytewise)). That order is total on the fields that take part, so any
 * order and any duplication of the same events ends at the same table.
 * A component is read as the store defines it from its `ids` family:
 * master M = register(X).master (or X), members = {M} and every id whose
 * register names M. No transitive step: while the events of one link are
 * still arriving, M's own register may already name another master; the
 * table then answers what its registers say, as the store's `i` and `m`
 * keys would if written in that order.
 *
 * Threads: one reader-writer lock (writer-preferring, as the profile
 * shards). Membership events are rare next to deltas (the links topic is
 * small), and a read copies at most one component out under the read lock,
 * so one lock is enough; readers of different ids never block each other. */
#ifndef SEGD_MEMBERS_H
#define SEGD_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "wire/member.h"

#define SEGD_MEMBERS_MAX_ID 256 /* as the store's SEGD_IDENT_MAX_ID */

typedef struct segd_members segd_members_t;

/* A component copied out of the table. The ids lie back to back in bytes,
 * id i at [off[i], off[i+1]), the master first and then the others in
 * bytewise order. A zeroed list is empty and valid, so one list can be
 * reused across calls and freed once at the end. */
typedef struct segd_member_list {
    char *bytes;
    size_t *off;
    size_t n;
    size_t bytes_cap, off_cap;
} segd_member_list_t;

void segd_member_list_free(segd_member_list_t *l);

typedef struct segd_members_stats {
    uint64_t ids;     /* registers held */
    uint64_t masters; /* masters with at least one register naming them */
    uint64_t bytes;   /* registers, index entries and member arrays (not the
                       * hash tables' bucket arrays, as profile bytes) */
    uint64_t applied; /* events that replaced or created a register */
    uint64_t stale;   /* events that lost to the register held (duplicates,
                       * older epochs, larger masters) */
} segd_members_stats_t;

segd_err_t segd_members_new(segd_members_t **out);
void segd_members_destroy(segd_members_t *t);

/* Takes m if it wins id's register (*applied = 1), else changes nothing
 * (*applied = 0; applied may be NULL). SEGD_ERR_INVALID for an id or a
 * master that is empty or longer than SEGD_MEMBERS_MAX_ID bytes. Only the
 * register fields are kept (bucket, buckets and committed_at_ms are not). */
segd_err_t segd_members_apply(segd_members_t *t, const segd_member_t *m, int *applied);

/* id's component into out (replaced): the master first, then the other
 * members bytewise. An id without a register that no register names as
 * master yields itself alone. */
segd_err_t segd_members_component(segd_members_t *t, const char *id, size_t len,
                                  segd_member_list_t *out);

/* Calls cb for every register, in no particular order, with id, master,
 * master_first_seen_ms and epoch_ms filled in and the other fields 0. It
 * runs under the read lock, so cb must not call back into the table. A
 * non-zero return from cb stops the scan with SEGD_ERR_ABORTED. */
typedef int (*segd_members_scan_cb)(void *ctx, const segd_member_t *reg);
segd_err_t segd_members_scan(segd_members_t *t, segd_members_scan_cb cb, void *ctx);

void segd_members_get_stats(segd_members_t *t, segd_members_stats_t *st);

#endif
