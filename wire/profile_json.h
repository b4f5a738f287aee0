/* The JSON shape of a user's live segments, one shape for every face that
 * prints them (`segd get --json`, the cache's HTTP API):
 *   [{"id", "expires_at", "ts_ms", "flags", "partner_id"}, ...] */
#ifndef SEGD_PROFILE_JSON_H
#define SEGD_PROFILE_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "core/record.h"

/* A new JSON array (owned by the caller, json_decref) of e[0..n). */
json_t *segd_entries_json(const segd_entry_t *e, size_t n);

#endif
