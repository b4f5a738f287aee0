/* Consistent snapshots (DESIGN §6), the writing half: export the store,
 * from one RocksDB snapshot in which data, input offsets, retirement markers
 * and change-topic positions agree, as 2^k bucket files (Avro container
 * files of SnapshotRecord) plus manifest.json (wire/manifest.h), to a
 * directory, http(s):// or s3:// destination (transport/dest.h). Reading
 * and verifying is cache/snapshot_read.h. */
#ifndef SEGD_SNAPSHOT_H
#define SEGD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "wire/avro_file.h"
#include "wire/change.h"
#include "wire/manifest.h"
#include "wire/snap_format.h"
#include "transport/dest.h"
#include "store/store.h"


typedef struct segd_snapshot_opts {
    uint32_t buckets;          /* power of two, default 32 */
    segd_ocf_codec_t codec;    /* default deflate; callers that set format set this
                                * to segd_snapshot_default_codec(format) unless chosen */
    int level;                 /* the codec's level, default 1 */
    const char *changes_topic; /* whose recorded positions go to the manifest */
    const char *tmp_dir;       /* staging for remote destinations; default $TMPDIR or /tmp */
    int progress;              /* print a progress line to stderr */
    uint32_t threads;          /* scanning + compressing threads, default 2 */
    segd_dest_opts_t dest;     /* retries, CA */
    segd_snapfmt_t format;     /* record format (snapshot.format), default avro */
    /* native only: write a stored value that needs no pruning as read
     * instead of re-encoding it (default 1; 0 is for measuring the gain) */
    int native_copy;
} segd_snapshot_opts_t;

void segd_snapshot_opts_default(segd_snapshot_opts_t *o);
/* The codec a format is written with unless one is chosen: deflate for avro
 * (every Avro reader has it), null for native (its records are already
 * entropy-coded: deflate-1 saves ~1 % for 2x the export time, bench/RESULTS.md). */
segd_ocf_codec_t segd_snapshot_default_codec(segd_snapfmt_t format);

/* Exports the store at its policy's now: bucket files under names of their
 * own (bucket-BBBBB-<created_at_ms>.avro), then manifest.json, replacing the
 * previous one in one step, then the previous snapshot's files are deleted.
 * Readers always find a whole snapshot: the previous one until the new
 * manifest lands. A failure leaves the previous manifest (or none) and
 * deletes the files it wrote. m may be NULL. */
segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *m,
                                char *errstr, size_t errstr_size);

#endif
