/* Consistent snapshots (DESIGN §6), read whole: find a snapshot's topology
 * (SRC = DEST/<topic>, or DEST holding one topic), then load or verify
 * every unit p-00000 .. p-(P-1) from a directory, http(s):// or s3://
 * source (the edge cache's start, `segd snapshot verify`), and fold their
 * manifests into one (wire/manifest.h: per change partition the minimum
 * position) from which a tail starts. Each unit is read and checked by
 * snapread/unit.h. Calls on different threads are independent. */
#ifndef SEGD_SNAPREAD_SNAPSHOT_H
#define SEGD_SNAPREAD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "snapread/unit.h"

/* Finds SRC's topology.json: SRC/topology.json, else (a local directory)
 * the one subdirectory of SRC that holds one. topic_url receives the
 * directory of the units. SEGD_ERR_NOTFOUND when there is none; SRC holding
 * several topics is SEGD_ERR_INVALID (name one: SRC/<topic>). */
segd_err_t segd_snapshot_topology(const char *src_url, const segd_dest_opts_t *dopts,
                                  char *topic_url, size_t cap, segd_topology_t *t,
                                  char *errstr, size_t errstr_size);

/* One unit's outcome: m is its manifest (NULL when it failed), err/errmsg
 * why it failed. Borrowed for the call; calls are serialised. */
typedef struct segd_unit_report {
    int32_t partition;
    const segd_manifest_t *m;
    segd_err_t err;
    const char *errmsg;
} segd_unit_report_t;

typedef struct segd_snapshot_read_opts {
    const segd_dest_opts_t *dest; /* NULL = defaults */
    segd_snapshot_member_cb on_member; /* NULL = members files are only verified */
    void *member_ctx;
    /* Drops what cb took from a unit that a newer export replaced while it
     * was read, which is then read again (snapread/unit.h; called with cb's
     * ctx). NULL, or a nonzero return, = such a unit fails with
     * SEGD_ERR_UNSORTED. */
    segd_snapshot_discard_cb on_discard;
    uint32_t threads;             /* units loaded side by side; 0 or 1 = this thread */
    int keep_going;               /* go on after a failed unit (verify reports all) */
    void (*on_unit)(void *ctx, const segd_unit_report_t *r); /* NULL = none */
    void *unit_ctx;
} segd_snapshot_read_opts_t;

/* Loads (cb != NULL) or verifies (cb == NULL) every unit the topology
 * names, each checked as snapread/unit.h says (the members file's records
 * must decode as MemberEvents whose id is of the unit's partition; user ids
 * must be strict UTF-8). With threads > 1, cb and on_member run on several
 * threads at once. m (initialised here; the caller frees it, whatever the
 * result) receives the fold of the units that loaded. A missing or damaged
 * unit is SEGD_ERR_CORRUPT naming it; o may be NULL. */
segd_err_t segd_snapshot_read(const char *src_url, const segd_snapshot_read_opts_t *o,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

#endif
