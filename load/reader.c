/* Multi-threaded SegmentEvent file reader; see reader.h. One producer thread
 * reads (and decompresses) each file into blocks: whole lines of JSON, or
 * whole container blocks of an OCF; `threads` workers turn blocks into
 * chunks of encoded items; the caller's thread hands chunks to the callback.
 * A fixed set of slots (input block + output chunk) cycles free -> producer
 * -> workers -> caller -> free: that is the back-pressure and the memory
 * bound. Invariant: a slot is in exactly one of the free list, the work
 * queue, the done queue or the hands of one thread. */
#define _GNU_SOURCE
#include "load/reader.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>
#include <zstd.h>

#include "base/clock.h"
#include "base/varint.h"
#include "core/record.h"
#include "load/source.h"
#include "wire/avro_codec.h"
#include "wire/json_event.h"

#define JSON_BLOCK_MIN (1u << 20) /* a block's size; more if a line may be longer */
#define OCF_UNIT (1u << 20)       /* container blocks are grouped up to this */
#define OCF_MAX_BLOCK (64u << 20) /* as wire/avro_file.c: larger is damage */
#define LEGACY_CHUNK 2048         /* events per chunk on the fallback path */

typedef enum unit_kind { UNIT_JSON, UNIT_OCF, UNIT_READY } unit_kind_t;
typedef enum ocf_codec { OCF_NULL, OCF_DEFLATE, OCF_ZSTD } ocf_codec_t;

typedef struct ocf_block {
    int64_t count, first_rec;
    size_t off, len;
} ocf_block_t;

typedef struct slot {
    struct slot *next;
    unit_kind_t kind;
    const char *file;
    uint64_t bytes;     /* input bytes this unit accounts for */
    /* input */
    uint8_t *in;
    size_t in_len, in_cap;
    int64_t first_line; /* UNIT_JSON: the number of the block's first line */
    ocf_codec_t codec;  /* UNIT_OCF */
    ocf_block_t *blocks;
    size_t n_blocks, cap_blocks;
    /* output */
    segd_load_item_t *items;
    size_t n_items, cap_items;
    segd_buf_t arena; /* user and operand bytes; items hold offsets until done */
    uint64_t segments, skipped;
    int failed;       /* out of memory while decoding: the load stops */
} slot_t;

typedef struct queue {
    slot_t *head, *tail;
} queue_t;

typedef struct loader loader_t;

/* Per-thread decoding state: no sharing between workers. */
typedef struct worker {
    loader_t *l;
    pthread_t th;
    segd_event_t ev;
    segd_profile_t prof;
    segd_buf_t operand;
    segd_avro_codec_t *codec;
    segd_buf_t scratch; /* a decompressed container block */
    z_stream z;
    int z_ready;
    ZSTD_DCtx *zd;
} worker_t;

struct loader {
    const segd_load_opts_t *o;
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_work, cv_done;
    slot_t *slots;
    size_t n_slots;
    slot_t *free_list;
    queue_t work, done;
    int producer_done, abort;
    uint64_t producer_skipped;
    worker_t producer_w; /* the producer's own decoder (fallback OCF path) */
    size_t json_block;
    uint64_t local_fp;
};

/* ---------- queues (called with mu held) ---------- */

static void q_push(queue_t *q, slot_t *s)
{
    s->next = NULL;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
}

static slot_t *q_pop(queue_t *q)
{
    slot_t *s = q->head;
    if (s) {
        q->head = s->next;
        if (!q->head)
            q->tail = NULL;
    }
    return s;
}

/* abort is written under mu but read anywhere: atomically */
static int stopping(loader_t *l)
{
    return __atomic_load_n(&l->abort, __ATOMIC_RELAXED) || (l->o->stop && *l->o->stop);
}

static void set_abort(loader_t *l) { __atomic_store_n(&l->abort, 1, __ATOMIC_RELAXED); }

/* A free slot for the producer, emptied; NULL once the load is stopping. */
static slot_t *take_free(loader_t *l)
{
    pthread_mutex_lock(&l->mu);
    while (!l->free_list && !stopping(l))
        pthread_cond_wait(&l->cv_free, &l->mu);
    slot_t *s = stopping(l) ? NULL : l->free_list;
    if (s)
        l->free_list = s->next;
    pthread_mutex_unlock(&l->mu);
    if (s) {
        s->in_len = s->n_blocks = s->n_items = 0;
        s->arena.len = 0;
        s->segments = s->skipped = s->bytes = 0;
        s->failed = 0;
        s->first_line = 0;
    }
    return s;
}

static void give_back(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    s->next = l->free_list;
    l->free_list = s;
    pthread_cond_signal(&l->cv_free);
    pthread_mutex_unlock(&l->mu);
}

static void push_work(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    q_push(&l->work, s);
    pthread_cond_signal(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
}

static void push_done(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    q_push(&l->done, s);
    pthread_cond_signal(&l->cv_done);
    pthread_mutex_unlock(&l->mu);
}

static void count_producer_skip(loader_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->producer_skipped++;
    pthread_mutex_unlock(&l->mu);
}

/* ---------- per-event work (workers; the producer on the fallback path) ---------- */

/* Reports a refused record as file:line or file:#record, as backfill always did. */
static void report(worker_t *w, slot_t *s, int64_t no, const char *why)
{
    fprintf(w->l->o->errors, "%s:%s%lld: %s\n", s->file, s->kind == UNIT_JSON ? "" : "#",
            (long long)no, why);
    s->skipped++;
}

/* Validates w->ev, checks its time and appends its operand to the chunk.
 * -1 only when out of memory. */
static int add_event(worker_t *w, slot_t *s, int64_t no)
{
    const segd_load_opts_t *o = w->l->o;
    segd_event_t *ev = &w->ev;
    char why[256];
    if (segd_event_validate(ev, &o->limits, why, sizeof(why)) != SEGD_OK) {
        report(w, s, no, why);
        return 0;
    }
    /* DESIGN §3, as segd run's too_late / from_future dead letters */
    segd_ts_verdict_t v =
        /* an event of no partition meets every restored unit's floor */
        o->policy ? segd_policy_check_ts_floor(o->policy, ev->ts_ms, o->limits.max_clock_skew_ms,
                                               segd_policy_import_floor(o->policy))
                  : SEGD_TS_OK;
    if (v == SEGD_TS_TOO_LATE) {
        char floor[160];
        segd_policy_floor_explain(o->policy, segd_policy_import_floor(o->policy), floor,
                                  sizeof(floor));
        snprintf(why, sizeof(why), "too_late: ts_ms %lld is below the ingest floor %s",
                 (long long)ev->ts_ms, floor);
        report(w, s, no, why);
        return 0;
    }
    if (v != SEGD_TS_OK) {
        snprintf(why, sizeof(why), "from_future: ts_ms %lld is more than %lld ms after now",
                 (long long)ev->ts_ms, (long long)o->limits.max_clock_skew_ms);
        report(w, s, no, why);
        return 0;
    }
    if (segd_event_to_profile(ev, o->granularity_s, &w->prof) ||
        segd_record_encode(&w->prof, &w->operand))
        return -1;
    segd_load_item_t *items =
        segd_array_grow(s->items, &s->cap_items, s->n_items + 1, sizeof(*items));
    if (!items)
        return -1;
    s->items = items;
    size_t at = s->arena.len;
    if (segd_buf_reserve(&s->arena, ev->user_id_len + w->operand.len))
        return -1;
    memcpy(s->arena.data + at, ev->user_id, ev->user_id_len);
    if (w->operand.len) /* an empty operand may have no buffer yet */
        memcpy(s->arena.data + at + ev->user_id_len, w->operand.data, w->operand.len);
    s->arena.len += ev->user_id_len + w->operand.len;
    /* offsets for now: the arena may still move (finish_chunk makes pointers) */
    items[s->n_items++] = (segd_load_item_t){
        .user = (const uint8_t *)(uintptr_t)at,
        .operand = (const uint8_t *)(uintptr_t)(at + ev->user_id_len),
        .user_len = (uint32_t)ev->user_id_len,
        .operand_len = (uint32_t)w->operand.len,
        .n_segments = (uint32_t)ev->n_segments,
        .record_no = no,
    };
    s->segments += ev->n_segments;
    return 0;
}

static void finish_chunk(slot_t *s)
{
    for (size_t i = 0; i < s->n_items; i++) {
        s->items[i].user = s->arena.data + (uintptr_t)s->items[i].user;
        s->items[i].operand = s->arena.data + (uintptr_t)s->items[i].operand;
    }
}

/* Whole lines, numbered from s->first_line; empty lines are skipped. */
static int decode_json(worker_t *w, slot_t *s)
{
    const segd_load_opts_t *o = w->l->o;
    const char *p = (const char *)s->in, *end = p + s->in_len;
    int64_t no = s->first_line;
    char why[256];
    for (; p < end; no++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        size_t len = (size_t)(stop - p);
        while (len > 0 && p[len - 1] == '\r')
            len--;
        if (len > o->limits.max_message) {
            snprintf(why, sizeof(why), "line of %zu bytes exceeds %zu", len,
                     o->limits.max_message);
            report(w, s, no, why);
        } else if (len > 0) {
            segd_err_t e = segd_json_event_parse(p, len, &w->ev, why, sizeof(why));
            if (e == SEGD_ERR_NOMEM)
                return -1;
            if (e)
                report(w, s, no, why);
            else if (add_event(w, s, no))
                return -1;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

/* A container block's bytes, decompressed into w->scratch when needed. */
static int inflate_block(worker_t *w, slot_t *s, const ocf_block_t *b, const uint8_t **out,
                         size_t *out_len, char *why, size_t n)
{
    const uint8_t *src = s->in + b->off;
    if (s->codec == OCF_NULL) {
        *out = src;
        *out_len = b->len;
        return 0;
    }
    w->scratch.len = 0;
    if (s->codec == OCF_DEFLATE) {
        if (!w->z_ready) {
            if (inflateInit2(&w->z, -15) != Z_OK)
                return -1;
            w->z_ready = 1;
        }
        inflateReset(&w->z);
        w->z.next_in = (uint8_t *)src;
        w->z.avail_in = (uInt)b->len;
    } else if (!w->zd && !(w->zd = ZSTD_createDCtx())) {
        return -1;
    } else {
        ZSTD_DCtx_reset(w->zd, ZSTD_reset_session_only);
    }
    ZSTD_inBuffer ib = {src, b->len, 0};
    for (;;) {
        if (w->scratch.len >= OCF_MAX_BLOCK) {
            snprintf(why, n, "block decompresses beyond %u bytes", OCF_MAX_BLOCK);
            return 1;
        }
        if (segd_buf_reserve(&w->scratch, 256 * 1024))
            return -1;
        uint8_t *dst = w->scratch.data + w->scratch.len;
        size_t room = w->scratch.cap - w->scratch.len;
        if (s->codec == OCF_DEFLATE) {
            w->z.next_out = dst;
            w->z.avail_out = (uInt)(room > UINT32_MAX ? UINT32_MAX : room);
            int rc = inflate(&w->z, Z_NO_FLUSH);
            w->scratch.len += (size_t)(w->z.next_out - dst);
            if (rc == Z_STREAM_END)
                break;
            if (rc != Z_OK && !(rc == Z_BUF_ERROR && w->z.avail_out == 0)) {
                snprintf(why, n, "corrupt deflate block: %s", w->z.msg ? w->z.msg : "truncated");
                return 1;
            }
        } else {
            ZSTD_outBuffer ob = {dst, room, 0};
            size_t rc = ZSTD_decompressStream(w->zd, &ob, &ib);
            w->scratch.len += ob.pos;
            if (ZSTD_isError(rc)) {
                snprintf(why, n, "corrupt zstandard block: %s", ZSTD_getErrorName(rc));
                return 1;
            }
            if (rc == 0 && ib.pos == ib.size)
                break;
            if (ob.pos == 0 && ib.pos == ib.size) {
                snprintf(why, n, "corrupt zstandard block: truncated");
                return 1;
            }
        }
    }
    *out = w->scratch.data;
    *out_len = w->scratch.len;
    return 0;
}

/* Records of container blocks written with SegmentEvent's own schema. A
 * record that cannot be framed loses the rest of its block (reported). */
static int decode_ocf(worker_t *w, slot_t *s)
{
    char why[256];
    for (size_t bi = 0; bi < s->n_blocks; bi++) {
        const ocf_block_t *b = &s->blocks[bi];
        const uint8_t *p, *end;
        size_t len;
        int rc = inflate_block(w, s, b, &p, &len, why, sizeof(why));
        if (rc < 0)
            return -1;
        if (rc > 0) {
            fprintf(w->l->o->errors, "%s:#%lld: %s (its %lld records skipped)\n", s->file,
                    (long long)b->first_rec, why, (long long)b->count);
            s->skipped += (uint64_t)b->count;
            continue;
        }
        end = p + len;
        int framed = 1;
        for (int64_t i = 0; i < b->count && framed; i++) {
            size_t used = 0;
            int64_t no = b->first_rec + i;
            segd_err_t e =
                segd_avro_decode_local_prefix(w->codec, p, (size_t)(end - p), &used, &w->ev,
                                              why, sizeof(why));
            if (e == SEGD_ERR_NOMEM)
                return -1;
            if (e && !used) {
                fprintf(w->l->o->errors, "%s:#%lld: %s (the %lld records after it in its "
                        "block skipped)\n", s->file, (long long)no, why,
                        (long long)(b->count - i - 1));
                s->skipped += (uint64_t)(b->count - i);
                framed = 0;
                break;
            }
            p += used;
            if (e)
                report(w, s, no, why);
            else if (add_event(w, s, no))
                return -1;
        }
        if (framed && p != end) {
            fprintf(w->l->o->errors, "%s:#%lld: container block has %zu bytes after its "
                    "%lld records\n", s->file, (long long)(b->first_rec + b->count - 1),
                    (size_t)(end - p), (long long)b->count);
            s->skipped++;
        }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    loader_t *l = w->l;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->work.head && !l->producer_done)
            pthread_cond_wait(&l->cv_work, &l->mu);
        slot_t *s = q_pop(&l->work);
        int skip = stopping(l);
        pthread_mutex_unlock(&l->mu);
        if (!s)
            return NULL; /* the producer is done and the queue empty */
        if (!skip && (s->kind == UNIT_JSON ? decode_json(w, s) : decode_ocf(w, s)))
            s->failed = 1;
        finish_chunk(s);
        push_done(l, s);
    }
}

static void worker_init(worker_t *w, loader_t *l)
{
    memset(w, 0, sizeof(*w));
    w->l = l;
    segd_event_init(&w->ev);
    segd_profile_init(&w->prof);
}

static void worker_free(worker_t *w)
{
    segd_event_free(&w->ev);
    segd_profile_free(&w->prof);
    segd_buf_free(&w->operand);
    segd_buf_free(&w->scratch);
    segd_avro_codec_destroy(w->codec);
    if (w->z_ready)
        inflateEnd(&w->z);
    ZSTD_freeDCtx(w->zd);
}

/* ---------- producer: JSON lines ---------- */

static int grow_in(slot_t *s, size_t cap)
{
    if (s->in_cap >= cap)
        return 0;
    uint8_t *p = realloc(s->in, cap);
    if (!p)
        return -1;
    s->in = p;
    s->in_cap = cap;
    return 0;
}

static size_t count_lines(const uint8_t *p, size_t len)
{
    size_t k = 0;
    const uint8_t *end = p + len;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        k++;
        p++;
    }
    return k;
}

/* A line that does not fit a block: longer than max_message for sure.
 * Reads to its end and reports it; what follows it goes to *carry. 0 when
 * the line ended, 1 at the end of input, -1 at a read error (why set). */
static int skip_long_line(loader_t *l, segd_source_t *src, const char *path, slot_t *s,
                          int64_t line, segd_buf_t *carry, char *why, size_t n)
{
    uint64_t total = s->in_len;
    int rc;
    for (;;) {
        ssize_t r = segd_source_read(src, s->in, s->in_cap, why, n);
        if (r <= 0) {
            rc = r < 0 ? -1 : 1;
            break;
        }
        uint8_t *nl = memchr(s->in, '\n', (size_t)r);
        if (!nl) {
            total += (uint64_t)r;
            continue;
        }
        total += (uint64_t)(nl - s->in);
        carry->len = 0;
        rc = segd_buf_append(carry, nl + 1, (size_t)(r - (nl + 1 - s->in))) ? -1 : 0;
        if (rc)
            snprintf(why, n, "out of memory");
        break;
    }
    fprintf(l->o->errors, "%s:%lld: line of %llu bytes exceeds %zu\n", path, (long long)line,
            (unsigned long long)total, l->o->limits.max_message);
    count_producer_skip(l);
    return rc;
}

/* Cuts the stream into blocks of whole lines. Returns -1 when stopping. */
static int produce_json(loader_t *l, segd_source_t *src, const char *path, uint64_t *accounted)
{
    segd_buf_t carry = {0};
    int64_t line = 1;
    char why[256];
    int rc = 0, at_end = 0;
    while (!at_end) {
        slot_t *s = take_free(l);
        if (!s) {
            rc = -1;
            break;
        }
        s->kind = UNIT_JSON;
        s->file = path;
        if (grow_in(s, l->json_block)) {
            fprintf(l->o->errors, "%s: out of memory\n", path);
            count_producer_skip(l);
            give_back(l, s);
            rc = -1;
            break;
        }
        if (carry.len) /* carry.data is NULL before the first block */
            memcpy(s->in, carry.data, carry.len);
        s->in_len = carry.len;
        carry.len = 0;
        ssize_t r = 1;
        while (s->in_len < s->in_cap &&
               (r = segd_source_read(src, s->in + s->in_len, s->in_cap - s->in_len, why,
                                     sizeof(why))) > 0)
            s->in_len += (size_t)r;
        if (r <= 0) {
            at_end = 1;
        } else {
            uint8_t *last = memrchr(s->in, '\n', s->in_len);
            if (!last) { /* a full block without a line end */
                int k = skip_long_line(l, src, path, s, line, &carry, why, sizeof(why));
                line++;
                give_back(l, s);
                if (k == 0)
                    continue;
                if (k < 0) {
                    fprintf(l->o->errors, "%s: %s (after line %lld)\n", path, why,
                            (long long)(line - 1));
                    count_producer_skip(l);
                }
                break;
            }
            size_t keep = (size_t)(last + 1 - s->in);
            if (segd_buf_append(&carry, last + 1, s->in_len - keep)) {
                fprintf(l->o->errors, "%s: out of memory\n", path);
                count_producer_skip(l);
                give_back(l, s);
                rc = -1;
                break;
            }
            s->in_len = keep;
        }
        s->first_line = line;
        line += (int64_t)count_lines(s->in, s->in_len);
        uint64_t consumed = segd_source_consumed(src);
        s->bytes = consumed - *accounted;
        *accounted = consumed;
        if (s->in_len)
            push_work(l, s);
        else
            give_back(l, s);
        if (r < 0) { /* what was read is applied; the tail is reported */
            fprintf(l->o->errors, "%s: %s (after line %lld)\n", path, why,
                    (long long)(line - 1));
            count_producer_skip(l);
        }
    }
    segd_buf_free(&carry);
    return rc;
}

/* ---------- producer: Avro object container files ---------- */

/* A buffered cursor over the source for the container's framing. */
typedef struct br {
    segd_source_t *src;
    uint8_t buf[64 * 1024];
    size_t pos, len;
    int err; /* 1 = source error (why set), 2 = end of input */
    char why[256];
} br_t;

static int br_fill(br_t *b)
{
    if (b->pos < b->len)
        return 0;
    ssize_t r = segd_source_read(b->src, b->buf, sizeof(b->buf), b->why, sizeof(b->why));
    if (r <= 0) {
        b->err = r < 0 ? 1 : 2;
        return -1;
    }
    b->pos = 0;
    b->len = (size_t)r;
    return 0;
}

static int br_read(br_t *b, void *dst, size_t n)
{
    uint8_t *d = dst;
    while (n) {
        if (br_fill(b))
            return -1;
        size_t k = b->len - b->pos < n ? b->len - b->pos : n;
        memcpy(d, b->buf + b->pos, k);
        b->pos += k;
        d += k;
        n -= k;
    }
    return 0;
}

static int br_long(br_t *b, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t c;
        if (br_read(b, &c, 1))
            return -1;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    b->err = 3; /* malformed */
    return -1;
}

/* The header's metadata map: avro.schema (malloc'd) and avro.codec. */
static int read_meta(br_t *b, char **schema, char *codec, size_t codec_cap)
{
    for (;;) {
        int64_t count, size;
        if (br_long(b, &count))
            return -1;
        if (count == 0)
            return 0;
        if (count < 0) {
            if (count == INT64_MIN || br_long(b, &size))
                return -1;
            count = -count;
        }
        for (int64_t i = 0; i < count; i++) {
            int64_t klen, vlen;
            char key[64];
            if (br_long(b, &klen) || klen < 0 || klen > 1 << 20)
                return -1;
            size_t kl = (size_t)klen < sizeof(key) - 1 ? (size_t)klen : sizeof(key) - 1;
            if (br_read(b, key, kl))
                return -1;
            key[kl] = 0;
            for (int64_t k = (int64_t)kl; k < klen; k++) { /* a long key: not ours */
                char drop;
                if (br_read(b, &drop, 1))
                    return -1;
            }
            if (br_long(b, &vlen) || vlen < 0 || vlen > 16 << 20)
                return -1;
            char *v = malloc((size_t)vlen + 1);
            if (!v || br_read(b, v, (size_t)vlen)) {
                free(v);
                return -1;
            }
            v[vlen] = 0;
            if (!strcmp(key, "avro.schema") && !*schema) {
                *schema = v;
                continue;
            }
            if (!strcmp(key, "avro.codec"))
                snprintf(codec, codec_cap, "%s", v);
            free(v);
        }
    }
}

typedef struct legacy {
    loader_t *l;
    const char *path;
    slot_t *s;
    int failed;
} legacy_t;

static int legacy_flush(legacy_t *g)
{
    if (!g->s)
        return 0;
    finish_chunk(g->s);
    push_done(g->l, g->s);
    g->s = NULL;
    return 0;
}

/* The fallback for a container whose writer schema is not SegmentEvent's
 * own (resolved by avro-c): decoded here on the producer thread. */
static int legacy_cb(void *ctx, const segd_event_t *ev, long rec, const char *decode_error)
{
    legacy_t *g = ctx;
    worker_t *w = &g->l->producer_w;
    if (!g->s && !(g->s = take_free(g->l)))
        return 1;
    g->s->kind = UNIT_READY;
    g->s->file = g->path;
    if (decode_error) {
        report(w, g->s, rec, decode_error);
    } else {
        segd_event_reset(&w->ev);
        if (segd_event_set_user(&w->ev, ev->user_id, ev->user_id_len)) {
            report(w, g->s, rec, "user_id too long");
        } else {
            w->ev.ts_ms = ev->ts_ms;
            w->ev.op = ev->op;
            memcpy(w->ev.source, ev->source, sizeof(ev->source));
            for (size_t i = 0; i < ev->n_segments; i++)
                if (segd_event_add_segment(&w->ev, &ev->segments[i]))
                    return g->failed = 1;
            if (add_event(w, g->s, rec))
                return g->failed = 1;
        }
    }
    if (g->s->n_items + g->s->skipped >= LEGACY_CHUNK)
        legacy_flush(g);
    return 0;
}

static int produce_legacy(loader_t *l, const char *path, uint64_t size)
{
    legacy_t g = {l, path, NULL, 0};
    char err[512];
    if (segd_avro_file_foreach(path, legacy_cb, &g, err, sizeof(err)) != SEGD_OK &&
        !g.failed) {
        /* an unreadable tail: what was read is applied, the rest reported */
        fprintf(l->o->errors, "%s: %s\n", path, err);
        count_producer_skip(l);
    }
    if (!g.s && !g.failed)
        g.s = take_free(l);
    if (g.s) {
        g.s->kind = UNIT_READY;
        g.s->file = path;
        g.s->bytes = size;
        g.s->failed = g.failed;
        legacy_flush(&g);
    }
    return g.failed ? -1 : 0;
}

static void ocf_tail_error(loader_t *l, const char *path, br_t *b, int64_t rec,
                           const char *what)
{
    fprintf(l->o->errors, "%s: %s after record %lld%s%s\n", path, what, (long long)rec,
            b->err == 1 ? ": " : "", b->err == 1 ? b->why : "");
    count_producer_skip(l);
}

/* The container's blocks, grouped into units of about OCF_UNIT bytes. */
static int produce_ocf_blocks(loader_t *l, br_t *b, const char *path, ocf_codec_t codec,
                              const uint8_t sync[16], uint64_t *accounted)
{
    int64_t rec = 0;
    slot_t *s = NULL;
    int rc = 0;
    for (;;) {
        int64_t count, size;
        uint8_t mark[16];
        if (br_long(b, &count)) {
            if (b->err != 2) /* a clean end is the end of input here */
                ocf_tail_error(l, path, b, rec, "unreadable container block");
            break;
        }
        /* a record takes at least a byte of the (at most OCF_MAX_BLOCK)
         * decompressed block: a larger count is damage, and would overflow
         * the record numbers */
        if (br_long(b, &size) || count < 0 || count > OCF_MAX_BLOCK || size < 0 ||
            size > OCF_MAX_BLOCK) {
            ocf_tail_error(l, path, b, rec, b->err == 2 ? "truncated container block"
                                                         : "corrupt container block");
            break;
        }
        if (s && s->in_len + (size_t)size > OCF_UNIT) {
            push_work(l, s);
            s = NULL;
        }
        if (!s) {
            if (!(s = take_free(l))) {
                rc = -1;
                break;
            }
            s->kind = UNIT_OCF;
            s->file = path;
            s->codec = codec;
        }
        ocf_block_t *blocks =
            segd_array_grow(s->blocks, &s->cap_blocks, s->n_blocks + 1, sizeof(*blocks));
        if (!blocks || grow_in(s, s->in_len + (size_t)size)) {
            fprintf(l->o->errors, "%s: out of memory\n", path);
            count_producer_skip(l);
            rc = -1;
            break;
        }
        s->blocks = blocks;
        if (br_read(b, s->in + s->in_len, (size_t)size) || br_read(b, mark, 16)) {
            ocf_tail_error(l, path, b, rec, "truncated container block");
            break;
        }
        if (memcmp(mark, sync, 16)) {
            ocf_tail_error(l, path, b, rec, "sync marker mismatch (corrupt file)");
            break;
        }
        s->blocks[s->n_blocks++] = (ocf_block_t){count, rec + 1, s->in_len, (size_t)size};
        s->in_len += (size_t)size;
        rec += count;
        uint64_t consumed = segd_source_consumed(b->src);
        s->bytes += consumed - *accounted;
        *accounted = consumed;
    }
    if (s && s->n_blocks)
        push_work(l, s);
    else if (s)
        give_back(l, s);
    return rc;
}

static int produce_ocf(loader_t *l, segd_source_t *src, const char *path, uint64_t *accounted)
{
    br_t *b = calloc(1, sizeof(*b));
    char *schema = NULL, codec_name[32] = "null";
    uint8_t magic[4], sync[16];
    uint64_t fp = 0;
    int rc = 0;
    if (!b) {
        fprintf(l->o->errors, "%s: out of memory\n", path);
        count_producer_skip(l);
        return -1;
    }
    b->src = src;
    if (br_read(b, magic, 4) || read_meta(b, &schema, codec_name, sizeof(codec_name)) ||
        br_read(b, sync, 16) || !schema) {
        fprintf(l->o->errors, "%s: not a readable Avro container file%s%s\n", path,
                b->err == 1 ? ": " : "", b->err == 1 ? b->why : "");
        count_producer_skip(l);
        goto out_free;
    }
    ocf_codec_t codec = !strcmp(codec_name, "null")      ? OCF_NULL
                        : !strcmp(codec_name, "deflate")   ? OCF_DEFLATE
                        : !strcmp(codec_name, "zstandard") ? OCF_ZSTD
                                                           : (ocf_codec_t)-1;
    if (segd_avro_fingerprint(schema, &fp) != SEGD_OK || fp != l->local_fp ||
        codec == (ocf_codec_t)-1) {
        /* another writer schema (resolved by avro-c) or codec: the old path */
        if (segd_source_kind(src) == SEGD_SOURCE_PLAIN) {
            rc = produce_legacy(l, path, segd_source_size(src));
            *accounted = segd_source_size(src);
        } else {
            fprintf(l->o->errors, "%s: a compressed container file must use SegmentEvent's "
                    "own schema and the null, deflate or zstandard codec (decompress it "
                    "to have the schema resolved)\n", path);
            count_producer_skip(l);
        }
        goto out_free;
    }
    rc = produce_ocf_blocks(l, b, path, codec, sync, accounted);
out_free:
    free(schema);
    free(b);
    return rc;
}

/* ---------- producer thread ---------- */

typedef struct producer_args {
    loader_t *l;
    char *const *paths;
    int n_paths;
} producer_args_t;

static void produce_file(loader_t *l, const char *path)
{
    char why[512];
    segd_source_t *src = NULL;
    uint8_t magic[4];
    uint64_t accounted = 0;
    ssize_t r = 0;
    size_t got = 0;
    if (segd_source_open(&src, path, why, sizeof(why)) != SEGD_OK) {
        fprintf(l->o->errors, "%s: %s\n", l->o->prog, why);
        count_producer_skip(l);
        return;
    }
    /* the inner format by its first decompressed bytes */
    while (got < 4 && (r = segd_source_read(src, magic + got, 4 - got, why, sizeof(why))) > 0)
        got += (size_t)r;
    segd_source_close(src);
    int ocf = got == 4 && !memcmp(magic, "Obj\x01", 4);
    /* reopened: each format's reader is then one straight pass */
    if (segd_source_open(&src, path, why, sizeof(why)) != SEGD_OK) {
        fprintf(l->o->errors, "%s: %s\n", l->o->prog, why);
        count_producer_skip(l);
        return;
    }
    if (ocf)
        produce_ocf(l, src, path, &accounted);
    else
        produce_json(l, src, path, &accounted);
    segd_source_close(src);
}

static void *producer_main(void *arg)
{
    producer_args_t *a = arg;
    loader_t *l = a->l;
    for (int i = 0; i < a->n_paths && !stopping(l); i++)
        produce_file(l, a->paths[i]);
    pthread_mutex_lock(&l->mu);
    l->producer_done = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_done);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------- the caller's side ---------- */

static uint64_t total_size(char *const *paths, int n)
{
    uint64_t t = 0;
    struct stat st;
    for (int i = 0; i < n; i++)
        if (!stat(paths[i], &st) && S_ISREG(st.st_mode))
            t += (uint64_t)st.st_size;
    return t;
}

/* Hands done chunks to cb until the producer and every slot are done. */
static segd_err_t consume(loader_t *l, segd_load_chunk_fn cb, void *ctx, segd_load_stats_t *st,
                          char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        size_t free_n = 0;
        for (slot_t *f = l->free_list; f; f = f->next)
            free_n++;
        if (!l->done.head && l->producer_done && free_n == l->n_slots)
            break;
        if (!l->done.head) {
            struct timespec ts;
            segd_realtime_after(&ts, 200); /* a signal does not wake a condvar */
            pthread_cond_timedwait(&l->cv_done, &l->mu, &ts);
            if (stopping(l)) { /* wake the producer waiting for a slot */
                st->stopped = 1;
                pthread_cond_broadcast(&l->cv_free);
            }
            continue;
        }
        slot_t *s = q_pop(&l->done);
        int skip = stopping(l);
        pthread_mutex_unlock(&l->mu);
        if (s->failed && !err)
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory while decoding");
        st->skipped += s->skipped;
        if (!skip && !err) {
            segd_load_chunk_t c = {s->file, s->items, s->n_items, s->segments, s->skipped,
                                   s->bytes};
            if (cb(ctx, &c)) {
                skip = 1;
            } else {
                st->events += s->n_items;
                st->segments += s->segments;
            }
        }
        pthread_mutex_lock(&l->mu);
        if (skip || err) {
            set_abort(l);
            st->stopped = 1;
            pthread_cond_broadcast(&l->cv_free);
        }
        s->next = l->free_list;
        l->free_list = s;
        pthread_cond_signal(&l->cv_free);
    }
    st->skipped += l->producer_skipped;
    pthread_mutex_unlock(&l->mu);
    return err;
}

segd_err_t segd_load_files(const segd_load_opts_t *o, char *const *paths, int n_paths,
                           segd_load_chunk_fn cb, void *ctx, segd_load_stats_t *st,
                           char *errstr, size_t n)
{
    loader_t l;
    int threads = o->threads < 1 ? 1 : o->threads;
    int started = 0, producer_started = 0;
    segd_err_t err = SEGD_ERR_NOMEM;
    memset(&l, 0, sizeof(l));
    memset(st, 0, sizeof(*st));
    st->bytes_total = total_size(paths, n_paths);
    l.o = o;
    l.json_block = o->limits.max_message + 64 * 1024 > JSON_BLOCK_MIN
                       ? o->limits.max_message + 64 * 1024
                       : JSON_BLOCK_MIN;
    l.n_slots = (size_t)threads * 2 + 2;
    pthread_mutex_init(&l.mu, NULL);
    pthread_cond_init(&l.cv_free, NULL);
    pthread_cond_init(&l.cv_work, NULL);
    pthread_cond_init(&l.cv_done, NULL);
    worker_t *ws = calloc((size_t)threads, sizeof(*ws));
    l.slots = calloc(l.n_slots, sizeof(*l.slots));
    if (!ws || !l.slots)
        goto out_free;
    for (size_t i = 0; i < l.n_slots; i++) {
        l.slots[i].next = l.free_list;
        l.free_list = &l.slots[i];
    }
    worker_init(&l.producer_w, &l);
    {
        segd_avro_codec_t *probe;
        if ((err = segd_avro_codec_new(&probe, NULL, NULL, errstr, n)))
            goto out_free;
        l.local_fp = segd_avro_codec_fingerprint(probe);
        segd_avro_codec_destroy(probe);
    }
    for (int i = 0; i < threads; i++) {
        worker_init(&ws[i], &l);
        if ((err = segd_avro_codec_new(&ws[i].codec, NULL, NULL, errstr, n)))
            goto out_join;
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i])) {
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "cannot start a thread");
            goto out_join;
        }
        started++;
    }
    producer_args_t pa = {&l, paths, n_paths};
    pthread_t producer;
    if (pthread_create(&producer, NULL, producer_main, &pa)) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "cannot start a thread");
        goto out_join;
    }
    producer_started = 1;
    err = consume(&l, cb, ctx, st, errstr, n);
    pthread_join(producer, NULL);
out_join:
    if (!producer_started) { /* let the workers see the end */
        pthread_mutex_lock(&l.mu);
        l.producer_done = 1;
        pthread_cond_broadcast(&l.cv_work);
        pthread_mutex_unlock(&l.mu);
    }
    for (int i = 0; i < started; i++)
        pthread_join(ws[i].th, NULL);
    for (int i = 0; i < threads; i++)
        if (ws[i].l)
            worker_free(&ws[i]);
    worker_free(&l.producer_w);
out_free:
    if (l.slots)
        for (size_t i = 0; i < l.n_slots; i++) {
            free(l.slots[i].in);
            free(l.slots[i].blocks);
            free(l.slots[i].items);
            segd_buf_free(&l.slots[i].arena);
        }
    free(l.slots);
    free(ws);
    pthread_cond_destroy(&l.cv_free);
    pthread_cond_destroy(&l.cv_work);
    pthread_cond_destroy(&l.cv_done);
    pthread_mutex_destroy(&l.mu);
    if (o->stop && *o->stop)
        st->stopped = 1;
    return err;
}
