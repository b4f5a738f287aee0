/* Reading and checking one snapshot unit (DESIGN §6). This is the one place
 * that does it, below both of its users: the whole-snapshot reader
 * (snapread/snapshot.h, for caches and `segd snapshot verify`) and restores
 * (load/restore.h). It reads through one destination handle opened at
 * DEST/<topic>: topology.json there, unit p's manifest and files in the
 * unit's folder p-PPPPP. Each file is checked whole (size and SHA-256
 * against the manifest) before a record of it is decoded. Every record must
 * belong to the unit's partition, and the counts must match the manifest.
 * A handle is not thread-safe (transport/dest.h), so each thread reads
 * through a handle of its own. */
#ifndef SEGD_SNAPREAD_UNIT_H
#define SEGD_SNAPREAD_UNIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/profile.h"
#include "transport/dest.h"
#include "wire/manifest.h"
#include "wire/member.h"
#include "wire/topology.h"

/* Called for every record of a unit after the unit's file passed its size
 * and SHA-256 checks; partition is the unit's. The profile and user are
 * borrowed for the call. A non-zero return stops the read, which then fails
 * with SEGD_ERR_INVALID. */
typedef int (*segd_snapshot_cb)(void *ctx, int32_t partition, const char *user,
                                size_t user_len, const segd_profile_t *p);

/* As segd_snapshot_cb, plus the record's bytes as the unit holds them when
 * its format is native (the store's own encoding of p: rec, rec_len), or
 * NULL for avro units. */
typedef int (*segd_snapshot_rec_cb)(void *ctx, int32_t partition, const char *user,
                                    size_t user_len, const segd_profile_t *p,
                                    const uint8_t *rec, size_t rec_len);

/* Called for every MemberEvent of a unit's members file (DESIGN §10.5: the
 * store's id -> master registers of the unit's ids) after the file passed
 * its checks, as segd_snapshot_cb. */
typedef int (*segd_snapshot_member_cb)(void *ctx, int32_t partition, const segd_member_t *m);

/* Called when a newer export replaced unit `partition` of t after some of
 * its records reached the reader's callback: the caller drops everything it
 * took from that unit (every user u with segd_partition_of(t->partitioner,
 * u, t->partitions) == partition) and returns 0, and the unit is then read
 * from the new one; or it returns nonzero when it cannot drop only that
 * (it held other data of those users), and the read fails with
 * SEGD_ERR_UNSORTED. ctx is the records' ctx. */
typedef int (*segd_snapshot_discard_cb)(void *ctx, const segd_topology_t *t, int32_t partition);

typedef struct segd_unit_read_opts {
    segd_snapshot_cb on_profile;    /* NULL = profiles are only checked */
    /* Or on_record, which a restore uses. */
    segd_snapshot_rec_cb on_record;
    void *ctx;
    /* A unit that a newer export replaces after some of its records reached
     * on_profile or on_record is read again only after on_discard dropped
     * them; without on_discard, or when it cannot drop them, the read fails
     * with SEGD_ERR_UNSORTED (a restore then starts anew). What the caller took from the old unit
     * must never join the new one: a rebuilt store's unit may lack users and
     * entries the old unit had, and the join would bring them back. */
    segd_snapshot_discard_cb on_discard;
    segd_snapshot_member_cb on_member; /* NULL = members files are only checked */
    void *member_ctx;
    /* A unit without a manifest is SEGD_ERR_NOTFOUND (a restore replays the
     * partition instead) rather than SEGD_ERR_CORRUPT (a cache needs every
     * unit). */
    int absent_is_notfound;
} segd_unit_read_opts_t;

/* Reads and parses topology.json at d's base. SEGD_ERR_NOTFOUND when there
 * is none. */
segd_err_t segd_snapread_topology(segd_dest_t *d, segd_topology_t *t, char *errstr,
                                  size_t errstr_size);

/* Reads and checks unit p of the snapshot whose topology is t, through d
 * (opened at DEST/<topic>). The unit's manifest must match t. A unit that a
 * newer export replaced while it was read is read again (as on_discard
 * says), up to 3 times in all. m
 * is initialised here and receives the unit's manifest; the caller frees it
 * whatever the result. A missing or damaged unit is SEGD_ERR_CORRUPT. */
segd_err_t segd_snapread_unit(segd_dest_t *d, const segd_topology_t *t, int32_t p,
                              const segd_unit_read_opts_t *o, segd_manifest_t *m,
                              char *errstr, size_t errstr_size);

#endif
