/* Consistent snapshots (DESIGN §6), the writing half: export the store, from
 * one RocksDB snapshot in which data, input offsets, retirement markers and
 * change-topic positions agree, as independent units, one per input
 * partition: DEST/<topic>/p-PPPPP/ holds an Avro container file of the
 * records (SnapshotRecord, or SnapshotNativeRecord with format = native:
 * wire/snap_format.h) of the users partitioner(user, P) routes to partition
 * p plus its manifest.json (wire/manifest.h, naming its records_format); DEST/<topic>/topology.json
 * (wire/topology.h) says what the units share. Destinations: a directory,
 * http(s):// or s3:// (transport/dest.h). Which units and which P:
 * publisher/snapshot_plan.h. Reading and verifying is
 * snapread/snapshot.h. */
#ifndef SEGD_SNAPSHOT_H
#define SEGD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "core/partition.h"
#include "wire/avro_file.h"
#include "wire/change.h"
#include "wire/manifest.h"
#include "wire/snap_format.h"
#include "transport/dest.h"
#include "store/store.h"


typedef struct segd_snapshot_opts {
    const char *topic;          /* the input topic whose partitions the units are;
                                 * NULL = the only topic the store holds offsets for,
                                 * links_topic's aside */
    const char *links_topic;    /* identity.links.topic (DESIGN §10.1): its offsets
                                 * are the graph's, never a unit's; default
                                 * "segments.links" */
    const int32_t *partitions;  /* the units to export (borrowed); NULL = every
                                 * partition of topic the store holds an offset for,
                                 * or all P when it holds none */
    size_t n_partitions;
    int32_t partition_count;    /* P; 0 = decided by segd_snapshot_plan */
    segd_partitioner_t partitioner; /* how producers key users (input.partitioner) */
    uint32_t buckets;           /* P of a store without offsets of topic, default 32 */
    segd_ocf_codec_t codec;     /* default deflate; callers that set format set this
                                 * to segd_snapshot_default_codec(format) unless chosen */
    int level;                  /* the codec's level, default 1 */
    const char *changes_topic;  /* whose recorded positions go to the manifests */
    const char *tmp_dir;        /* staging for remote destinations; default $TMPDIR or /tmp */
    int progress;               /* print a progress line to stderr */
    uint32_t threads;           /* scanning + compressing threads, default 2 */
    segd_dest_opts_t dest;      /* retries, CA */
    segd_snapfmt_t format;      /* every unit's records_format (snapshot.format),
                                 * default avro */
    /* native only: write a stored value that needs no pruning as read
     * instead of re-encoding it (default 1; 0 is for measuring the gain) */
    int native_copy;
    const segd_log_t *log;      /* warnings (files left behind); NULL = default logger */
} segd_snapshot_opts_t;

void segd_snapshot_opts_default(segd_snapshot_opts_t *o);
/* The codec a format is written with unless one is chosen: deflate for avro
 * (every Avro reader has it), null for native (its records are already
 * entropy-coded: deflate-1 saves ~1 % for 2x the export time, bench/RESULTS.md). */
segd_ocf_codec_t segd_snapshot_default_codec(segd_snapfmt_t format);

/* Exports the store at its policy's now into dest_url/<topic>/: for each unit
 * its file under a name of its own (p-PPPPP-<created_at_ms>.avro), then its
 * manifest.json, replacing the previous one in one step, then the previous
 * unit's files are deleted; topology.json after the units when it is absent
 * or differs. Units are independent: a unit that fails (its directory, its
 * upload) leaves its previous manifest (or none) and deletes the files it
 * wrote, while the others land; a failure of the scan lands none. Returns
 * the first error (naming the unit) and says in *failed how many units
 * failed (failed may be NULL). out (initialised here; the caller frees it
 * with segd_manifest_free, whatever the result; may be NULL) receives the
 * fold of the units that landed (wire/manifest.h). */
segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *out,
                                size_t *failed, char *errstr, size_t errstr_size);

#endif
