/* The RESP command layer's internals, shared by cache/'s resp_*.c command
 * modules: the handler type, the reply encoders and the argument checks.
 * The encoders are static inline because every reply item goes through
 * them on the serving path, and a call across files would not be inlined.
 * resp_cmd.c holds the table and dispatch, resp_zset.c the sorted-set
 * reads, resp_server.c the connection and server commands. */
#ifndef SEGD_RESP_CMD_INT_H
#define SEGD_RESP_CMD_INT_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache/resp_cmd.h"

/* The Redis version whose command set and replies this front follows
 * (HELLO, INFO): 7.0, the Debian 12 redis-server it is tested against. */
#define REDIS_COMPAT_VERSION "7.0.15"

enum { RC_NOMEM = -1, RC_OK = 0, RC_ERR = 1, RC_QUIT = 2 };

typedef int (*handler_t)(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

/* ---- reply encoding ---------------------------------------------------- */

static inline int resp_add(segd_buf_t *out, const void *s, size_t n)
{
    return segd_buf_append(out, s, n) ? RC_NOMEM : RC_OK;
}

static inline int resp_add_str(segd_buf_t *out, const char *s)
{
    return resp_add(out, s, strlen(s));
}

/* Decimal digits of v into end-backwards; returns the start. */
static inline char *resp_fmt_u64(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static inline size_t resp_fmt_i64(char *dst, int64_t v)
{
    char tmp[24], *e = tmp + sizeof(tmp);
    char *s = resp_fmt_u64(e, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    if (v < 0)
        *--s = '-';
    memcpy(dst, s, (size_t)(e - s));
    return (size_t)(e - s);
}

/* A score as Redis 7.0 prints a double in RESP2 ("%.17g"); integers below
 * 1e17 print the same digits, without the cost of snprintf. */
static inline size_t resp_fmt_score(char *dst, double d)
{
    if (isinf(d)) {
        memcpy(dst, d > 0 ? "inf" : "-inf", d > 0 ? 3 : 4);
        return d > 0 ? 3 : 4;
    }
    if (fabs(d) < 1e17 && d == (double)(int64_t)d && !(d == 0 && signbit(d)))
        return resp_fmt_i64(dst, (int64_t)d);
    return (size_t)snprintf(dst, 32, "%.17g", d);
}

static inline int resp_add_prefixed(segd_buf_t *out, char type, int64_t v)
{
    char b[32];
    b[0] = type;
    size_t n = 1 + resp_fmt_i64(b + 1, v);
    b[n++] = '\r';
    b[n++] = '\n';
    return resp_add(out, b, n);
}

static inline int resp_add_int(segd_buf_t *out, int64_t v)
{
    return resp_add_prefixed(out, ':', v);
}
static inline int resp_add_array(segd_buf_t *out, int64_t n)
{
    return resp_add_prefixed(out, '*', n);
}

static inline int resp_add_bulk(segd_buf_t *out, const char *s, size_t n)
{
    if (resp_add_prefixed(out, '$', (int64_t)n) || resp_add(out, s, n) || resp_add(out, "\r\n", 2))
        return RC_NOMEM;
    return RC_OK;
}

static inline int resp_add_bulk_str(segd_buf_t *out, const char *s)
{
    return resp_add_bulk(out, s, strlen(s));
}

static inline int resp_add_nil(segd_buf_t *out) { return resp_add(out, "$-1\r\n", 5); }

static inline int resp_add_double(segd_buf_t *out, double d)
{
    char b[40];
    return resp_add_bulk(out, b, resp_fmt_score(b, d));
}

/* "-<text>\r\n" with CR/LF made blanks; RC_ERR (an error reply) or RC_NOMEM. */
static inline int resp_add_err_raw(segd_buf_t *out, const char *text)
{
    size_t n = strlen(text);
    if (segd_buf_reserve(out, n + 3))
        return RC_NOMEM;
    uint8_t *p = out->data + out->len;
    *p++ = '-';
    for (size_t i = 0; i < n; i++)
        *p++ = text[i] == '\r' || text[i] == '\n' ? ' ' : (uint8_t)text[i];
    *p++ = '\r';
    *p++ = '\n';
    out->len += n + 3;
    return RC_ERR;
}

__attribute__((format(printf, 2, 3))) static inline int add_err(segd_buf_t *out, const char *fmt,
                                                                ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return resp_add_err_raw(out, text);
}


/* ---- arguments ----------------------------------------------------------- */

static inline int resp_arg_is(const segd_resp_cmd_t *cmd, size_t i, const char *word)
{
    size_t n = strlen(word);
    return cmd->argl[i] == n && !strncasecmp(cmd->argv[i], word, n);
}

/* Redis's string2ll: the integers getLongLongFromObject accepts. */
static inline int resp_arg_ll(const segd_resp_cmd_t *cmd, size_t i, long long *v)
{
    const char *s = cmd->argv[i];
    size_t n = cmd->argl[i];
    int neg = n > 0 && s[0] == '-';
    size_t k = neg ? 1 : 0;
    if (k == n || n - k > 19 || (s[k] == '0' && (neg || n - k > 1))) /* "-0" too */
        return -1;
    uint64_t u = 0;
    for (; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return -1;
        u = u * 10 + (uint64_t)(s[k] - '0'); /* 19 digits cannot wrap */
    }
    if (u > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
        return -1;
    *v = neg ? (long long)(0 - u) : (long long)u;
    return 0;
}

static inline int resp_not_integer(segd_buf_t *out)
{
    return resp_add_err_raw(out, "ERR value is not an integer or out of range");
}

typedef struct resp_range {
    double min, max;
    int minex, maxex;
} resp_range_t;

/* One bound as Redis's zslParseRange reads it: strtod over the argument
 * up to its first NUL, "(" for exclusive, NaN refused. */
static inline int resp_parse_bound(const char *s, size_t n, double *v, int *ex)
{
    char small[128], *copy = n < sizeof(small) ? small : malloc(n + 1);
    if (!copy)
        return -1;
    memcpy(copy, s, n);
    copy[n] = 0;
    const char *p = copy;
    *ex = p[0] == '(';
    p += *ex;
    char *end;
    *v = strtod(p, &end);
    int bad = *end != 0 || isnan(*v);
    if (copy != small)
        free(copy);
    return bad ? -1 : 0;
}

static inline int resp_parse_range(const segd_resp_cmd_t *cmd, size_t imin, size_t imax,
                                   resp_range_t *r)
{
    return resp_parse_bound(cmd->argv[imin], cmd->argl[imin], &r->min, &r->minex) ||
                   resp_parse_bound(cmd->argv[imax], cmd->argl[imax], &r->max, &r->maxex)
               ? -1
               : 0;
}

static inline int resp_in_range(const resp_range_t *r, double v)
{
    return (r->minex ? v > r->min : v >= r->min) && (r->maxex ? v < r->max : v <= r->max);
}

/* The commands, for resp_cmd.c's table: each appends its reply to out and
 * returns RC_OK, RC_ERR (an error reply), RC_QUIT or RC_NOMEM. */
int segd_resp_cmd_zrange(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_zrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                                const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_zrevrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                                   const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_zrevrange(segd_resp_worker_t *w, segd_resp_client_t *c,
                            const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_zcount(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_zcard(segd_resp_worker_t *w, segd_resp_client_t *c,
                        const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_zscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_exists(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_ping(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_echo(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_quit(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_select(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_auth(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_hello(segd_resp_worker_t *w, segd_resp_client_t *c,
                        const segd_resp_cmd_t *cmd, segd_buf_t *out);
int segd_resp_cmd_client(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

int segd_resp_cmd_info(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out);

#endif
