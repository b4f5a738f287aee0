/* A snapshot's topology (DESIGN §6): DEST/<topic>/topology.json, what the
 * units under it have in common, so that a reader knows which units to load
 * and a unit can be checked against it. Written by exports after their units
 * (publisher/snapshot.c, rewritten only when it changes), read first by
 * readers (snapread/).
 *
 * topology.json (format_version 1):
 *   {"format": "segd-snapshot-topology", "format_version": 1, "topic": t,
 *    "partitions": P, "partitioner": "murmur2_random",
 *    "records_format": "avro" | "native",
 *    "schema_fingerprint": "<hex CRC-64-AVRO of that records_format's schema>",
 *    "units": "p-PPPPP/manifest.json"}
 * A reader expects the P units p-00000 .. p-(P-1), each with a manifest of
 * the same topic, P and partitioner. records_format is the format of the
 * export that wrote the topology last (a hint for tools); each unit's
 * manifest says its own, which readers go by (wire/manifest.h). */
#ifndef SEGD_TOPOLOGY_H
#define SEGD_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/partition.h"
#include "wire/snap_format.h"

#define SEGD_TOPOLOGY_NAME "topology.json"

typedef struct segd_topology {
    char topic[256];
    int32_t partitions;
    segd_partitioner_t partitioner;
    segd_snapfmt_t records_format; /* the last export's; units say their own */
} segd_topology_t;

/* topology.json's text for t; malloc'd, NULL when out of memory. */
char *segd_topology_dump(const segd_topology_t *t);

/* Parses untrusted text into t; SEGD_ERR_CORRUPT with a reason for anything
 * malformed, another format version, or a records_format (or its schema)
 * this segd does not write. */
segd_err_t segd_topology_parse(const char *text, size_t len, segd_topology_t *t,
                               char *errstr, size_t errstr_size);

#endif
