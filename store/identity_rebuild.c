/* The offline rebuild of the identity graph (DESIGN §10.5). It loads every
 * id and edge into memory, recomputes the components with a union-find under
 * the component guard, and rewrites the `ids` family in bounded batches.
 * Batches before the last set the rebuild mark so that an interrupted rebuild
 * is refused by readers and writers until the next one completes. Called by
 * segd identity rebuild with no other writer running. */
#define _GNU_SOURCE /* qsort_r */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "store/identity.h"
#include "store/identity_int.h"
#include "store/store_int.h"

/* ---------- loading the graph ---------- */

/* One id of the rebuild: its bytes and its stored master in the arena. */
typedef struct rb_node {
    size_t off, moff;
    uint32_t len, mlen;
    int64_t first_seen_ms;
    uint32_t n_links;
    uint32_t parent, size;
    int derived; /* its `i` record is corrupt or absent: rebuilt from links */
} rb_node_t;

typedef struct rebuild {
    segd_store_t *s;
    const segd_ident_opts_t *o;
    segd_buf_t arena;
    rb_node_t *nodes;
    size_t n, cap;
    kvmap_t index;   /* id -> node number (4 bytes) */
    id_list_t old_m; /* masters with an `m` record before */
    uint32_t *order; /* nodes sorted by (root, id) */
    segd_ident_rebuild_stats_t st;
    segd_err_t err;
    int corrupt;
    char bad[80]; /* the ids key that cannot be rebuilt, printable */
} rebuild_t;

static const char *rb_id(const rebuild_t *r, const rb_node_t *x)
{
    return (const char *)r->arena.data + x->off;
}

static int rb_find_node(rebuild_t *r, const char *id, size_t len, uint32_t *out)
{
    kv_t *e = segd_ident_kv_find(&r->index, (const uint8_t *)id, len);
    if (!e || !e->key)
        return 0;
    memcpy(out, e->val, 4);
    return 1;
}

static segd_err_t rb_add(rebuild_t *r, const char *id, size_t len, const char *m, size_t mlen,
                         int64_t fs, uint32_t n_links)
{
    rb_node_t *v = segd_array_grow(r->nodes, &r->cap, r->n + 1, sizeof(*v));
    if (!v)
        return SEGD_ERR_NOMEM;
    r->nodes = v;
    uint32_t k = (uint32_t)r->n;
    rb_node_t *x = &v[r->n++];
    x->off = r->arena.len;
    x->len = (uint32_t)len;
    x->moff = x->off + len;
    x->mlen = (uint32_t)mlen;
    x->first_seen_ms = fs;
    x->n_links = n_links;
    x->parent = k;
    x->size = 1;
    x->derived = 0;
    segd_err_t err = segd_buf_append(&r->arena, id, len);
    if (!err)
        err = segd_buf_append(&r->arena, m, mlen);
    return err ? err : segd_ident_kv_set(&r->index, (const uint8_t *)id, len, &k, 4);
}

static int rb_ids_entry(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    rebuild_t *r = ctx;
    segd_ident_rec_t rec;
    if (kl < 2 || kl > SEGD_IDENT_MAX_ID + 1 || (k[0] != 'i' && k[0] != 'm') ||
        memchr(k + 1, 0, kl - 1)) {
        r->corrupt = 1;
        segd_ident_printable(r->bad, sizeof(r->bad), k, kl);
        return 1;
    }
    if (k[0] == 'm') { /* Not decoded, since every list is rewritten or deleted. */
        r->err = segd_ident_list_push(&r->old_m, (const char *)k + 1, kl - 1);
        return r->err != SEGD_OK;
    }
    if (segd_ident_rec_decode(v, vl, &rec)) {
        /* The record is rebuilt. rb_derive restores first_seen and n_links
         * from the id's edges and the components give its master. The
         * stored master "" never equals the new one, so it is rewritten. */
        r->err = rb_add(r, (const char *)k + 1, kl - 1, "", 0, INT64_MAX, 0);
        if (!r->err)
            r->nodes[r->n - 1].derived = 1;
        return r->err != SEGD_OK;
    }
    r->err = rb_add(r, (const char *)k + 1, kl - 1, rec.master, rec.master_len,
                    rec.first_seen_ms, rec.n_links);
    return r->err != SEGD_OK;
}

/* Finds the node of an edge's end. An end without an `i` record gets a
 * derived node. Its record was lost, or a store damaged in between never
 * wrote it. */
static int rb_node_of(rebuild_t *r, const char *id, size_t len, uint32_t *out)
{
    if (rb_find_node(r, id, len, out))
        return 0;
    if ((r->err = rb_add(r, id, len, "", 0, INT64_MAX, 0)))
        return 1;
    *out = (uint32_t)(r->n - 1);
    r->nodes[*out].derived = 1;
    return 0;
}

/* Rebuilds a derived node's record from its edges as DESIGN §10.2 defines
 * the fields. n_links counts the links keys that name it. first_seen is the
 * smallest ts_ms those edges hold. An edge keeps the ts of its LWW winner,
 * so this first_seen is at or after the true one, and equal to it when each
 * edge saw one event. */
static void rb_derive(rebuild_t *r, uint32_t x, const segd_link_state_t *st)
{
    rb_node_t *v = &r->nodes[x];
    if (!v->derived)
        return;
    v->n_links++;
    if (st->ts_ms < v->first_seen_ms)
        v->first_seen_ms = st->ts_ms;
}

static uint32_t rb_root(rebuild_t *r, uint32_t x)
{
    while (r->nodes[x].parent != x) {
        r->nodes[x].parent = r->nodes[r->nodes[x].parent].parent; /* halving */
        x = r->nodes[x].parent;
    }
    return x;
}

/* Unions the edge's ends in links key order, with the component guard
 * (min.weight may have been lowered since the online joins). */
static int rb_edge(void *ctx, const char *a, size_t al, const char *b, size_t bl,
                   const segd_link_state_t *st)
{
    rebuild_t *r = ctx;
    uint32_t x, y;
    if (rb_node_of(r, a, al, &x) || rb_node_of(r, b, bl, &y))
        return 1;
    rb_derive(r, x, st);
    rb_derive(r, y, st);
    if (!st->linked || !(st->weight >= r->o->min_weight))
        return 0;
    x = rb_root(r, x);
    y = rb_root(r, y);
    r->st.edges_used++;
    if (x == y)
        return 0;
    if (r->nodes[x].size + r->nodes[y].size > r->o->max_component) {
        r->st.refused++;
        return 0;
    }
    if (r->nodes[x].size < r->nodes[y].size) {
        uint32_t t = x;
        x = y;
        y = t;
    }
    r->nodes[y].parent = x;
    r->nodes[x].size += r->nodes[y].size;
    return 0;
}

static int rb_order_cmp(const void *p, const void *q, void *ctx)
{
    const rebuild_t *r = ctx;
    uint32_t a = *(const uint32_t *)p, b = *(const uint32_t *)q;
    uint32_t ra = r->nodes[a].parent, rb = r->nodes[b].parent; /* roots, flattened */
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return segd_ident_id_cmp(rb_id(r, &r->nodes[a]), r->nodes[a].len, rb_id(r, &r->nodes[b]),
                             r->nodes[b].len);
}

/* ---------- writing the components ---------- */

#define RB_BATCH_OPS 4096

typedef struct rb_writer {
    rebuild_t *r;
    segd_ident_t w; /* for segd_ident_fam_put, which uses its buffers, overlay and store */
    segd_batch_t *b;
    segd_ident_rebuild_cb cb;
    void *cctx;
    kvmap_t new_m; /* masters of components of more than one id */
    int64_t now_ms;
} rb_writer_t;

/* Writes the batch once it is full, and always when it is the last (the
 * one that clears the mark, even with nothing else in it). */
static segd_err_t rb_flush(rb_writer_t *wr, int last, char *errstr, size_t n)
{
    if (!last && segd_batch_count(wr->b) < RB_BATCH_OPS)
        return SEGD_OK;
    /* Every batch sets the epoch counter. A set can be repeated harmlessly,
     * and a rebuild cut short has then raised the epoch in the same batch as
     * its first change. */
    segd_batch_set_counter(wr->b, SEGD_IDENT_EPOCH_COUNTER, wr->w.epoch_ms);
    /* Every batch but the last sets the mark and the last clears it. The
     * ids family is then never a mix of two states without the mark saying
     * so. A rebuild that fits in one batch never sets it. */
    segd_batch_set_counter(wr->b, SEGD_IDENT_REBUILD_COUNTER, last ? 0 : wr->w.epoch_ms);
    if (wr->cb && wr->cb(wr->cctx, wr->b, NULL))
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_store_write(wr->r->s, wr->b, errstr, n);
    if (err)
        return err;
    segd_batch_clear(wr->b);
    segd_ident_kv_clear(&wr->w.overlay);
    return SEGD_OK;
}

/* Re-points the members of one component (order[from..to)) to its master. */
static segd_err_t rb_write_component(rb_writer_t *wr, size_t from, size_t to)
{
    rebuild_t *r = wr->r;
    const rb_node_t *m = &r->nodes[r->order[from]];
    for (size_t i = from + 1; i < to; i++) {
        const rb_node_t *x = &r->nodes[r->order[i]];
        if (segd_ident_older(x->first_seen_ms, rb_id(r, x), x->len, m->first_seen_ms,
                             rb_id(r, m), m->len))
            m = x;
    }
    const char *ms = rb_id(r, m);
    id_list_t *l = &wr->w.merged;
    l->n = 0;
    segd_err_t err = SEGD_OK;
    for (size_t i = from; !err && i < to; i++) {
        const rb_node_t *x = &r->nodes[r->order[i]];
        const char *xs = rb_id(r, x), *old = (const char *)r->arena.data + x->moff;
        if (x->derived && !x->n_links) { /* A corrupt record no edge names is deleted. */
            if (!(err = segd_ident_ids_key(&wr->w.key, 'i', xs, x->len)))
                err = segd_ident_fam_put(&wr->w, wr->b, FAM_IDS, wr->w.key.data,
                                         wr->w.key.len, NULL, 0);
            r->st.repaired++;
            continue;
        }
        r->st.repaired += x->derived ? 1u : 0u;
        if (to - from > 1 && (err = segd_ident_list_push(l, xs, x->len)))
            break;
        if (segd_ident_id_cmp(old, x->mlen, ms, m->len) == 0)
            continue;
        segd_ident_rec_t rec = {x->first_seen_ms, x->n_links, {0}, m->len};
        memcpy(rec.master, ms, m->len);
        if ((err = segd_ident_rec_store(&wr->w, wr->b, xs, x->len, &rec)))
            break;
        r->st.repointed++;
        segd_ident_change_t c = {xs, x->len, ms, m->len, wr->now_ms, m->first_seen_ms,
                                 wr->w.epoch_ms};
        if (wr->cb && wr->cb(wr->cctx, wr->b, &c))
            err = SEGD_ERR_NOMEM;
    }
    if (err || to - from == 1)
        return err;
    r->st.linked_components++;
    if ((err = segd_ident_members_store(&wr->w, wr->b, ms, m->len, l)))
        return err;
    uint32_t one = 1;
    return segd_ident_kv_set(&wr->new_m, (const uint8_t *)ms, m->len, &one, 4);
}

static segd_err_t rb_write(rb_writer_t *wr, void (*progress)(void *, uint64_t, uint64_t),
                           void *pctx, char *errstr, size_t n)
{
    rebuild_t *r = wr->r;
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < r->n;) {
        size_t j = i + 1;
        while (j < r->n && r->nodes[r->order[j]].parent == r->nodes[r->order[i]].parent)
            j++;
        err = rb_write_component(wr, i, j);
        if (!err)
            err = rb_flush(wr, 0, errstr, n);
        r->st.components++;
        i = j;
        if (progress)
            progress(pctx, i, r->n);
    }
    for (size_t i = 0; !err && i < r->old_m.n; i++) {
        const ident_id_t *m = &r->old_m.v[i];
        kv_t *e = segd_ident_kv_find(&wr->new_m, (const uint8_t *)m->s, m->len);
        if (!e || !e->key)
            err = segd_ident_members_store(&wr->w, wr->b, m->s, m->len, NULL);
    }
    return err ? err : rb_flush(wr, 1, errstr, n);
}

static segd_err_t rb_load(rebuild_t *r, char *errstr, size_t n)
{
    segd_err_t err = segd_ident_fam_scan(r->s, FAM_IDS, rb_ids_entry, r, errstr, n);
    if (!err && !r->err && !r->corrupt)
        err = segd_ident_scan_links(r->s, rb_edge, r, errstr, n);
    if (!err && r->err)
        err = segd_errf(r->err, errstr, n, "rebuild: %s", segd_err_str(r->err));
    if (!err && r->corrupt)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "rebuild: bad ids key %s", r->bad);
    if (err)
        return err;
    if (r->n && !(r->order = malloc(r->n * sizeof(*r->order))))
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < r->n; i++) {
        r->nodes[i].parent = rb_root(r, (uint32_t)i);
        r->order[i] = (uint32_t)i;
    }
    qsort_r(r->order, r->n, sizeof(*r->order), rb_order_cmp, r);
    r->st.ids = r->n;
    return SEGD_OK;
}

segd_err_t segd_ident_rebuild(segd_store_t *s, const segd_ident_opts_t *o,
                              void (*progress)(void *ctx, uint64_t done, uint64_t total),
                              void *pctx, segd_ident_rebuild_cb cb, void *cctx,
                              segd_ident_rebuild_stats_t *st, char *errstr,
                              size_t errstr_size)
{
    if (!segd_store_links_cf(s) || !segd_store_ids_cf(s) || segd_store_is_read_only(s))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "rebuild needs the store opened for writing");
    rebuild_t r = {.s = s, .o = o};
    rb_writer_t wr = {.r = &r, .cb = cb, .cctx = cctx, .now_ms = segd_wall_ms()};
    wr.w.store = s;
    wr.w.opts = *o;
    int64_t epoch = 0;
    segd_err_t err = segd_store_counter_get(s, SEGD_IDENT_EPOCH_COUNTER, &epoch, errstr,
                                            errstr_size);
    /* The new epoch is later than every epoch before, and reads as the
     * rebuild's wall clock. */
    wr.w.epoch_ms = epoch + 1 > wr.now_ms ? epoch + 1 : wr.now_ms;
    if (!err)
        err = rb_load(&r, errstr, errstr_size);
    if (!err)
        err = segd_batch_new(s, &wr.b);
    /* The last batch is written even when nothing was rewritten. A rebuild
     * starts an epoch whatever it found, and it clears the mark that an
     * interrupted rebuild left. */
    if (!err)
        err = rb_write(&wr, progress, pctx, errstr, errstr_size);
    if (st) {
        *st = r.st;
        st->epoch_ms = wr.w.epoch_ms;
    }
    segd_batch_destroy(wr.b);
    segd_ident_kv_clear(&wr.new_m);
    segd_ident_kv_clear(&wr.w.overlay);
    segd_buf_free(&wr.w.key);
    segd_buf_free(&wr.w.val);
    segd_buf_free(&wr.w.tmp);
    segd_ident_list_free(&wr.w.merged);
    segd_ident_kv_clear(&r.index);
    segd_ident_list_free(&r.old_m);
    segd_buf_free(&r.arena);
    free(r.nodes);
    free(r.order);
    return err;
}
