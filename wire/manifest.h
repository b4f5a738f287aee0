/* The snapshot manifest (DESIGN §6): what a snapshot holds and where a
 * reader tails from, in memory and as manifest.json. Written last by an
 * export (publisher/snapshot.c), read first by a loader (cache/).
 *
 * manifest.json (format_version 1, or 2 with record_format "native"):
 *   {"format": "segd-snapshot", "format_version": 1, "record_format": "avro",
 *    "created_at_ms": ...,
 *    "now_ms": ...,  "horizon_ms": ..., "gc_watermark_ms": W, "buckets": 32,
 *    "bucket_hash": "xxh64(user_id, seed 0) & (buckets - 1)",
 *    "codec": "deflate" | "zstandard", "schema_fingerprint": "<hex CRC-64-AVRO>",
 *    "records": N, "segments": M,
 *    "files": [{"bucket": 0, "name": "bucket-00000-<created_at_ms>.avro", "records": n,
 *               "segments": m, "bytes": b, "sha256": "<hex>"}, ...],
 *    "input_offsets": [{"topic": t, "partition": p, "next_offset": o}, ...],
 *    "retirements": [{"segment_id": s, "retired_before_ms": ms}, ...],
 *    "changes": {"topic": "segments.changes",
 *                "positions": [{"partition": p, "offset": o}, ...]}}
 * record_format (added by issue 11; "avro" when absent) names the bucket
 * files' record schema (wire/snap_format.h): "avro" (SnapshotRecord) or
 * "native" (SnapshotNativeRecord); schema_fingerprint is that schema's. A
 * native manifest says format_version 2, so that readers older than the
 * native format refuse it as an unsupported version instead of failing on
 * every record; an unknown record_format is refused by name.
 * gc_watermark_ms (added; 0 when absent) is the store's GC watermark when the
 * scan ended (at least the one it pruned with): a cache raises its own to it
 * (edge.h) and drops dead entries below it only, as the store does (DESIGN
 * §3.1).
 * A cache tails each change-topic partition from its position, and from the
 * beginning for a partition the manifest does not list (nothing of this
 * store was published there before the snapshot). */
#ifndef SEGD_MANIFEST_H
#define SEGD_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "wire/change.h"
#include "wire/snap_format.h"

#define SEGD_MANIFEST_NAME "manifest.json"

typedef struct segd_snapshot_file {
    char name[64];
    uint32_t bucket;
    uint64_t records, segments, bytes;
    char sha256[65];
} segd_snapshot_file_t;

typedef struct segd_topic_offset {
    char *topic; /* owned; NULL for change positions (one topic) */
    int32_t partition;
    int64_t offset;
} segd_topic_offset_t;

typedef struct segd_manifest {
    int64_t created_at_ms, now_ms, horizon_ms;
    int64_t gc_watermark_ms; /* DESIGN §3.1's W after the scan; 0 = none */
    segd_snapfmt_t format;   /* the bucket files' record format */
    uint32_t buckets;
    uint64_t records, segments;
    segd_snapshot_file_t *files;
    size_t n_files;
    segd_topic_offset_t *inputs; /* input offsets: next offset to apply */
    size_t n_inputs;
    segd_retirement_t *retirements;
    size_t n_retirements;
    char *changes_topic;            /* owned; NULL when none was recorded */
    segd_topic_offset_t *changes;   /* change-topic positions to tail from */
    size_t n_changes;
} segd_manifest_t;

void segd_manifest_init(segd_manifest_t *m);
void segd_manifest_free(segd_manifest_t *m);

/* Appenders (ctx = the manifest), shaped as the store view's callbacks;
 * return non-zero when out of memory. add_change keeps only positions of
 * m->changes_topic. */
int segd_manifest_add_input(void *ctx, const char *topic, int32_t partition, int64_t next);
int segd_manifest_add_change(void *ctx, const char *topic, int32_t partition, int64_t next);
int segd_manifest_add_retirement(void *ctx, int64_t segment_id, int64_t before_ms);

/* manifest.json's text for m (codec = the bucket files' codec name);
 * malloc'd, NULL when out of memory. */
char *segd_manifest_dump(const segd_manifest_t *m, const char *codec);
/* Parses untrusted manifest text into m (initialised, empty); SEGD_ERR_CORRUPT
 * with a reason for anything malformed. */
segd_err_t segd_manifest_parse(const char *text, size_t len, segd_manifest_t *m,
                               char *errstr, size_t errstr_size);

#endif
