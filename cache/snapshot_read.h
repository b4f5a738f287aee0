/* Consistent snapshots (DESIGN §6), the reading half: find a snapshot's
 * topology (SRC = DEST/<topic>, or DEST holding one topic), then load or
 * verify every unit p-00000 .. p-(P-1) from a directory, http(s):// or
 * s3:// source (the edge cache's start, `segd snapshot verify`), and fold
 * their manifests into one (wire/manifest.h: per change partition the
 * minimum position) from which a tail starts. Calls on different threads
 * are independent. */
#ifndef SEGD_SNAPSHOT_READ_H
#define SEGD_SNAPSHOT_READ_H

#include <stddef.h>
#include <stdint.h>

#include "core/record.h"
#include "transport/dest.h"
#include "wire/manifest.h"
#include "wire/member.h"
#include "wire/topology.h"

/* Finds SRC's topology.json: SRC/topology.json, else (a local directory)
 * the one subdirectory of SRC that holds one. topic_url receives the
 * directory of the units. SEGD_ERR_NOTFOUND when there is none; SRC holding
 * several topics is SEGD_ERR_INVALID (name one: SRC/<topic>). */
segd_err_t segd_snapshot_topology(const char *src_url, const segd_dest_opts_t *dopts,
                                  char *topic_url, size_t cap, segd_topology_t *t,
                                  char *errstr, size_t errstr_size);

/* Called for every record of every unit after the unit's file passed its
 * size and SHA-256 checks; partition is the unit's. The profile and user are
 * borrowed for the call; cb returns non-zero to stop (an error:
 * SEGD_ERR_INVALID). With threads > 1, cb runs on several threads at once. */
typedef int (*segd_snapshot_cb)(void *ctx, int32_t partition, const char *user,
                                size_t user_len, const segd_profile_t *p);

/* One unit's outcome: m is its manifest (NULL when it failed), err/errmsg
 * why it failed. Borrowed for the call; calls are serialised. */
typedef struct segd_unit_report {
    int32_t partition;
    const segd_manifest_t *m;
    segd_err_t err;
    const char *errmsg;
} segd_unit_report_t;

/* Called for every MemberEvent of a unit's members file (DESIGN §10.5:
 * the store's id -> master registers of the unit's ids) after the file
 * passed its checks, as segd_snapshot_cb. Borrowed for the call; non-zero
 * stops (SEGD_ERR_INVALID). */
typedef int (*segd_snapshot_member_cb)(void *ctx, int32_t partition, const segd_member_t *m);

typedef struct segd_snapshot_read_opts {
    const segd_dest_opts_t *dest; /* NULL = defaults */
    segd_snapshot_member_cb on_member; /* NULL = members files are only verified */
    void *member_ctx;
    uint32_t threads;             /* units loaded side by side; 0 or 1 = this thread */
    int keep_going;               /* go on after a failed unit (verify reports all) */
    void (*on_unit)(void *ctx, const segd_unit_report_t *r); /* NULL = none */
    void *unit_ctx;
} segd_snapshot_read_opts_t;

/* Loads (cb != NULL) or verifies (cb == NULL) every unit the topology
 * names: each file's size and SHA-256 against its unit's manifest (the
 * members file's too: its records must decode as MemberEvents whose id is
 * of the unit's partition, as many as the manifest says), each
 * record's partition (partitioner(user_id, P) == the unit's), strict UTF-8
 * user ids, record and entry counts, and that each unit's manifest matches
 * the topology. A unit replaced by a newer export while it was read is read
 * again (up to 3 times). m (initialised here; the caller frees it, whatever
 * the result) receives the fold of the units that loaded. A missing or
 * damaged unit is SEGD_ERR_CORRUPT naming it; o may be NULL. */
segd_err_t segd_snapshot_read(const char *src_url, const segd_snapshot_read_opts_t *o,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

/* Loads one unit (restore on assignment, app/restorer.h): topic_url =
 * DEST/<topic>; the unit's files are checked as segd_snapshot_read checks
 * them, cb runs on this thread, m (initialised here; the caller frees it)
 * receives its manifest. SEGD_ERR_NOTFOUND when there is no usable unit:
 * no topology, no manifest for the partition, or (partitions > 0) a
 * snapshot of a different partition count or partitioner, whose units hold
 * other users. */
/* cb as segd_snapshot_cb, plus the record's bytes as the unit holds them
 * when its format is native (the store's own encoding of p: rec, rec_len),
 * NULL for avro units. A unit replaced by a newer export after some of its
 * records went to cb is SEGD_ERR_UNSORTED: start the load anew (what cb
 * took from the old unit must not join the new one). */
typedef int (*segd_snapshot_rec_cb)(void *ctx, int32_t partition, const char *user,
                                    size_t user_len, const segd_profile_t *p,
                                    const uint8_t *rec, size_t rec_len);
segd_err_t segd_snapshot_read_unit(const char *topic_url, int32_t partition, int32_t partitions,
                                   segd_partitioner_t partitioner,
                                   const segd_dest_opts_t *dopts, segd_manifest_t *m,
                                   segd_snapshot_rec_cb cb, void *ctx, char *errstr,
                                   size_t errstr_size);

#endif
