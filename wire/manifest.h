/* A snapshot unit's manifest (DESIGN §6): what one unit (the state of the
 * users of one input partition) holds and where a reader tails from, in
 * memory and as manifest.json. Written last by an export
 * (publisher/snapshot.c) under DEST/<topic>/p-PPPPP/, read first by a
 * loader (snapread/unit.c), which also folds the units it loaded into
 * one manifest of the same type (partition = -1, units = their number).
 *
 * manifest.json (format_version 2):
 *   {"format": "segd-snapshot-unit", "format_version": 2,
 *    "topic": t, "partition": p, "partitions": P, "partitioner": "murmur2_random",
 *    "records_format": "avro" | "native", "codec": "deflate" | "zstandard" | "null",
 *    "schema_fingerprint": "<hex CRC-64-AVRO of the records_format's schema>",
 *    "created_at_ms": ..., "now_ms": ..., "horizon_ms": ..., "gc_watermark_ms": W,
 *    "records": N, "segments": M,
 *    "files": [{"name": "p-PPPPP-<created_at_ms>.avro", "records": n,
 *               "segments": m, "bytes": b, "sha256": "<hex>"}, ...],
 *    "input_offsets": [{"topic": t, "partition": p, "next_offset": o}],
 *    "retirements": [{"segment_id": s, "retired_before_ms": ms}, ...],
 *                   (a partner's: {"partner_id": p, "retired_before_ms": ms})
 *    "changes": {"topic": "segments.changes",
 *                "positions": [{"partition": c, "offset": o}, ...]},
 *    "members": {"name": "members-PPPPP-<created_at_ms>.avro", "records": n,
 *                "bytes": b, "sha256": "<hex>", "epoch_ms": e}}
 * "members" (DESIGN §10.6) is present when the store's identity graph has
 * ids of the unit's partition: a file of MemberEvent records
 * (member_event.avsc), one per id. Readers that predate it ignore it.
 * Every record of the unit's files has partitioner(user_id, P) == p.
 * input_offsets holds the store's offset of (t, p) when it has one (none for
 * a store filled by backfill). "changes" lists every change-topic position
 * the store held, not only those of partition p: a reader takes, per change
 * partition, the minimum over the units it loaded (a unit not listing a
 * change partition needs it from offset 0), which is conservative and
 * harmless (§3) and exact for one instance even when a producer misrouted
 * users. gc_watermark_ms is the store's W when the scan ended (§3.1).
 * "records_format" names the files' record schema (wire/snap_format.h):
 * "avro" (SnapshotRecord) or "native" (SnapshotNativeRecord, the store's own
 * record bytes, docs/record-format.md); schema_fingerprint is that schema's.
 * Every unit says its own: one export writes all its units in one format,
 * but units of one topic may differ (exports with another snapshot.format,
 * a fleet changing format), and readers decode each unit by its manifest.
 * A reader refuses a records_format it does not know, by name. */
#ifndef SEGD_MANIFEST_H
#define SEGD_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/partition.h"
#include "wire/change.h"
#include "wire/snap_format.h"

#define SEGD_MANIFEST_NAME "manifest.json"

typedef struct segd_snapshot_file {
    char name[64];
    int32_t partition; /* the unit the file belongs to */
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
    char *topic;             /* owned: the input topic the units partition */
    int32_t partition;       /* this unit; -1 in a manifest folded from units */
    int32_t partitions;      /* P: the topic's partition count */
    segd_partitioner_t partitioner;
    uint32_t units;          /* units folded in (1 for a unit's own manifest) */
    segd_snapfmt_t records_format; /* the files' records (a fold: its first unit's) */
    int records_mixed;       /* a fold of units of different records_format */
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
    /* A unit's identity members file (its segments field is 0). Not
     * folded: a loader reads each unit's own before folding it. */
    int has_members;
    segd_snapshot_file_t members;
    int64_t identity_epoch_ms; /* the exporting store's identity epoch (DESIGN §10.6),
                                * "members": {"epoch_ms"}; 0 = none */
} segd_manifest_t;

void segd_manifest_init(segd_manifest_t *m);
void segd_manifest_free(segd_manifest_t *m);

/* Appenders (ctx = the manifest), shaped as the store view's callbacks;
 * return non-zero when out of memory. add_change keeps only positions of
 * m->changes_topic. */
int segd_manifest_add_input(void *ctx, const char *topic, int32_t partition, int64_t next);
int segd_manifest_add_change(void *ctx, const char *topic, int32_t partition, int64_t next);
int segd_manifest_add_retirement(void *ctx, int64_t segment_id, int64_t before_ms);

/* The unit directory's name: "p-" + 5-digit zero-padded partition. */
void segd_unit_dir_name(char *out, size_t cap, int32_t partition);

/* Folds a unit's manifest into a reader's. into starts initialised and
 * empty, or already holds the units folded so far. Records, segments and
 * files are summed. Per change partition the minimum position is kept, and
 * a partition that some unit does not list is dropped, so it is read from
 * the beginning. Retirements are joined, the later marker winning.
 * gc_watermark_ms becomes the smallest, because a cache may drop and skip
 * only what every unit's store had passed. created_at_ms becomes the
 * oldest. records_format stays the first unit's, and records_mixed is set
 * when another unit's differs; each unit is still read by its own. On
 * SEGD_ERR_NOMEM, or SEGD_ERR_CORRUPT for units of different topics,
 * partition counts or partitioners, into is left partly folded. */
segd_err_t segd_manifest_fold(segd_manifest_t *into, const segd_manifest_t *unit,
                              char *errstr, size_t errstr_size);

/* manifest.json's text for m (codec = the unit files' codec name);
 * malloc'd, NULL when out of memory. */
char *segd_manifest_dump(const segd_manifest_t *m, const char *codec);
/* Parses untrusted manifest text into m (initialised, empty); SEGD_ERR_CORRUPT
 * with a reason for anything malformed. */
segd_err_t segd_manifest_parse(const char *text, size_t len, segd_manifest_t *m,
                               char *errstr, size_t errstr_size);

#endif
