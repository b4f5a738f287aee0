/* SegmentEvent as one JSON object (the JSON-lines backfill format), fields as
 * in schemas/segment_event.avsc. Parsing is a trust boundary: every field is
 * type- and range-checked here. */
#ifndef SEGD_JSON_EVENT_H
#define SEGD_JSON_EVENT_H

#include <stddef.h>
#include <stdio.h>

#include "core/event.h"

/* Parses one line into ev (reset first). SEGD_ERR_DECODE + reason on error. */
segd_err_t segd_json_event_parse(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t errstr_size);

/* Appends ev as one JSON line (with '\n') to f. */
int segd_json_event_write(const segd_event_t *ev, FILE *f);

#endif
