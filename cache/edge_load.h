/* Loading a snapshot into an edge table (cache/edge.h): every unit's
 * records and its members file's identity registers (segd_edge_apply_member;
 * a unit without one brings none), then the units' retirements and each unit's GC watermark W as the
 * W of its input partition (DESIGN §3.1, §6). The units of a fleet come from
 * stores with different W: each user must be judged by the W of the store
 * that exported it, never by the smallest over the units. Used by `segd
 * cache`, the demo and the tests. */
#ifndef SEGD_EDGE_LOAD_H
#define SEGD_EDGE_LOAD_H

#include <stddef.h>

#include "cache/edge.h"
#include "snapread/snapshot.h"
#include "wire/manifest.h"

/* Loads every unit of src_url (segd_snapshot_read: o may be NULL; its
 * on_unit, if any, is still called) into e, then sets e's partitioning to the
 * snapshot's (segd_edge_set_partitions), raises each partition's W to its
 * unit's gc_watermark_ms and adds the retirements. m (initialised here; the
 * caller frees it, whatever the result) receives the fold of the units, from
 * which a tail starts. On failure no W is raised (the records loaded so far
 * stay: drop the table). A unit that a newer export replaces while it is
 * read is loaded again after e dropped every user of its partition
 * (segd_edge_drop_partition), so e then holds exactly the new unit's users
 * there; only when e was empty before the load and joined no delta since,
 * else the load fails with SEGD_ERR_UNSORTED (dropping would lose changes
 * the caller's follower has gone past). */
segd_err_t segd_edge_load_snapshot(segd_edge_t *e, const char *src_url,
                                   const segd_snapshot_read_opts_t *o, segd_manifest_t *m,
                                   char *errstr, size_t errstr_size);

#endif
