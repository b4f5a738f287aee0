/* The sorted-set reads of the RESP front (ZRANGE and its BYSCORE/REV forms,
 * ZCOUNT, ZCARD, ZSCORE, EXISTS): a user's live entries from the edge cache,
 * ordered and filtered as Redis would, formatted once and kept in the
 * worker's reply cache until the answer may change. */
#include <stdlib.h>
#include <string.h>

#include "cache/resp_cmd_int.h"

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
static int collect_sorted(segd_resp_worker_t *w, size_t nents, const resp_range_t *r, size_t *n)
{
    if (segd_resp_order_reserve(&w->sort, nents))
        return RC_NOMEM;
    size_t k = 0;
    int64_t until = INT64_MAX;
    for (size_t i = 0; i < nents; i++)
        if (!r || resp_in_range(r, (double)w->ents[i].expiry_s)) {
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
            char *e = c->digits + sizeof(c->digits), *s = resp_fmt_u64(e, h);
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
    size_t n = resp_fmt_score(num, d);
    *p++ = '$';
    p += resp_fmt_i64(p, (int64_t)n);
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
    if (resp_add_array(out, (int64_t)(count * (withscores ? 2 : 1))))
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
    resp_range_t r;               /* BY_SCORE */
} zrange_req_t;

/* Redis 7.0's zrangeGenericCommand option loop and checks, in its order. */
static int zrange_parse(const segd_resp_cmd_t *cmd, zrange_req_t *q, segd_buf_t *out)
{
    q->offset = 0;
    q->limit = -1;
    for (size_t j = 4; j < cmd->argc; j++) {
        size_t left = cmd->argc - j - 1;
        if (resp_arg_is(cmd, j, "withscores")) {
            q->withscores = 1;
        } else if (resp_arg_is(cmd, j, "limit") && left >= 2) {
            if (resp_arg_ll(cmd, j + 1, &q->offset) || resp_arg_ll(cmd, j + 2, &q->limit))
                return resp_not_integer(out);
            j += 2;
        } else if (q->dir == DIR_AUTO && resp_arg_is(cmd, j, "rev")) {
            q->dir = DIR_REV;
        } else if (q->by == BY_AUTO && resp_arg_is(cmd, j, "bylex")) {
            q->by = BY_LEX;
        } else if (q->by == BY_AUTO && resp_arg_is(cmd, j, "byscore")) {
            q->by = BY_SCORE;
        } else {
            return resp_add_err_raw(out, "ERR syntax error");
        }
    }
    if (q->dir == DIR_AUTO)
        q->dir = DIR_FWD;
    if (q->by == BY_AUTO)
        q->by = BY_RANK;
    if (q->limit != -1 && q->by == BY_RANK)
        return resp_add_err_raw(out, "ERR syntax error, LIMIT is only supported in combination "
                                "with either BYSCORE or BYLEX");
    if (q->withscores && q->by == BY_LEX)
        return resp_add_err_raw(out, "ERR syntax error, WITHSCORES not supported in combination "
                                "with BYLEX");
    if (q->by == BY_LEX)
        return resp_add_err_raw(out, "ERR BYLEX is not supported by segd");
    size_t imin = 2, imax = 3;
    if (q->dir == DIR_REV && q->by == BY_SCORE) { /* given as max min */
        imin = 3;
        imax = 2;
    }
    if (q->by == BY_RANK) {
        if (resp_arg_ll(cmd, 2, &q->start) || resp_arg_ll(cmd, 3, &q->end))
            return resp_not_integer(out);
    } else if (resp_parse_range(cmd, imin, imax, &q->r)) {
        return resp_add_err_raw(out, "ERR min or max is not a float");
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
        return resp_add_array(out, 0);
    if (end >= len)
        end = len - 1;
    size_t count = (size_t)(end - start + 1);
    if (q->dir == DIR_REV)
        return emit_items(out, w->ents, w->sort.order, n - 1 - (size_t)start, -1, count,
                          q->withscores);
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
        return resp_add_array(out, 0);
    if (collect_sorted(w, nents, &q->r, &n))
        return RC_NOMEM;
    if (q->offset < 0 || (size_t)q->offset >= n)
        return resp_add_array(out, 0);
    size_t count = n - (size_t)q->offset;
    if (q->limit >= 0 && (size_t)q->limit < count)
        count = (size_t)q->limit;
    if (q->dir == DIR_REV)
        return emit_items(out, w->ents, w->sort.order, n - 1 - (size_t)q->offset, -1, count,
                          q->withscores);
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
            return resp_add(out, hit, len);
    }
    size_t nents;
    segd_edge_stamp_t st;
    if (lookup_stamped(w, cmd, 1, &nents, &st))
        return RC_NOMEM;
    if (!nents) /* as cheap as the cache */
        return resp_add_array(out, 0);
    size_t start = out->len;
    w->until_s = INT64_MIN; /* set by collect_sorted: only its answers are kept */
    rc = q.by == BY_RANK ? zrange_rank(w, &q, nents, out) : zrange_score(w, &q, nents, out);
    if (rc == RC_OK && klen && w->until_s != INT64_MIN)
        segd_reply_cache_put(w->replies, key, klen, hash, &st, w->until_s, out->data + start,
                             out->len - start);
    return rc;
}

int segd_resp_cmd_zrange(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_AUTO, DIR_AUTO);
}

int segd_resp_cmd_zrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                                const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_SCORE, DIR_FWD);
}

int segd_resp_cmd_zrevrangebyscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                                   const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_SCORE, DIR_REV);
}

int segd_resp_cmd_zrevrange(segd_resp_worker_t *w, segd_resp_client_t *c,
                            const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    return zrange_generic(w, cmd, out, BY_RANK, DIR_REV);
}

int segd_resp_cmd_zcount(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    resp_range_t r;
    if (resp_parse_range(cmd, 2, 3, &r))
        return resp_add_err_raw(out, "ERR min or max is not a float");
    size_t n;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += resp_in_range(&r, (double)w->ents[i].expiry_s);
    return resp_add_int(out, k);
}

int segd_resp_cmd_zcard(segd_resp_worker_t *w, segd_resp_client_t *c,
                        const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    size_t n;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    return resp_add_int(out, (int64_t)n);
}

/* A member names a segment only in the form segd prints ids: canonical
 * decimal, so "07" or "+7" is no member, as in Redis. */
static int member_id(const segd_resp_cmd_t *cmd, size_t i, int64_t *id)
{
    long long v;
    if (resp_arg_ll(cmd, i, &v) || v < 0)
        return -1;
    *id = v;
    return 0;
}

int segd_resp_cmd_zscore(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    size_t n;
    int64_t id;
    if (lookup(w, cmd, 1, &n))
        return RC_NOMEM;
    if (member_id(cmd, 2, &id))
        return resp_add_nil(out);
    size_t lo = 0, hi = n; /* entries are sorted by id */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->ents[mid].segment_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && w->ents[lo].segment_id == id)
        return resp_add_double(out, (double)w->ents[lo].expiry_s);
    return resp_add_nil(out);
}

int segd_resp_cmd_exists(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    int64_t k = 0;
    for (size_t i = 1; i < cmd->argc; i++) {
        size_t n;
        if (lookup(w, cmd, i, &n))
            return RC_NOMEM;
        k += n > 0;
    }
    return resp_add_int(out, k);
}
