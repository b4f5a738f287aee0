/* The fast JSON parser's scanner (json_scan.c): strings, numbers and
 * literals, and the failures every part of the parser reports through it.
 * Private to wire/'s json_*.c, as json_int.h is; other folders use
 * json_event.h. */
#ifndef SEGD_JSON_SCAN_H
#define SEGD_JSON_SCAN_H

#include "wire/json_int.h"

/* Each returns 0, or -1 with the first failure's code and message kept
 * in j. */
int segd_jp_fail(jp_t *j, segd_err_t code, const char *fmt, const char *arg);
int segd_jp_syntax(jp_t *j, const char *what);
int segd_jp_string(jp_t *j, jp_out_t *o);
int segd_jp_number(jp_t *j, int *is_int, long long *v);
int segd_jp_literal(jp_t *j);

/* Counts one more nested value against jansson's depth limit. */
static inline int segd_jp_enter(jp_t *j)
{
    if (++j->depth > JP_MAX_DEPTH)
        return segd_jp_syntax(j, "maximum parsing depth reached");
    return 0;
}

#endif
