/* External sort with the §3 join; see extsort.h. Layout of an arena: one
 * block of memory/2 bytes, pairs ([u32 operand length][user][operand]) from
 * the front, a 16-byte index entry per pair from the back, so the budget
 * holds exactly. A run file is a sequence of [varint user length][user]
 * [varint pairs joined][varint record length][record], users increasing. */
#include "load/extsort.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/varint.h"
#include "core/record.h"
#include "store/sst.h"

#define MIN_MEMORY (64u << 10)
#define RUN_WRITE_BUF (1u << 20)
#define RUN_READ_MIN (4u << 10)
#define RUN_READ_MAX (1u << 20)
#define RUN_HEADER_MAX (3 * 10)

typedef struct idx {
    uint64_t prefix; /* the user's first 8 bytes, big-endian, zero-padded */
    uint32_t off;    /* of the pair in the block */
    uint16_t ulen;
    uint16_t spare;
} idx_t;

typedef struct arena {
    uint8_t *block;
    size_t cap, used, n; /* block bytes, pair bytes from the front, pairs */
} arena_t;

/* Decoded operands of one user and the refs the join takes. */
typedef struct joiner {
    segd_profile_t *pool;
    const segd_profile_t **refs;
    size_t cap;
} joiner_t;

enum { SRC_RUN, SRC_ARENA };

/* One sorted input of the merge: a run file or the last arena. */
typedef struct source {
    int kind;
    const char *user;
    size_t ulen;
    uint64_t items;
    segd_profile_t prof; /* the current user's join within this source */
    FILE *f;             /* SRC_RUN */
    segd_buf_t buf;
    size_t pos;
    int eof;
    size_t i; /* SRC_ARENA: next index entry */
} source_t;

typedef struct spill_job {
    segd_extsort_t *x;
    arena_t *a;
    const char *path;
    segd_err_t err;
    char errstr[256];
    uint64_t bytes;
} spill_job_t;

struct segd_extsort {
    uint64_t memory;
    char *dir;
    segd_store_t *store;
    arena_t arena[2];
    int cur;
    pthread_t worker;
    int worker_on;
    spill_job_t job;
    joiner_t wj;         /* the spill's (one spill at a time) */
    segd_profile_t wprof;
    segd_buf_t wenc;
    char **runs;
    size_t nruns, runs_cap;
    uint64_t run_bytes, items, remainder_bytes;
    int finished;
    joiner_t mj;         /* the merge's */
    source_t *src;
    size_t nsrc;
    source_t **heap, **popped;
    size_t nheap, npopped;
    segd_profile_t out;
};

/* ---------- arenas ---------- */

static idx_t *arena_index(const arena_t *a) { return (idx_t *)(a->block + a->cap) - a->n; }

static int arena_fits(const arena_t *a, size_t bytes)
{
    return a->used + bytes + (a->n + 1) * sizeof(idx_t) <= a->cap;
}

static uint64_t user_prefix(const char *user, size_t len)
{
    uint64_t p = 0;
    for (size_t i = 0; i < 8; i++)
        p = p << 8 | (i < len ? (uint8_t)user[i] : 0);
    return p;
}

static const char *pair_user(const arena_t *a, const idx_t *e)
{
    return (const char *)a->block + e->off + 4;
}

static int user_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

/* Bytewise user order (the profiles family's comparator). */
static int idx_cmp(const void *pa, const void *pb, void *ctx)
{
    const idx_t *a = pa, *b = pb;
    if (a->prefix != b->prefix)
        return a->prefix < b->prefix ? -1 : 1;
    const arena_t *ar = ctx;
    return user_cmp(pair_user(ar, a), a->ulen, pair_user(ar, b), b->ulen);
}

/* The sort key's byte at depth d: 0 past the end (a shorter id first), else
 * the byte + 1; the first 8 come from the index entry, without a lookup. */
static unsigned key_byte(const arena_t *a, const idx_t *e, size_t d)
{
    if (d >= e->ulen)
        return 0;
    if (d < 8)
        return (unsigned)(e->prefix >> (56 - 8 * d) & 0xff) + 1;
    return (unsigned)(uint8_t)pair_user(a, e)[d] + 1;
}

static void insertion_sort(idx_t *v, size_t n, const arena_t *a)
{
    for (size_t i = 1; i < n; i++) {
        idx_t t = v[i];
        size_t j = i;
        for (; j > 0 && idx_cmp(&t, &v[j - 1], (void *)a) < 0; j--)
            v[j] = v[j - 1];
        v[j] = t;
    }
}

/* In-place MSD radix sort (American flag sort) of v by user bytes from
 * depth d: no memory beyond the arena (qsort's merge sort would allocate a
 * copy of the index, outside the budget). */
static void radix_sort(idx_t *v, size_t n, size_t d, const arena_t *a)
{
    if (n < 32) {
        insertion_sort(v, n, a);
        return;
    }
    size_t count[257] = {0}, next[257], end[257];
    for (size_t i = 0; i < n; i++)
        count[key_byte(a, &v[i], d)]++;
    for (size_t b = 0, sum = 0; b < 257; b++) {
        next[b] = sum;
        sum += count[b];
        end[b] = sum;
    }
    for (size_t b = 0; b < 257; b++)
        while (next[b] < end[b]) {
            unsigned c = key_byte(a, &v[next[b]], d);
            if (c == b) {
                next[b]++;
                continue;
            }
            idx_t t = v[next[b]];
            v[next[b]] = v[next[c]];
            v[next[c]++] = t;
        }
    /* bucket 0: ids that ended at d are all equal */
    for (size_t b = 1, start = count[0]; b < 257; start += count[b++])
        if (count[b] > 1)
            radix_sort(v + start, count[b], d + 1, a);
}

static void arena_sort(arena_t *a) { radix_sort(arena_index(a), a->n, 0, a); }

/* The end of the group of entries with the same user as idx[i]. */
static size_t group_end(const arena_t *a, const idx_t *idx, size_t i)
{
    size_t j = i + 1;
    while (j < a->n && idx[j].prefix == idx[i].prefix && idx[j].ulen == idx[i].ulen &&
           !memcmp(pair_user(a, &idx[j]), pair_user(a, &idx[i]), idx[i].ulen))
        j++;
    return j;
}

/* ---------- the join of one user's operands ---------- */

static segd_err_t joiner_reserve(joiner_t *j, size_t k)
{
    if (k <= j->cap)
        return SEGD_OK;
    size_t cap = j->cap * 2 > k ? j->cap * 2 : k;
    const segd_profile_t **refs = realloc(j->refs, cap * sizeof(*refs));
    if (!refs)
        return SEGD_ERR_NOMEM;
    j->refs = refs;
    segd_profile_t *pool = realloc(j->pool, cap * sizeof(*pool));
    if (!pool)
        return SEGD_ERR_NOMEM;
    for (size_t i = j->cap; i < cap; i++)
        segd_profile_init(&pool[i]);
    j->pool = pool;
    j->cap = cap;
    return SEGD_OK;
}

static void joiner_free(joiner_t *j)
{
    for (size_t i = 0; i < j->cap; i++)
        segd_profile_free(&j->pool[i]);
    free(j->pool);
    free(j->refs);
    memset(j, 0, sizeof(*j));
}

static segd_err_t decode_operand(const uint8_t *op, size_t len, segd_profile_t *p,
                                 const char *user, size_t ulen, char *errstr, size_t n)
{
    segd_err_t err = segd_record_decode(op, len, p);
    if (err == SEGD_ERR_CORRUPT)
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "an operand of user %.*s does not decode", (int)ulen, user);
    return err ? segd_errf(err, errstr, n, "decode: %s", segd_err_str(err)) : SEGD_OK;
}

/* Operands decoded at once per join step: a user with many events is
 * joined in steps into an accumulator, so at most this many decoded
 * profiles are alive whatever the group's size (decoded profiles are
 * several times the encoded bytes the budget counts). */
#define JOIN_FANIN 64

/* Joins the operands of idx[i..j) (one user) into out, nothing pruned. */
static segd_err_t join_group(joiner_t *jn, const arena_t *a, const idx_t *idx, size_t i,
                             size_t j, segd_profile_t *out, char *errstr, size_t n)
{
    const char *user = pair_user(a, &idx[i]);
    size_t k = j - i;
    segd_err_t err = joiner_reserve(jn, (k < JOIN_FANIN ? k : JOIN_FANIN) + 1);
    if (err)
        return segd_errf(err, errstr, n, "out of memory");
    int have_acc = 0;
    for (size_t m0 = 0; m0 < k; m0 += JOIN_FANIN) {
        size_t cnt = k - m0 < JOIN_FANIN ? k - m0 : JOIN_FANIN, r = 0;
        if (have_acc) /* the previous steps' join, swapped into pool[cnt] */
            jn->refs[r++] = &jn->pool[cnt];
        for (size_t m = 0; m < cnt; m++) {
            const uint8_t *p = a->block + idx[i + m0 + m].off;
            uint32_t olen;
            memcpy(&olen, p, 4);
            segd_profile_t *dst = k == 1 ? out : &jn->pool[m];
            if ((err = decode_operand(p + 4 + idx[i + m0 + m].ulen, olen, dst, user,
                                      idx[i].ulen, errstr, n)))
                return err;
            jn->refs[r++] = dst;
        }
        if (k == 1)
            return SEGD_OK;
        if ((err = segd_profile_join(out, jn->refs, r, NULL)))
            return segd_errf(err, errstr, n, "out of memory");
        if (m0 + cnt < k) { /* out becomes the accumulator of the next step */
            size_t next = k - m0 - cnt < JOIN_FANIN ? k - m0 - cnt : JOIN_FANIN;
            segd_profile_t t = jn->pool[next];
            jn->pool[next] = *out;
            *out = t;
            have_acc = 1;
        }
    }
    return SEGD_OK;
}

/* ---------- spilling a run ---------- */

static segd_err_t put_run_record(FILE *f, const char *user, size_t ulen, uint64_t items,
                                 const segd_buf_t *rec)
{
    uint8_t h[RUN_HEADER_MAX];
    size_t hl = segd_uv_put(h, ulen);
    hl += segd_uv_put(h + hl, items);
    hl += segd_uv_put(h + hl, rec->len);
    if (fwrite(h, 1, hl, f) != hl || fwrite(user, 1, ulen, f) != ulen ||
        (rec->len && fwrite(rec->data, 1, rec->len, f) != rec->len))
        return SEGD_ERR_IO;
    return SEGD_OK;
}

static void spill_run(spill_job_t *job)
{
    segd_extsort_t *x = job->x;
    arena_t *a = job->a;
    arena_sort(a);
    const idx_t *idx = arena_index(a);
    FILE *f = fopen(job->path, "wb");
    if (!f) {
        job->err = segd_errf(SEGD_ERR_IO, job->errstr, sizeof(job->errstr), "%s: %s",
                             job->path, strerror(errno));
        return;
    }
    setvbuf(f, NULL, _IOFBF, RUN_WRITE_BUF);
    segd_err_t err = SEGD_OK;
    for (size_t i = 0, j; i < a->n && !err; i = j) {
        j = group_end(a, idx, i);
        err = join_group(&x->wj, a, idx, i, j, &x->wprof, job->errstr, sizeof(job->errstr));
        if (!err && (err = segd_record_encode(&x->wprof, &x->wenc)))
            segd_errf(err, job->errstr, sizeof(job->errstr), "out of memory");
        if (!err && (err = put_run_record(f, pair_user(a, &idx[i]), idx[i].ulen, j - i,
                                          &x->wenc)))
            segd_errf(err, job->errstr, sizeof(job->errstr), "%s: %s", job->path,
                      strerror(errno));
    }
    long size = err ? 0 : ftell(f);
    if (fclose(f) && !err)
        err = segd_errf(SEGD_ERR_IO, job->errstr, sizeof(job->errstr), "%s: %s", job->path,
                        strerror(errno));
    job->bytes = size > 0 ? (uint64_t)size : 0;
    job->err = err;
}

static void *spill_main(void *arg)
{
    spill_run(arg);
    return NULL;
}

/* Waits for the spill in progress; its failure is the caller's. */
static segd_err_t wait_spill(segd_extsort_t *x, char *errstr, size_t n)
{
    if (x->worker_on) {
        pthread_join(x->worker, NULL);
        x->worker_on = 0;
        x->run_bytes += x->job.bytes;
    }
    if (x->job.err)
        return segd_errf(x->job.err, errstr, n, "%s", x->job.errstr);
    return SEGD_OK;
}

/* Sends the current arena to a run file (on the worker thread when it can
 * start one) and switches to the other arena, free once the last spill is
 * done. */
static segd_err_t start_spill(segd_extsort_t *x, char *errstr, size_t n)
{
    segd_err_t err = wait_spill(x, errstr, n);
    if (err)
        return err;
    arena_t *a = &x->arena[x->cur];
    /* a run is at most about the pairs' bytes: joining only shrinks them */
    if (x->store && (err = segd_store_reserve_check(x->store, a->used, errstr, n)))
        return err;
    char **runs = segd_array_grow(x->runs, &x->runs_cap, x->nruns + 1, sizeof(*runs));
    if (!runs)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    x->runs = runs;
    size_t plen = strlen(x->dir) + 32;
    if (!(runs[x->nruns] = malloc(plen)))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    snprintf(runs[x->nruns], plen, "%s/run-%06zu", x->dir, x->nruns);
    x->job = (spill_job_t){.x = x, .a = a, .path = runs[x->nruns++]};
    if (pthread_create(&x->worker, NULL, spill_main, &x->job) == 0) {
        x->worker_on = 1;
    } else { /* no thread: spilled here, in line */
        spill_run(&x->job);
        x->run_bytes += x->job.bytes;
        if (x->job.err)
            return segd_errf(x->job.err, errstr, n, "%s", x->job.errstr);
    }
    x->cur = !x->cur;
    arena_t *b = &x->arena[x->cur];
    if (!b->block && !(b->block = malloc(b->cap)))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory for the second arena");
    b->used = b->n = 0;
    return SEGD_OK;
}

/* ---------- life cycle and input ---------- */

segd_err_t segd_extsort_new(segd_extsort_t **out, const segd_extsort_opts_t *o, char *errstr,
                            size_t n)
{
    *out = NULL;
    if (!o->dir || o->memory_bytes < MIN_MEMORY)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "external sort: needs a directory and at least %u KiB",
                         MIN_MEMORY >> 10);
    segd_extsort_t *x = calloc(1, sizeof(*x));
    if (!x || !(x->dir = strdup(o->dir))) {
        free(x);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    x->memory = o->memory_bytes;
    x->store = o->store;
    /* u32 offsets: an arena holds at most 4 GiB of pairs */
    uint64_t cap = o->memory_bytes / 2 / sizeof(idx_t) * sizeof(idx_t);
    if (cap > UINT32_MAX / sizeof(idx_t) * sizeof(idx_t))
        cap = UINT32_MAX / sizeof(idx_t) * sizeof(idx_t);
    x->arena[0].cap = x->arena[1].cap = (size_t)cap;
    segd_profile_init(&x->wprof);
    segd_profile_init(&x->out);
    if (!(x->arena[0].block = malloc(x->arena[0].cap))) {
        segd_extsort_destroy(x);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory for the sort arena");
    }
    *out = x;
    return SEGD_OK;
}

segd_err_t segd_extsort_add(segd_extsort_t *x, const char *user, size_t ulen,
                            const uint8_t *operand, size_t olen, char *errstr, size_t n)
{
    if (x->finished)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "external sort: add after finish");
    if (ulen == 0 || ulen > UINT16_MAX || olen > UINT32_MAX)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "external sort: bad pair lengths");
    size_t bytes = 4 + ulen + olen;
    arena_t *a = &x->arena[x->cur];
    if (!arena_fits(a, bytes)) {
        if (a->n == 0 || bytes + sizeof(idx_t) > a->cap)
            return segd_errf(SEGD_ERR_LIMIT, errstr, n,
                             "an operand of %zu bytes exceeds the sort's memory", olen);
        segd_err_t err = start_spill(x, errstr, n);
        if (err)
            return err;
        a = &x->arena[x->cur];
    }
    uint8_t *p = a->block + a->used;
    uint32_t ol = (uint32_t)olen;
    memcpy(p, &ol, 4);
    memcpy(p + 4, user, ulen);
    if (olen)
        memcpy(p + 4 + ulen, operand, olen);
    a->n++;
    idx_t *e = arena_index(a);
    *e = (idx_t){user_prefix(user, ulen), (uint32_t)a->used, (uint16_t)ulen, 0};
    a->used += bytes;
    x->items++;
    return SEGD_OK;
}

void segd_extsort_stats(const segd_extsort_t *x, segd_extsort_stats_t *st)
{
    st->items = x->items;
    st->runs = x->nruns;
    st->run_bytes = x->run_bytes;
    st->remainder_bytes = x->remainder_bytes;
}

void segd_extsort_destroy(segd_extsort_t *x)
{
    if (!x)
        return;
    if (x->worker_on)
        pthread_join(x->worker, NULL);
    for (size_t i = 0; i < x->nsrc; i++) {
        if (x->src[i].f)
            fclose(x->src[i].f);
        segd_buf_free(&x->src[i].buf);
        segd_profile_free(&x->src[i].prof);
    }
    free(x->src);
    free(x->heap);
    free(x->popped);
    for (size_t i = 0; i < x->nruns; i++) {
        unlink(x->runs[i]); /* absent when its spill never started */
        free(x->runs[i]);
    }
    free(x->runs);
    free(x->arena[0].block);
    free(x->arena[1].block);
    joiner_free(&x->wj);
    joiner_free(&x->mj);
    segd_profile_free(&x->wprof);
    segd_profile_free(&x->out);
    segd_buf_free(&x->wenc);
    free(x->dir);
    free(x);
}

/* ---------- the merge ---------- */

/* Makes at least need unread bytes available (fewer only at the end). */
static segd_err_t run_fill(source_t *s, size_t need)
{
    size_t have = s->buf.len - s->pos;
    if (have >= need || s->eof)
        return SEGD_OK;
    memmove(s->buf.data, s->buf.data + s->pos, have);
    s->buf.len = have;
    s->pos = 0;
    if (need > s->buf.cap && segd_buf_reserve(&s->buf, need - s->buf.len))
        return SEGD_ERR_NOMEM;
    while (s->buf.len < need && !s->eof) {
        size_t r = fread(s->buf.data + s->buf.len, 1, s->buf.cap - s->buf.len, s->f);
        if (r == 0) {
            if (ferror(s->f))
                return SEGD_ERR_IO;
            s->eof = 1;
        }
        s->buf.len += r;
    }
    return SEGD_OK;
}

/* Reads the run's next record; s->user = NULL at its end. */
static segd_err_t run_advance(source_t *s, char *errstr, size_t n)
{
    segd_err_t err = run_fill(s, RUN_HEADER_MAX);
    if (err)
        return segd_errf(err, errstr, n, "run read: %s", strerror(errno));
    if (s->pos == s->buf.len) {
        s->user = NULL;
        return SEGD_OK;
    }
    const uint8_t *p = s->buf.data + s->pos, *end = s->buf.data + s->buf.len;
    uint64_t ulen, items, rlen;
    if (segd_uv_get(&p, end, &ulen) || segd_uv_get(&p, end, &items) ||
        segd_uv_get(&p, end, &rlen) || ulen > UINT16_MAX || rlen > UINT32_MAX)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "run file corrupt");
    size_t hl = (size_t)(p - (s->buf.data + s->pos)), total = hl + ulen + rlen;
    if ((err = run_fill(s, total)))
        return segd_errf(err, errstr, n, "run read: %s", strerror(errno));
    if (s->buf.len - s->pos < total)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "run file truncated");
    const uint8_t *u = s->buf.data + s->pos + hl;
    s->user = (const char *)u;
    s->ulen = ulen;
    s->items = items;
    s->pos += total;
    return decode_operand(u + ulen, rlen, &s->prof, s->user, s->ulen, errstr, n);
}

static segd_err_t arena_advance(segd_extsort_t *x, source_t *s, char *errstr, size_t n)
{
    arena_t *a = &x->arena[x->cur];
    if (s->i == a->n) {
        s->user = NULL;
        return SEGD_OK;
    }
    const idx_t *idx = arena_index(a);
    size_t j = group_end(a, idx, s->i);
    s->user = pair_user(a, &idx[s->i]);
    s->ulen = idx[s->i].ulen;
    s->items = j - s->i;
    segd_err_t err = join_group(&x->mj, a, idx, s->i, j, &s->prof, errstr, n);
    s->i = j;
    return err;
}

static segd_err_t source_advance(segd_extsort_t *x, source_t *s, char *errstr, size_t n)
{
    return s->kind == SRC_RUN ? run_advance(s, errstr, n) : arena_advance(x, s, errstr, n);
}

static int src_less(const source_t *a, const source_t *b)
{
    return user_cmp(a->user, a->ulen, b->user, b->ulen) < 0;
}

static void heap_down(source_t **h, size_t nh, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < nh && src_less(h[l], h[m]))
            m = l;
        if (l + 1 < nh && src_less(h[l + 1], h[m]))
            m = l + 1;
        if (m == i)
            return;
        source_t *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_up(source_t **h, size_t i)
{
    while (i > 0 && src_less(h[i], h[(i - 1) / 2])) {
        source_t *t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* Moves s to its next user and back into the heap, unless it is drained. */
static segd_err_t source_refill(segd_extsort_t *x, source_t *s, char *errstr, size_t n)
{
    segd_err_t err = source_advance(x, s, errstr, n);
    if (err)
        return err;
    if (s->user) {
        x->heap[x->nheap] = s;
        heap_up(x->heap, x->nheap++);
    }
    return SEGD_OK;
}

/* The runs' read buffers share a quarter of the budget. */
static segd_err_t open_sources(segd_extsort_t *x, char *errstr, size_t n)
{
    arena_t *a = &x->arena[x->cur];
    size_t k = x->nruns + (a->n > 0);
    x->src = calloc(k ? k : 1, sizeof(*x->src));
    x->heap = calloc(k ? k : 1, sizeof(*x->heap));
    x->popped = calloc(k ? k : 1, sizeof(*x->popped));
    if (!x->src || !x->heap || !x->popped)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    size_t bufsize = x->nruns ? x->memory / 4 / x->nruns : 0;
    bufsize = bufsize < RUN_READ_MIN ? RUN_READ_MIN : bufsize > RUN_READ_MAX ? RUN_READ_MAX : bufsize;
    for (size_t i = 0; i < k; i++) {
        source_t *s = &x->src[x->nsrc++];
        segd_profile_init(&s->prof);
        s->kind = i < x->nruns ? SRC_RUN : SRC_ARENA;
        if (s->kind == SRC_RUN) {
            if (!(s->f = fopen(x->runs[i], "rb")))
                return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", x->runs[i],
                                 strerror(errno));
            if (segd_buf_reserve(&s->buf, bufsize))
                return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        }
        segd_err_t err = source_refill(x, s, errstr, n);
        if (err)
            return err;
    }
    return SEGD_OK;
}

segd_err_t segd_extsort_finish(segd_extsort_t *x, char *errstr, size_t n)
{
    if (x->finished)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "external sort: finished twice");
    x->finished = 1;
    segd_err_t err = wait_spill(x, errstr, n);
    if (err)
        return err;
    /* the other arena is no longer needed: its memory goes to the merge */
    free(x->arena[!x->cur].block);
    x->arena[!x->cur].block = NULL;
    arena_sort(&x->arena[x->cur]);
    x->remainder_bytes = x->arena[x->cur].used;
    return open_sources(x, errstr, n);
}

segd_err_t segd_extsort_next(segd_extsort_t *x, const char **user, size_t *ulen,
                             segd_profile_t **joined, uint64_t *items, int *done,
                             char *errstr, size_t n)
{
    if (!x->finished)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "external sort: next before finish");
    /* the sources that gave the last user move on only now: what was
     * returned points into them */
    for (size_t i = 0; i < x->npopped; i++) {
        segd_err_t err = source_refill(x, x->popped[i], errstr, n);
        if (err)
            return err;
    }
    x->npopped = 0;
    if (x->nheap == 0) {
        *done = 1;
        return SEGD_OK;
    }
    *done = 0;
    source_t *first = x->heap[0];
    *items = 0;
    while (x->nheap && (x->npopped == 0 || !user_cmp(x->heap[0]->user, x->heap[0]->ulen,
                                                     first->user, first->ulen))) {
        source_t *s = x->heap[0];
        x->popped[x->npopped++] = s;
        *items += s->items;
        x->heap[0] = x->heap[--x->nheap];
        heap_down(x->heap, x->nheap, 0);
    }
    *user = first->user;
    *ulen = first->ulen;
    if (x->npopped == 1) {
        *joined = &first->prof;
        return SEGD_OK;
    }
    segd_err_t err = joiner_reserve(&x->mj, x->npopped);
    if (err)
        return segd_errf(err, errstr, n, "out of memory");
    for (size_t i = 0; i < x->npopped; i++)
        x->mj.refs[i] = &x->popped[i]->prof;
    if ((err = segd_profile_join(&x->out, x->mj.refs, x->npopped, NULL)))
        return segd_errf(err, errstr, n, "out of memory");
    *joined = &x->out;
    return SEGD_OK;
}
