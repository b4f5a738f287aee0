/* Parsing a point in time given on the command line (segd replay's
 * --from-time / --to-time): Unix milliseconds or an RFC 3339 date-time with
 * a zone. Strict: an impossible date (February 31), a malformed zone or a
 * number out of range is refused, never normalised into another time. */
#ifndef SEGD_TIMEPARSE_H
#define SEGD_TIMEPARSE_H

#include <stdint.h>

/* Parses s into Unix milliseconds (>= 0). Accepted:
 *   digits only                  Unix milliseconds
 *   YYYY-MM-DDTHH:MM:SS[.f...]Z  T and Z in either case; a fraction of any
 *                                length, truncated to milliseconds
 *   ... +hh:mm, +hhmm, +hh       or '-': a zone offset instead of Z
 * Returns 0, or -1 if s is none of these. *looks_like_s (may be NULL) is
 * set when s was a bare number below 10^11 ms (before 1973): likely Unix
 * seconds given by mistake, which the caller should warn about. */
int segd_time_parse_ms(const char *s, int64_t *out, int *looks_like_s);

#endif
