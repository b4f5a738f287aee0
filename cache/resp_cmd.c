/* The Redis-protocol front's commands (cache/resp_cmd.h): the command
 * table, Redis's argument checks and error texts, the sorted-set reads over
 * the edge cache's live entries, and the RESP2 reply encoding. */
#include "cache/resp_cmd.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/clock.h"

/* The Redis version whose command set and replies this front follows
 * (HELLO, INFO): 7.0, the Debian 12 redis-server it is tested against. */
#define REDIS_COMPAT_VERSION "7.0.15"

enum { RC_NOMEM = -1, RC_OK = 0, RC_ERR = 1, RC_QUIT = 2 };

typedef int (*handler_t)(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out);

typedef struct cmd_def {
    const char *name; /* lowercase, as Redis names it in errors */
    int arity;        /* Redis's: n exact, -n at least n */
    int data;         /* reads the cache: -LOADING until it serves */
    handler_t fn;
    const char *flags; /* COMMAND's flags and ACL categories, blank-separated */
    const char *acl;
    int first_key, last_key, step;
} cmd_def_t;

/* ---- reply encoding ---------------------------------------------------- */

static int add(segd_buf_t *out, const void *s, size_t n)
{
    return segd_buf_append(out, s, n) ? RC_NOMEM : RC_OK;
}

static int add_str(segd_buf_t *out, const char *s) { return add(out, s, strlen(s)); }

/* Decimal digits of v into end-backwards; returns the start. */
static char *fmt_u64(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static size_t fmt_i64(char *dst, int64_t v)
{
    char tmp[24], *e = tmp + sizeof(tmp);
    char *s = fmt_u64(e, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    if (v < 0)
        *--s = '-';
    memcpy(dst, s, (size_t)(e - s));
    return (size_t)(e - s);
}

/* A score as Redis 7.0 prints a double in RESP2 ("%.17g"); integers below
 * 1e17 print the same digits, without the cost of snprintf. */
static size_t fmt_score(char *dst, double d)
{
    if (isinf(d)) {
        memcpy(dst, d > 0 ? "inf" : "-inf", d > 0 ? 3 : 4);
        return d > 0 ? 3 : 4;
    }
    if (fabs(d) < 1e17 && d == (double)(int64_t)d && !(d == 0 && signbit(d)))
        return fmt_i64(dst, (int64_t)d);
    return (size_t)snprintf(dst, 32, "%.17g", d);
}

static int add_prefixed(segd_buf_t *out, char type, int64_t v)
{
    char b[32];
    b[0] = type;
    size_t n = 1 + fmt_i64(b + 1, v);
    b[n++] = '\r';
    b[n++] = '\n';
    return add(out, b, n);
}

static int add_int(segd_buf_t *out, int64_t v) { return add_prefixed(out, ':', v); }
static int add_array(segd_buf_t *out, int64_t n) { return add_prefixed(out, '*', n); }

static int add_bulk(segd_buf_t *out, const char *s, size_t n)
{
    if (add_prefixed(out, '$', (int64_t)n) || add(out, s, n) || add(out, "\r\n", 2))
        return RC_NOMEM;
    return RC_OK;
}

static int add_bulk_str(segd_buf_t *out, const char *s) { return add_bulk(out, s, strlen(s)); }

static int add_nil(segd_buf_t *out) { return add(out, "$-1\r\n", 5); }

static int add_double(segd_buf_t *out, double d)
{
    char b[40];
    return add_bulk(out, b, fmt_score(b, d));
}

/* "-<text>\r\n" with CR/LF made blanks; RC_ERR (an error reply) or RC_NOMEM. */
static int add_err_raw(segd_buf_t *out, const char *text)
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

__attribute__((format(printf, 2, 3))) static int add_err(segd_buf_t *out, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return add_err_raw(out, text);
}

segd_err_t segd_resp_error(segd_buf_t *out, const char *msg)
{
    char text[512];
    snprintf(text, sizeof(text), "ERR %s", msg);
    return add_err_raw(out, text) == RC_NOMEM ? SEGD_ERR_NOMEM : SEGD_OK;
}

/* ---- arguments ----------------------------------------------------------- */

static int arg_is(const segd_resp_cmd_t *cmd, size_t i, const char *word)
{
    size_t n = strlen(word);
    return cmd->argl[i] == n && !strncasecmp(cmd->argv[i], word, n);
}

/* Redis's string2ll: the integers getLongLongFromObject accepts. */
static int arg_ll(const segd_resp_cmd_t *cmd, size_t i, long long *v)
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

static int not_integer(segd_buf_t *out)
{
    return add_err_raw(out, "ERR value is not an integer or out of range");
}

typedef struct range {
    double min, max;
    int minex, maxex;
} range_t;

/* One bound as Redis's zslParseRange reads it: strtod over the argument
 * up to its first NUL, "(" for exclusive, NaN refused. */
static int parse_bound(const char *s, size_t n, double *v, int *ex)
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

static int parse_range(const segd_resp_cmd_t *cmd, size_t imin, size_t imax, range_t *r)
{
    return parse_bound(cmd->argv[imin], cmd->argl[imin], &r->min, &r->minex) ||
                   parse_bound(cmd->argv[imax], cmd->argl[imax], &r->max, &r->maxex)
               ? -1
               : 0;
}

static int in_range(const range_t *r, double v)
{
    return (r->minex ? v > r->min : v >= r->min) && (r->maxex ? v < r->max : v <= r->max);
}

/* ---- the user's live entries -------------------------------------------- */

/* Copies the live entries of key into w->ents and sets *n to their number,
 * 0 for a missing key. Unless st is NULL it also receives their stamp,
 * which the reply cache uses as part of its key. */
static int lookup_stamped(segd_resp_worker_t *w, const segd_resp_cmd_t *cmd, size_t i,
                          size_t *n, segd_edge_stamp_t *st)
{
    for (;;) {
        segd_err_t e = segd_edge_lookup_stamped(w->shared->edge, cmd->argv[i], cmd->argl[i],
                                                w->ents, w->ents_cap, n, st);
        if (e == SEGD_OK)
            return RC_OK;
        if (e != SEGD_ERR_LIMIT)
            return RC_NOMEM;
        segd_entry_t *g = segd_array_grow(w->ents, &w->ents_cap, *n, sizeof(*g));
        if (!g)
            return RC_NOMEM;
        w->ents = g;
    }
}

static int lookup(segd_resp_worker_t *w, const segd_resp_cmd_t *cmd, size_t i, size_t *n)
{
    return lookup_stamped(w, cmd, i, n, NULL);
}

/* Fills w->sort.order[0..*n) with the entries whose score is in r (all of
 * them when r is NULL), in Redis's order. The answer depends on these
 * entries alone, so it stays right until the first of them expires, which
 * is what w->until_s records (INT64_MAX if none). Entries outside r that
 * leave the live set do not change it. */
static int collect_sorted(segd_resp_worker_t *w, size_t nents, const range_t *r, size_t *n)
{
    if (segd_resp_order_reserve(&w->sort, nents))
        return RC_NOMEM;
    size_t k = 0;
    int64_t until = INT64_MAX;
    for (size_t i = 0; i < nents; i++)
        if (!r || in_range(r, (double)w->ents[i].expiry_s)) {
            w->sort.order[k++] = (uint32_t)i;
            until = w->ents[i].expiry_s < until ? w->ents[i].expiry_s : until;
        }
    w->until_s = until;
    segd_resp_order_sort(&w->sort, w->ents, k);
    *n = k;
    return RC_OK;
}

static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324"
                                     "25262728293031323334353637383940414243444546474849"
                                     "50515253545556575859606162636465666768697071727374"
                                     "75767778798081828384858687888990919293949596979899";

/* "$<len>\r\n<v>\r\n" for v >= 0 at p; returns the end. */
static char *put_bulk_u64(char *p, uint64_t v)
{
    char b[24], *e = b + sizeof(b), *s = e;
    while (v >= 100) {
        s -= 2;
        memcpy(s, digit_pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        s -= 2;
        memcpy(s, digit_pairs + 2 * v, 2);
    } else {
        *--s = (char)('0' + v);
    }
    size_t n = (size_t)(e - s);
    *p++ = '$';
    if (n >= 10) /* at most 20 digits */
        *p++ = (char)('0' + n / 10);
    *p++ = (char)('0' + n % 10);
    memcpy(p, "\r\n", 2);
    memcpy(p + 2, s, (size_t)(e - s));
    p += 2 + (e - s);
    memcpy(p, "\r\n", 2);
    return p + 2;
}

/* Scores come in ascending order and mostly share their leading digits
 * (expiries within weeks): the digits above the last six are formatted
 * once per change. */
typedef struct score_cache {
    uint64_t high;
    int valid;
    size_t n;
    char digits[24];
} score_cache_t;

static char *put_bulk_score(char *p, double d, score_cache_t *c)
{
    if (d >= 1e6 && d < 1e17 && d == (double)(uint64_t)d) {
        uint64_t v = (uint64_t)d, h = v / 1000000, l = v % 1000000;
        if (!c->valid || c->high != h) {
            char *e = c->digits + sizeof(c->digits), *s = fmt_u64(e, h);
            c->n = (size_t)(e - s);
            memmove(c->digits, s, c->n);
            c->high = h;
            c->valid = 1;
        }
        size_t len = c->n + 6;
        *p++ = '$';
        if (len >= 10)
            *p++ = (char)('0' + len / 10);
        *p++ = (char)('0' + len % 10);
        memcpy(p, "\r\n", 2);
        memcpy(p + 2, c->digits, c->n);
        p += 2 + c->n;
        memcpy(p, digit_pairs + 2 * (l / 10000), 2);
        memcpy(p + 2, digit_pairs + 2 * (l / 100 % 100), 2);
        memcpy(p + 4, digit_pairs + 2 * (l % 100), 2);
        memcpy(p + 6, "\r\n", 2);
        return p + 8;
    }
    if (d >= 0 && d < 1e6 && d == (double)(uint64_t)d && !(d == 0 && signbit(d)))
        return put_bulk_u64(p, (uint64_t)d);
    char num[40];
    size_t n = fmt_score(num, d);
    *p++ = '$';
    p += fmt_i64(p, (int64_t)n);
    memcpy(p, "\r\n", 2);
    memcpy(p + 2, num, n);
    memcpy(p + 2 + n, "\r\n", 2);
    return p + n + 4;
}

/* The entries order[first], order[first + step], ... count of them as a
 * RESP array of members (and scores). Written in place: the hot path. */
static int emit_items(segd_buf_t *out, const segd_entry_t *ents, const uint32_t *order,
                      size_t first, long step, size_t count, int withscores)
{
    if (add_array(out, (int64_t)(count * (withscores ? 2 : 1))))
        return RC_NOMEM;
    if (segd_buf_reserve(out, count * 72))
        return RC_NOMEM;
    char *p = (char *)out->data + out->len;
    score_cache_t sc = {0};
    for (size_t k = 0; k < count; k++) {
        const segd_entry_t *e = &ents[order[(long)first + (long)k * step]];
        p = put_bulk_u64(p, (uint64_t)e->segment_id);
        if (withscores)
            p = put_bulk_score(p, (double)e->expiry_s, &sc);
    }
    out->len = (size_t)(p - (char *)out->data);
    return RC_OK;
}

/* ---- sorted-set reads --------------------------------------------------- */

enum { BY_AUTO, BY_RANK, BY_SCORE, BY_LEX };
enum { DIR_AUTO, DIR_FWD, DIR_REV };

typedef struct zrange_req {
    int by, dir, withscores;
    long long offset, limit; /* limit -1: all */
    long long start, end;    /* BY_RANK */
    range_t r;               /* BY_SCORE */
} zrange_req_t;

/* Redis 7.0's zrangeGenericCommand option loop and checks, in its order. */
static int zrange_parse(const segd_resp_cmd_t *cmd, zrange_req_t *q, segd_buf_t *out)
{
    q->offset = 0;
    q->limit = -1;
    for (size_t j = 4; j < cmd->argc; j++) {
        size_t left = cmd->argc - j - 1;
        if (arg_is(cmd, j, "withscores")) {
            q->withscores = 1;
        } else if (arg_is(cmd, j, "limit") && left >= 2) {
            if (arg_ll(cmd, j + 1, &q->offset) || arg_ll(cmd, j + 2, &q->limit))
                return not_integer(out);
            j += 2;
        } else if (q->dir == DIR_AUTO && arg_is(cmd, j, "rev")) {
            q->dir = DIR_REV;
        } else if (q->by == BY_AUTO && arg_is(cmd, j, "bylex")) {
            q->by = BY_LEX;
        } else if (q->by == BY_AUTO && arg_is(cmd, j, "byscore")) {
            q->by = BY_SCORE;
        } else {
            return add_err_raw(out, "ERR syntax error");
        }
    }
    if (q->dir == DIR_AUTO)
        q->dir = DIR_FWD;
    if (q->by == BY_AUTO)
        q->by = BY_RANK;
    if (q->limit != -1 && q->by == BY_RANK)
        return add_err_raw(out, "ERR syntax error, LIMIT is only supported in combination "
                                "with either BYSCORE or BYLEX");
    if (q->withscores && q->by == BY_LEX)
        return add_err_raw(out, "ERR syntax error, WITHSCORES not supported in combination "
                                "with BYLEX");
    if (q->by == BY_LEX)
        return add_err_raw(out, "ERR BYLEX is not supported by segd");
    size_t imin = 2, imax = 3;
    if (q->dir == DIR_REV && q->by == BY_SCORE) { /* given as max min */
        imin = 3;
        imax = 2;
    }
    if (q->by == BY_RANK) {
        if (arg_ll(cmd, 2, &q->start) || arg_ll(cmd, 3, &q->end))
            return not_integer(out);
    } else if (parse_range(cmd, imin, imax, &q->r)) {
        return add_err_raw(out, "ERR min or max is not a float");
    }
    return RC_OK;
}

static int zrange_rank(segd_resp_worker_t *w, const zrange_req_t *q, size_t nents,
                       segd_buf_t *out)
{
    size_t n;
    if (collect_sorted(w, nents, NULL, &n))
        return RC_NOMEM;
    long long len = (long long)n, start = q->start, end = q->end;
    if (start < 0)
        start = len + start;
    if (end < 0)
        end = len + end;
    if (start < 0)
        start = 0;
    if (start > end || start >= len)
        return add_array(out, 0);
    if (end >= len)
        end = len - 1;
    size_t count = (size_t)(end - start + 1);
    if (q->dir == DIR_REV)
        return emit_items(out, w->ents, w->sort.order, n - 1 - (size_t)start, -1, count, q->withscores);
    return emit_items(out, w->ents, w->sort.order, (size_t)start, 1, count, q->withscores);
}

/* Mirrors Redis's genericZrangebyscoreCommand: the members in range, in
 * order, after skipping offset of them (a negative offset skips them all),
 * and at most limit of them (a negative limit means all). */
static int zrange_score(segd_resp_worker_t *w, const zrange_req_t *q, size_t nents,
                        segd_buf_t *out)
{
    size_t n;
    if (q->offset > 0 && (size_t)q->offset >= nents)
        return add_array(out, 0);
    if (collect_sorted(w, nents, &q->r, &n))
        return RC_NOMEM;
    if (q->offset < 0 || (size_t)q->offset >= n)
        return add_array(out, 0);
    size_t count = n - (size_t)q->offset;
    if (q->limit >= 0 && (size_t)q->limit < count)
        count = (size_t)q->limit;
    if (q->dir == DIR_REV)
        return emit_items(out, w->ents, w->sort.order, n - 1 - (size_t)q->offset, -1, count, q->withscores);
    return emit_items(out, w->ents, w->sort.order, (size_t)q->offset, 1, count, q->withscores);
}

/* The reply cache's key is the parsed request followed by the user, not the
 * argument bytes, so that spellings Redis answers alike ("withscores" and
 * "WITHSCORES", "1e9" and "1000000000") share one reply. The reply depends
 * on nothing else but the live entries, which the stamp covers. */
#define KEY_FIXED (10 * sizeof(int64_t))
#define KEY_MAX_USER 512

static size_t reply_key(const zrange_req_t *q, const char *user, size_t ulen, uint8_t *key)
{
    int64_t f[10] = {q->by, q->dir, q->withscores, q->offset, q->limit, q->start, q->end,
                     0, 0, q->r.minex | q->r.maxex << 1};
    memcpy(&f[7], &q->r.min, sizeof(double));
    memcpy(&f[8], &q->r.max, sizeof(double));
    memcpy(key, f, KEY_FIXED);
    memcpy(key + KEY_FIXED, user, ulen);
    return KEY_FIXED + ulen;
}


static int zrange_generic(segd_resp_worker_t *w, const segd_resp_cmd_t *cmd, segd_buf_t *out,
                          int by, int dir)
{
    zrange_req_t q = {.by = by, .dir = dir};
    int rc = zrange_parse(cmd, &q, out);
    if (rc)
        return rc;
    /* sorting and formatting a 1000-segment answer is most of a request's
     * user-space CPU: an unchanged answer is copied from the last one */
    uint8_t key[KEY_FIXED + KEY_MAX_USER];
    size_t klen = 0;
    uint64_t hash = 0;
    if (w->replies && cmd->argl[1] <= KEY_MAX_USER) {
        klen = reply_key(&q, cmd->argv[1], cmd->argl[1], key);
        hash = segd_reply_cache_hash(key, klen);
        size_t len;
        const uint8_t *hit = segd_reply_cache_get(w->replies, key, klen, hash, w->shared->edge,
                                                  cmd->argv[1], cmd->argl[1], &len);
        atomic_fetch_add_explicit(hit ? &w->reply_hits : &w->reply_misses, 1,
                                  memory_order_relaxed);
        if (hit)
            return add(out, hit, len);
    }
    size_t nents;
    segd_edge_stamp_t st;
    if (lookup_stamped(w, cmd, 1, &nents, &st))
        return RC_NOMEM;
    if (!nents) /* as cheap as the cache */
        return add_array(out, 0);
    size_t start = out->len;
    w->until_s = INT64_MIN; /* set by collect_sorted: only its answers are kept */
    rc = q.by == BY_RANK ? zrange_rank(w, &q, nents, out) : zrange_score(w, &q, nents, out);
    if (rc == RC_OK && klen && w->until_s != INT64_MIN)
        segd_reply_cache_put(w->replies, key, klen, hash, &st, w->until_s, out->data + start,
                             out->len - start);
    return rc;
}

static int cmd_zrange(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_AUTO, DIR_AUTO);
}

static int cmd_zrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                             const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_SCORE, DIR_FWD);
}

static int cmd_zrevrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                                const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_SCORE, DIR_REV);
}

static int cmd_zrevrange(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_RANK, DIR_REV);
}

static int cmd_zcount(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)c;
    range_t r;
    if (parse_range(cmd, 2, 3, &r))
        return add_err_raw(out, "ERR min or max is not a float");
    size_t n;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += in_range(&r, (double)w->ents[i].expiry_s);
    return add_int(out, k);
}

static int cmd_zcard(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                     segd_buf_t *out)
{
    (void)c;
    size_t n;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    return add_int(out, (int64_t)n);
}

/* A member names a segment only in the form segd prints ids: canonical
 * decimal, so "07" or "+7" is no member, as in Redis. */
static int member_id(const segd_resp_cmd_t *cmd, size_t i, int64_t *id)
{
    long long v;
    if (arg_ll(cmd, i, &v) || v < 0)
        return -1;
    *id = v;
    return 0;
}

static int cmd_zscore(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)c;
    size_t n;
    int64_t id;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    if (member_id(cmd, 2, &id))
        return add_nil(out);
    size_t lo = 0, hi = n; /* entries are sorted by id */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->ents[mid].segment_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && w->ents[lo].segment_id == id)
        return add_double(out, (double)w->ents[lo].expiry_s);
    return add_nil(out);
}

static int cmd_exists(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)c;
    int64_t k = 0;
    for (size_t i = 1; i < cmd->argc; i++) {
        size_t n;
        if (lookup(w, cmd, i, &n))
            return RC_NOMEM;
        k += n > 0;
    }
    return add_int(out, k);
}

/* ---- connection and server commands ------------------------------------- */

static int cmd_ping(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                    segd_buf_t *out)
{
    (void)w;
    (void)c;
    if (cmd->argc > 2)
        return add_err_raw(out, "ERR wrong number of arguments for 'ping' command");
    return cmd->argc == 2 ? add_bulk(out, cmd->argv[1], cmd->argl[1]) : add_str(out, "+PONG\r\n");
}

static int cmd_echo(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                    segd_buf_t *out)
{
    (void)w;
    (void)c;
    return add_bulk(out, cmd->argv[1], cmd->argl[1]);
}

static int cmd_quit(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                    segd_buf_t *out)
{
    (void)w;
    (void)c;
    (void)cmd;
    return add_str(out, "+OK\r\n") ? RC_NOMEM : RC_QUIT;
}

static int cmd_select(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)w;
    (void)c;
    long long db;
    if (arg_ll(cmd, 1, &db) || db < INT32_MIN || db > INT32_MAX)
        return add_err_raw(out, "ERR invalid DB index");
    return db ? add_err_raw(out, "ERR DB index is out of range") : add_str(out, "+OK\r\n");
}

/* HELLO [protover [AUTH user pass] [SETNAME name]]: RESP2 only. The
 * default user of a redis-server without requirepass takes any password,
 * and so does this front. */
static int cmd_hello(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                     segd_buf_t *out)
{
    (void)w;
    size_t j = 1;
    if (cmd->argc >= 2) {
        long long ver;
        if (arg_ll(cmd, j++, &ver))
            return add_err_raw(out, "ERR Protocol version is not an integer or out of range");
        if (ver != 2)
            return add_err_raw(out, "NOPROTO unsupported protocol version");
    }
    for (; j < cmd->argc; j++) {
        size_t more = cmd->argc - 1 - j;
        if (arg_is(cmd, j, "auth") && more >= 2)
            j += 2;
        else if (arg_is(cmd, j, "setname") && more >= 1)
            j++;
        else
            return add_err(out, "ERR Syntax error in HELLO option '%.*s'", (int)cmd->argl[j],
                           cmd->argv[j]);
    }
    if (add_array(out, 14) || add_bulk_str(out, "server") || add_bulk_str(out, "segd") ||
        add_bulk_str(out, "version") || add_bulk_str(out, REDIS_COMPAT_VERSION) ||
        add_bulk_str(out, "proto") || add_int(out, 2) || add_bulk_str(out, "id") ||
        add_int(out, (int64_t)c->id) || add_bulk_str(out, "mode") ||
        add_bulk_str(out, "standalone") || add_bulk_str(out, "role") ||
        add_bulk_str(out, "replica") || add_bulk_str(out, "modules") || add_array(out, 0))
        return RC_NOMEM;
    return RC_OK;
}

static int cmd_client(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                      segd_buf_t *out)
{
    (void)w;
    if (arg_is(cmd, 1, "id") && cmd->argc == 2)
        return add_int(out, (int64_t)c->id);
    if (arg_is(cmd, 1, "getname") && cmd->argc == 2)
        return add_nil(out);
    if (arg_is(cmd, 1, "setname") && cmd->argc == 3)
        return add_str(out, "+OK\r\n");
    if (arg_is(cmd, 1, "setinfo") && cmd->argc == 4)
        return add_str(out, "+OK\r\n");
    if (arg_is(cmd, 1, "id") || arg_is(cmd, 1, "getname") || arg_is(cmd, 1, "setname") ||
        arg_is(cmd, 1, "setinfo"))
        return add_err(out, "ERR wrong number of arguments for 'client|%.*s' command",
                       (int)cmd->argl[1], cmd->argv[1]);
    return add_err(out, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
                   (int)(cmd->argl[1] < 128 ? cmd->argl[1] : 128), cmd->argv[1]);
}

static int cmd_info(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                    segd_buf_t *out)
{
    (void)c;
    (void)cmd;
    segd_resp_shared_t *s = w->shared;
    segd_edge_stats_t st;
    segd_edge_get_stats(s->edge, &st);
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "# Server\r\nredis_version:%s\r\nserver_name:segd\r\nredis_mode:standalone\r\n"
                     "process_id:%ld\r\ntcp_port:%d\r\nuptime_in_seconds:%lld\r\n\r\n"
                     "# Clients\r\nconnected_clients:%lld\r\n\r\n"
                     "# Persistence\r\nloading:%d\r\n\r\n"
                     "# Keyspace\r\ndb0:keys=%llu,expires=0,avg_ttl=0\r\n",
                     REDIS_COMPAT_VERSION, (long)getpid(), s->port,
                     (long long)((segd_wall_ms() - s->started_ms) / 1000),
                     (long long)atomic_load(&s->connections), !atomic_load(&s->serving),
                     (unsigned long long)st.users);
    return add_bulk(out, text, (size_t)n);
}

static int cmd_command(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                       segd_buf_t *out);

/* Every command this front runs; the first ones are the hot ones. */
static const cmd_def_t commands[] = {
    {"zrangebyscore", -4, 1, cmd_zrangebyscore, "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zrange", -4, 1, cmd_zrange, "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zrevrangebyscore", -4, 1, cmd_zrevrangebyscore, "readonly", "@read @sortedset @slow", 1, 1,
     1},
    {"zrevrange", -4, 1, cmd_zrevrange, "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zcount", 4, 1, cmd_zcount, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"zscore", 3, 1, cmd_zscore, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"zcard", 2, 1, cmd_zcard, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"exists", -2, 1, cmd_exists, "readonly fast", "@keyspace @read @fast", 1, -1, 1},
    {"ping", -1, 1, cmd_ping, "fast", "@fast @connection", 0, 0, 0},
    {"echo", 2, 0, cmd_echo, "fast", "@fast @connection", 0, 0, 0},
    {"hello", -1, 0, cmd_hello, "noscript loading stale fast no_auth", "@fast @connection", 0,
     0, 0},
    {"command", -1, 0, cmd_command, "loading stale", "@slow @connection", 0, 0, 0},
    {"client", -2, 0, cmd_client, "loading stale", "@slow @connection", 0, 0, 0},
    {"select", 2, 0, cmd_select, "loading stale fast", "@keyspace @fast", 0, 0, 0},
    {"info", -1, 0, cmd_info, "loading stale", "@slow @dangerous", 0, 0, 0},
    {"quit", -1, 0, cmd_quit, "loading stale fast no_auth", "@fast @connection", 0, 0, 0},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))
#define LABEL_WRITE NCOMMANDS
#define LABEL_UNKNOWN (NCOMMANDS + 1)

/* Redis's write commands, and those that change a connection in ways a
 * read-only cache has no use for: "-ERR read-only replica". */
static const char *const writes[] = {
    "set", "setnx", "setex", "psetex", "mset", "msetnx", "getset", "getdel", "getex", "append",
    "setrange", "incr", "decr", "incrby", "decrby", "incrbyfloat", "del", "unlink", "expire",
    "pexpire", "expireat", "pexpireat", "persist", "rename", "renamenx", "move", "copy",
    "restore", "flushall", "flushdb", "swapdb", "zadd", "zincrby", "zrem", "zremrangebyscore",
    "zremrangebyrank", "zremrangebylex", "zpopmin", "zpopmax", "bzpopmin", "bzpopmax",
    "zmpop", "bzmpop", "zunionstore", "zinterstore", "zdiffstore", "zrangestore", "hset",
    "hsetnx", "hmset", "hdel", "hincrby", "hincrbyfloat", "lpush", "rpush", "lpushx", "rpushx",
    "lpop", "rpop", "lset", "linsert", "lrem", "ltrim", "lmove", "blmove", "rpoplpush",
    "brpoplpush", "blpop", "brpop", "lmpop", "blmpop", "sadd", "srem", "spop", "smove",
    "sunionstore", "sinterstore", "sdiffstore", "pfadd", "pfmerge", "setbit", "bitop",
    "bitfield", "xadd", "xdel", "xtrim", "geoadd", "sort", "eval", "evalsha", "fcall",
    "publish", "multi", "exec", "discard", "watch",
};

size_t segd_resp_command_count(void) { return NCOMMANDS + 2; }

const char *segd_resp_command_name(size_t i)
{
    if (i < NCOMMANDS)
        return commands[i].name;
    return i == LABEL_WRITE ? "write" : i == LABEL_UNKNOWN ? "unknown" : NULL;
}

static int add_words(segd_buf_t *out, const char *words, char type)
{
    size_t n = 0;
    for (const char *p = words; *p;) {
        size_t l = strcspn(p, " ");
        n += l > 0;
        p += l + (p[l] == ' ');
    }
    if (add_array(out, (int64_t)n))
        return RC_NOMEM;
    for (const char *p = words; *p;) {
        size_t l = strcspn(p, " ");
        if (l && ((type == '+' && (add(out, "+", 1) || add(out, p, l) || add(out, "\r\n", 2))) ||
                  (type == '$' && add_bulk(out, p, l))))
            return RC_NOMEM;
        p += l + (p[l] == ' ');
    }
    return RC_OK;
}

/* One command as Redis 7's COMMAND INFO shows it in RESP2. */
static int add_command_info(segd_buf_t *out, const cmd_def_t *d)
{
    if (add_array(out, 10) || add_bulk_str(out, d->name) || add_int(out, d->arity) ||
        add_words(out, d->flags, '+') || add_int(out, d->first_key) ||
        add_int(out, d->last_key) || add_int(out, d->step) || add_words(out, d->acl, '+') ||
        add_array(out, 0) || add_array(out, 0) || add_array(out, 0))
        return RC_NOMEM;
    return RC_OK;
}

static const cmd_def_t *find_command(const char *name, size_t n)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strlen(commands[i].name) == n && !strncasecmp(commands[i].name, name, n))
            return &commands[i];
    return NULL;
}

/* COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS (no docs: an
 * empty map, which redis-cli takes as "no help from the server"). */
static int cmd_command(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                       segd_buf_t *out)
{
    (void)w;
    (void)c;
    if (cmd->argc == 1 || (cmd->argc == 2 && arg_is(cmd, 1, "list"))) {
        int list = cmd->argc == 2;
        if (add_array(out, (int64_t)NCOMMANDS))
            return RC_NOMEM;
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (list ? add_bulk_str(out, commands[i].name) : add_command_info(out, &commands[i]))
                return RC_NOMEM;
        return RC_OK;
    }
    if (arg_is(cmd, 1, "count") && cmd->argc == 2)
        return add_int(out, (int64_t)NCOMMANDS);
    if (arg_is(cmd, 1, "docs"))
        return add_array(out, 0);
    if (arg_is(cmd, 1, "info")) {
        if (add_array(out, (int64_t)cmd->argc - 2))
            return RC_NOMEM;
        for (size_t i = 2; i < cmd->argc; i++) {
            const cmd_def_t *d = find_command(cmd->argv[i], cmd->argl[i]);
            if (d ? add_command_info(out, d) : add(out, "*-1\r\n", 5))
                return RC_NOMEM;
        }
        return RC_OK;
    }
    return add_err(out, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
                   (int)(cmd->argl[1] < 128 ? cmd->argl[1] : 128), cmd->argv[1]);
}

/* ---- dispatch ------------------------------------------------------------ */

static int is_write(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++)
        if (strlen(writes[i]) == n && !strncasecmp(writes[i], name, n))
            return 1;
    return 0;
}

/* Redis's text: the name and the first arguments, quoted, 128 bytes each. */
static int unknown(const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    char args[300] = "";
    size_t len = 0;
    for (size_t i = 1; i < cmd->argc && len < 128; i++) {
        int k = snprintf(args + len, sizeof(args) - len, "'%.*s' ",
                         (int)(cmd->argl[i] < 128 - len ? cmd->argl[i] : 128 - len),
                         cmd->argv[i]);
        if (k < 0)
            break;
        len += (size_t)k < sizeof(args) - len ? (size_t)k : sizeof(args) - len - 1;
    }
    return add_err(out, "ERR unknown command '%.*s', with args beginning with: %s",
                   (int)(cmd->argl[0] < 128 ? cmd->argl[0] : 128), cmd->argv[0], args);
}

static int arity_ok(const cmd_def_t *d, size_t argc)
{
    return d->arity >= 0 ? argc == (size_t)d->arity : argc >= (size_t)-d->arity;
}

static void count(segd_resp_worker_t *w, size_t label, int rc)
{
    atomic_fetch_add_explicit(&w->counts[label][rc == RC_ERR], 1, memory_order_relaxed);
}

int segd_resp_exec(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                   segd_buf_t *out)
{
    if (cmd->argc == 0)
        return 0;
    const cmd_def_t *d = find_command(cmd->argv[0], cmd->argl[0]);
    int rc;
    size_t label = d ? (size_t)(d - commands) : LABEL_UNKNOWN;
    if (!d && is_write(cmd->argv[0], cmd->argl[0])) {
        label = LABEL_WRITE;
        rc = add_err_raw(out, "ERR read-only replica");
    } else if (!d) {
        rc = unknown(cmd, out);
    } else if (!arity_ok(d, cmd->argc)) {
        rc = add_err(out, "ERR wrong number of arguments for '%s' command", d->name);
    } else if (d->data && !atomic_load_explicit(&w->shared->serving, memory_order_acquire)) {
        rc = add_err_raw(out, "LOADING segd is loading the snapshot in memory");
    } else {
        rc = d->fn(w, c, cmd, out);
    }
    if (rc == RC_NOMEM)
        return SEGD_ERR_NOMEM;
    count(w, label, rc);
    return rc == RC_QUIT;
}

segd_err_t segd_resp_worker_init(segd_resp_worker_t *w, segd_resp_shared_t *shared)
{
    memset(w, 0, sizeof(*w));
    w->shared = shared;
    w->counts = calloc(NCOMMANDS + 2, sizeof(*w->counts));
    if (!w->counts || segd_reply_cache_new(&w->replies, shared->reply_cache_bytes)) {
        free((void *)w->counts);
        w->counts = NULL;
        return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

void segd_resp_worker_free(segd_resp_worker_t *w)
{
    if (!w)
        return;
    free(w->ents);
    segd_resp_order_free(&w->sort);
    segd_reply_cache_free(w->replies);
    free((void *)w->counts);
    memset(w, 0, sizeof(*w));
}
