/* SegmentEvent as one JSON object (the JSON-lines backfill format), fields as
 * in schemas/segment_event.avsc. Parsing is a trust boundary: every field is
 * type- and range-checked here. */
#ifndef SEGD_JSON_EVENT_H
#define SEGD_JSON_EVENT_H

#include <stddef.h>
#include <stdio.h>

#include "core/event.h"

/* Parses one line into ev (reset first). SEGD_ERR_DECODE + reason on error
 * (SEGD_ERR_LIMIT for a user_id over SEGD_MAX_USER_ID bytes). Strict JSON as
 * jansson with JSON_REJECT_DUPLICATES reads it: UTF-8 checked everywhere,
 * no \u0000, integers within int64, duplicate keys rejected in every object
 * (unknown fields and nested values included), at most 2048 nested values.
 * Unknown fields are skipped. No allocation beyond ev's segment array, except
 * for objects of more than 64 unknown keys. Thread-safe (no shared state). */
segd_err_t segd_json_event_parse(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t errstr_size);

/* The jansson-based parser: the specification segd_json_event_parse is held
 * equal to (accept/reject and the decoded event; messages may differ). */
segd_err_t segd_json_event_parse_reference(const char *line, size_t len, segd_event_t *ev,
                                           char *errstr, size_t errstr_size);

/* Appends ev as one JSON line (with '\n') to f. */
int segd_json_event_write(const segd_event_t *ev, FILE *f);

#endif
