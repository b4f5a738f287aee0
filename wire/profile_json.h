/* The JSON shape of a user's live segments, one shape for every face that
 * prints them (`segd get --json`, the cache's HTTP API):
 *   [{"id", "expires_at", "ts_ms", "flags", "partner_id"}, ...] */
#ifndef SEGD_PROFILE_JSON_H
#define SEGD_PROFILE_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "core/profile.h"

/* A new JSON array (owned by the caller, json_decref) of e[0..n). */
json_t *segd_entries_json(const segd_entry_t *e, size_t n);

/* The same array as text, appended to out, byte for byte what
 * json_dumps(segd_entries_json(e, n), JSON_COMPACT | JSON_PRESERVE_ORDER)
 * prints. It builds no JSON value per field: the HTTP API answers
 * 1000-segment users with it, and jansson's allocations were most of a
 * request's CPU. */
segd_err_t segd_entries_json_text(segd_buf_t *out, const segd_entry_t *e, size_t n);
/* Appends s[0..len) as a JSON string literal, quotes included, escaped as
 * jansson escapes by default: '"', '\\' and control characters. Other
 * bytes are copied as they are, since the caller passes strict UTF-8. */
segd_err_t segd_json_string_text(segd_buf_t *out, const char *s, size_t len);

#endif
