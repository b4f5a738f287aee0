/* The snapshot record formats (config snapshot.format, DESIGN §6): "avro",
 * one SnapshotRecord per user with an Avro record per entry, portable to any
 * Avro tool (change.h); and "native", SnapshotNativeRecord carrying the
 * store's own record bytes (snap_native.h). One place maps a format to its
 * name (the unit manifest's records_format), its schema and its record decoder,
 * so exporters and every reader choose by the manifest alone. */
#ifndef SEGD_SNAP_FORMAT_H
#define SEGD_SNAP_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/profile.h"

typedef enum segd_snapfmt { SEGD_SNAPFMT_AVRO = 0, SEGD_SNAPFMT_NATIVE = 1 } segd_snapfmt_t;

/* "avro" | "native" (static). */
const char *segd_snapfmt_name(segd_snapfmt_t f);
/* 0 and *out for "avro" or "native"; -1 for anything else. */
int segd_snapfmt_parse(const char *name, segd_snapfmt_t *out);
/* The bucket files' writer schema (static JSON text, as in schemas/). */
const char *segd_snapfmt_schema_json(segd_snapfmt_t f);
/* The format whose schema a container file declares (its avro.schema text,
 * as segd writes it): 0, or -1 for a schema segd does not write. */
int segd_snapfmt_of_schema(const char *schema_json, segd_snapfmt_t *out);

/* Decodes one record of format f at *pos (advanced past it, < end) as
 * segd_snaprec_decode does. On SEGD_ERR_CORRUPT *user is non-NULL when the
 * user id itself was readable (native: the record bytes are damaged). */
segd_err_t segd_snapfmt_decode(segd_snapfmt_t f, const uint8_t **pos, const uint8_t *end,
                               const char **user, size_t *user_len, segd_profile_t *p);

#endif
