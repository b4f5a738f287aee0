/* Consistent snapshots (DESIGN §6): export the store, from one RocksDB
 * snapshot in which data, input offsets, retirement markers and change-topic
 * positions agree, as 2^k bucket files (Avro container files of
 * SnapshotRecord) plus manifest.json, to a directory, http(s):// or s3://
 * destination (dest.h); verify one; load one (the edge cache's start).
 *
 * manifest.json (format_version 1):
 *   {"format": "segd-snapshot", "format_version": 1, "created_at_ms": ...,
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
 * gc_watermark_ms (added; 0 when absent) is the store's GC watermark when the
 * scan ended (at least the one it pruned with): a cache raises its own to it
 * (edge.h) and drops dead entries below it only, as the store does (DESIGN
 * §3.1).
 * A cache tails each change-topic partition from its position, and from the
 * beginning for a partition the manifest does not list (nothing of this
 * store was published there before the snapshot). */
#ifndef SEGD_SNAPSHOT_H
#define SEGD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "avro_file.h"
#include "change.h"
#include "dest.h"
#include "store/store.h"

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

typedef struct segd_snapshot_opts {
    uint32_t buckets;          /* power of two, default 32 */
    segd_ocf_codec_t codec;    /* default deflate (every Avro reader has it) */
    int level;                 /* the codec's level, default 1 */
    const char *changes_topic; /* whose recorded positions go to the manifest */
    const char *tmp_dir;       /* staging for remote destinations; default $TMPDIR or /tmp */
    int progress;              /* print a progress line to stderr */
    uint32_t threads;          /* scanning + compressing threads, default 2 */
    segd_dest_opts_t dest;     /* retries, CA */
} segd_snapshot_opts_t;

void segd_snapshot_opts_default(segd_snapshot_opts_t *o);
void segd_manifest_init(segd_manifest_t *m);
void segd_manifest_free(segd_manifest_t *m);

/* Exports the store at its policy's now: bucket files under names of their
 * own (bucket-BBBBB-<created_at_ms>.avro), then manifest.json, replacing the
 * previous one in one step, then the previous snapshot's files are deleted.
 * Readers always find a whole snapshot: the previous one until the new
 * manifest lands. A failure leaves the previous manifest (or none) and
 * deletes the files it wrote. m may be NULL. */
segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *m,
                                char *errstr, size_t errstr_size);

/* Fetches and parses SRC's manifest. */
segd_err_t segd_snapshot_manifest(const char *src_url, const segd_dest_opts_t *dopts,
                                  segd_manifest_t *m, char *errstr, size_t errstr_size);

/* Calls cb for every record of every bucket, after checking each file's size
 * and SHA-256 against the manifest and each bucket's record count; a
 * mismatch is SEGD_ERR_CORRUPT naming the file. cb == NULL only verifies.
 * The profile and user are borrowed for the call; cb returns non-zero to
 * stop (an error: SEGD_ERR_INVALID). */
typedef int (*segd_snapshot_cb)(void *ctx, uint32_t bucket, const char *user,
                                size_t user_len, const segd_profile_t *p);
segd_err_t segd_snapshot_load(const char *src_url, const segd_dest_opts_t *dopts,
                              const segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

/* segd_snapshot_manifest + segd_snapshot_load, starting over (up to 3
 * times) when a file went missing or changed because a newer snapshot
 * replaced the one being read. m receives the manifest that loaded. */
segd_err_t segd_snapshot_read(const char *src_url, const segd_dest_opts_t *dopts,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

#endif
