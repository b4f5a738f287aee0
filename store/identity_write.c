/* The online writer of the identity graph (DESIGN §10.3 and §10.4). A
 * segd_ident_t applies each link event into the caller's batch as an
 * incremental union-find over the `ids` family, after the super-node guard
 * has let it through. Its overlay lets the batch's later events read what
 * the earlier ones wrote. One handle per writer thread (consumer/links.c,
 * cli/cmd_identity.c); the invariants it keeps are in store/identity_int.h. */
#include <stdlib.h>
#include <string.h>

#include "store/identity.h"
#include "store/identity_int.h"
#include "store/store_int.h"

/* ---------- the handle ---------- */

segd_err_t segd_ident_new(segd_store_t *s, const segd_ident_opts_t *o, segd_ident_t **out,
                          char *errstr, size_t errstr_size)
{
    if (!segd_store_links_cf(s) || !segd_store_ids_cf(s))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "the store has no identity families (opened read-only?)");
    segd_ident_t *id = calloc(1, sizeof(*id));
    if (!id)
        return SEGD_ERR_NOMEM;
    id->store = s;
    if (o)
        id->opts = *o;
    else
        segd_ident_opts_default(&id->opts);
    segd_err_t err = segd_ident_rebuild_check(s, errstr, errstr_size);
    if (!err)
        err = segd_store_counter_get(s, SEGD_IDENT_SUPERNODE_COUNTER, &id->supernode_total,
                                     errstr, errstr_size);
    if (!err)
        err = segd_store_counter_get(s, SEGD_IDENT_EPOCH_COUNTER, &id->epoch_ms, errstr,
                                     errstr_size);
    if (err) {
        free(id);
        return err;
    }
    *out = id;
    return SEGD_OK;
}

void segd_ident_destroy(segd_ident_t *id)
{
    if (!id)
        return;
    segd_ident_kv_clear(&id->overlay);
    segd_buf_free(&id->key);
    segd_buf_free(&id->val);
    segd_buf_free(&id->tmp);
    segd_ident_list_free(&id->la);
    segd_ident_list_free(&id->lb);
    segd_ident_list_free(&id->merged);
    free(id);
}

/* The epoch is read again before the next batch, because a restore running
 * beside segd run (load/restore.c) may raise it while this handle lives. */
void segd_ident_reset(segd_ident_t *id)
{
    segd_ident_kv_clear(&id->overlay);
    id->epoch_stale = 1;
}
uint64_t segd_ident_applied(const segd_ident_t *id) { return id->applied; }
int64_t segd_ident_supernode_total(const segd_ident_t *id) { return id->supernode_total; }

/* ---------- union-find: masters, merges and re-pointing ---------- */

static int ident_cmp(const void *x, const void *y)
{
    const ident_id_t *a = x, *b = y;
    return segd_ident_id_cmp(a->s, a->len, b->s, b->len);
}

/* Re-points every member of l to master w, telling the callback. */
static segd_err_t repoint(segd_ident_t *id, segd_batch_t *b, const id_list_t *l,
                          const char *w, size_t wlen, int64_t w_fs, char *errstr, size_t n)
{
    for (size_t i = 0; i < l->n; i++) {
        segd_ident_rec_t r;
        int found;
        segd_err_t err = segd_ident_rec_load(id->store, &id->overlay, &id->key, &id->val, l->v[i].s,
                                             l->v[i].len, &r, &found, errstr, n);
        if (!err && !found)
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "member %.*s has no ids record",
                            (int)l->v[i].len, l->v[i].s);
        if (err)
            return err;
        if (segd_ident_id_cmp(r.master, r.master_len, w, wlen) == 0)
            continue;
        memcpy(r.master, w, wlen);
        r.master_len = wlen;
        if ((err = segd_ident_rec_store(id, b, l->v[i].s, l->v[i].len, &r)))
            return err;
        segd_ident_change_t c = {l->v[i].s, l->v[i].len, w, wlen, id->ts_ms, w_fs, id->epoch_ms};
        if (id->cb && id->cb(id->cb_ctx, &c))
            return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

/* Makes w the master of the union of the components whose masters are m1
 * and m2 (the same component when m1 equals m2; w is a member of one). It
 * merges the member lists, drops the old lists and re-points the members. */
static segd_err_t merge_into(segd_ident_t *id, segd_batch_t *b, const ident_id_t *w,
                             int64_t w_fs, const ident_id_t *m1, const ident_id_t *m2,
                             char *errstr, size_t n)
{
    segd_store_t *s = id->store;
    id->merged.n = 0;
    segd_err_t err = segd_ident_members_load(s, &id->overlay, &id->key, &id->val, m1->s, m1->len,
                                             &id->la, errstr, n);
    int two = ident_cmp(m1, m2) != 0;
    if (!err && two)
        err = segd_ident_members_load(s, &id->overlay, &id->key, &id->val, m2->s, m2->len, &id->lb,
                                      errstr, n);
    for (size_t i = 0; !err && i < id->la.n; i++)
        err = segd_ident_list_push(&id->merged, id->la.v[i].s, id->la.v[i].len);
    for (size_t i = 0; !err && two && i < id->lb.n; i++)
        err = segd_ident_list_push(&id->merged, id->lb.v[i].s, id->lb.v[i].len);
    if (err)
        return err;
    qsort(id->merged.v, id->merged.n, sizeof(ident_id_t), ident_cmp);
    /* A member in both lists must count once against the guard. Lists
     * overlap in a damaged store or one written by a half-applied event. */
    size_t k = 0;
    for (size_t i = 0; i < id->merged.n; i++)
        if (!k || ident_cmp(&id->merged.v[k - 1], &id->merged.v[i]))
            id->merged.v[k++] = id->merged.v[i];
    id->merged.n = k;
    if (ident_cmp(m1, w) && (err = segd_ident_members_store(id, b, m1->s, m1->len, NULL)))
        return err;
    if (two && ident_cmp(m2, w) && (err = segd_ident_members_store(id, b, m2->s, m2->len, NULL)))
        return err;
    if ((err = segd_ident_members_store(id, b, w->s, w->len, &id->merged)))
        return err;
    return repoint(id, b, &id->merged, w->s, w->len, w_fs, errstr, n);
}

/* The master of x and its record (x's own when x is its own master). */
static segd_err_t master_of(segd_ident_t *id, const ident_id_t *x, ident_id_t *m,
                            segd_ident_rec_t *mr, char *errstr, size_t n)
{
    int found;
    segd_ident_rec_t r;
    segd_err_t err = segd_ident_rec_load(id->store, &id->overlay, &id->key, &id->val, x->s,
                                         x->len, &r, &found, errstr, n);
    if (!err && !found)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%.*s has no ids record", (int)x->len,
                        x->s);
    if (err)
        return err;
    memcpy(m->s, r.master, r.master_len);
    m->len = r.master_len;
    if (ident_cmp(m, x) == 0) {
        *mr = r;
        return SEGD_OK;
    }
    err = segd_ident_rec_load(id->store, &id->overlay, &id->key, &id->val, m->s, m->len, mr, &found,
                              errstr, n);
    if (!err && !found)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "master %.*s has no ids record",
                        (int)m->len, m->s);
    return err;
}

/* After x's first-seen moved back: x becomes its component's master if it
 * is now older than the master. */
static segd_err_t promote_if_older(segd_ident_t *id, segd_batch_t *b, const ident_id_t *x,
                                   int64_t fs, char *errstr, size_t n)
{
    ident_id_t m;
    segd_ident_rec_t mr;
    segd_err_t err = master_of(id, x, &m, &mr, errstr, n);
    if (err || ident_cmp(&m, x) == 0 ||
        !segd_ident_older(fs, x->s, x->len, mr.first_seen_ms, m.s, m.len))
        return err;
    return merge_into(id, b, x, fs, &m, &m, errstr, n);
}

/* Joins the components of a and b when their masters differ. */
static segd_err_t join(segd_ident_t *id, segd_batch_t *b, const ident_id_t *a,
                       const ident_id_t *bb, char *errstr, size_t n)
{
    ident_id_t ma, mb;
    segd_ident_rec_t ra, rb;
    segd_err_t err = master_of(id, a, &ma, &ra, errstr, n);
    if (!err)
        err = master_of(id, bb, &mb, &rb, errstr, n);
    if (err || ident_cmp(&ma, &mb) == 0)
        return err;
    int a_wins = segd_ident_older(ra.first_seen_ms, ma.s, ma.len, rb.first_seen_ms, mb.s, mb.len);
    return merge_into(id, b, a_wins ? &ma : &mb, a_wins ? ra.first_seen_ms : rb.first_seen_ms,
                      &ma, &mb, errstr, n);
}

/* ---------- the super-node guard ---------- */

/* The size of x's component (x unknown: 1). */
static segd_err_t component_size(segd_ident_t *id, const char *x, size_t len,
                                 const segd_ident_rec_t *r, int found, size_t *size,
                                 char *errstr, size_t n)
{
    const char *m = found ? r->master : x;
    size_t ml = found ? r->master_len : len;
    segd_err_t err = segd_ident_members_load(id->store, &id->overlay, &id->key, &id->val, m,
                                             ml, &id->la, errstr, n);
    *size = id->la.n;
    return err;
}

/* The super-node guard (DESIGN §10.4). It decides whether ev is refused
 * before anything of it is written. */
static segd_err_t guard(segd_ident_t *id, const segd_link_event_t *ev,
                        const segd_ident_rec_t *ra, int fa, const segd_ident_rec_t *rb, int fb,
                        int new_edge, segd_ident_result_t *result, char *errstr, size_t n)
{
    *result = SEGD_IDENT_APPLIED;
    if (new_edge && ((fa && ra->n_links >= id->opts.max_links) ||
                     (fb && rb->n_links >= id->opts.max_links))) {
        *result = SEGD_IDENT_SUPERNODE_LINKS;
        return SEGD_OK;
    }
    if (!segd_link_joins(&id->opts, ev->op, ev->weight))
        return SEGD_OK;
    const char *ma = fa ? ra->master : ev->id_a, *mb = fb ? rb->master : ev->id_b;
    size_t mal = fa ? ra->master_len : ev->id_a_len, mbl = fb ? rb->master_len : ev->id_b_len;
    if (segd_ident_id_cmp(ma, mal, mb, mbl) == 0)
        return SEGD_OK;
    size_t sa, sb;
    segd_err_t err = component_size(id, ev->id_a, ev->id_a_len, ra, fa, &sa, errstr, n);
    if (!err)
        err = component_size(id, ev->id_b, ev->id_b_len, rb, fb, &sb, errstr, n);
    if (!err && sa + sb > id->opts.max_component)
        *result = SEGD_IDENT_SUPERNODE_COMPONENT;
    return err;
}

/* ---------- one event: the edge, the records, the join ---------- */

/* Step 1 of DESIGN §10.3 reads the edge's register into st, with *found = 0
 * when the pair has no edge yet (the event then adds one). edge_store
 * writes the LWW join of that register and the event. */
static segd_err_t edge_load(segd_ident_t *id, const segd_link_event_t *ev,
                            segd_link_state_t *st, int *found, char *errstr, size_t n)
{
    segd_err_t err = segd_link_key(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len, &id->key);
    if (!err)
        err = segd_ident_fam_get(id->store, NULL, &id->overlay, FAM_LINKS, id->key.data,
                                 id->key.len, &id->val, found, errstr, n);
    if (!err && *found && segd_link_state_decode(id->val.data, id->val.len, st))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad links value of %.*s and %.*s",
                        (int)ev->id_a_len, ev->id_a, (int)ev->id_b_len, ev->id_b);
    return err;
}

static segd_err_t edge_store(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                             const segd_link_state_t *old, int found)
{
    segd_link_state_t e = {ev->ts_ms, ev->weight, ev->op == SEGD_LINK};
    segd_link_state_t st = found ? segd_link_state_join(old, &e) : e;
    uint8_t v[LINK_VALUE_LEN];
    segd_link_state_encode(&st, v);
    segd_err_t err = segd_link_key(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len, &id->key);
    return err ? err
               : segd_ident_fam_put(id, b, FAM_LINKS, id->key.data, id->key.len, v, sizeof(v));
}

/* Step 2 writes an id's record with first_seen lowered to the event's time
 * and a new edge counted. An unknown id starts as its own master.
 * *older_now says whether first_seen moved back, which may make x the
 * master of its component (promote_if_older). */
static segd_err_t touch_id(segd_ident_t *id, segd_batch_t *b, const char *x, size_t len,
                           segd_ident_rec_t *r, int found, int new_edge, int *older_now)
{
    if (!found) {
        r->first_seen_ms = id->ts_ms;
        r->n_links = 0;
        memcpy(r->master, x, len);
        r->master_len = len;
    }
    *older_now = found && id->ts_ms < r->first_seen_ms;
    if (id->ts_ms < r->first_seen_ms)
        r->first_seen_ms = id->ts_ms;
    r->n_links += new_edge ? 1u : 0u;
    return segd_ident_rec_store(id, b, x, len, r);
}

static segd_err_t refuse(segd_ident_t *id, segd_batch_t *b)
{
    id->refused++;
    id->supernode_total++;
    segd_batch_set_counter(b, SEGD_IDENT_SUPERNODE_COUNTER, id->supernode_total);
    return SEGD_OK;
}

static segd_err_t apply_checked(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                                segd_ident_result_t *result, char *errstr, size_t n)
{
    segd_ident_rec_t ra, rb;
    segd_link_state_t st;
    int fa, fb, fe, oa, ob;
    segd_err_t err = segd_ident_rec_load(id->store, &id->overlay, &id->key, &id->val, ev->id_a,
                                         ev->id_a_len, &ra, &fa, errstr, n);
    if (!err)
        err = segd_ident_rec_load(id->store, &id->overlay, &id->key, &id->val, ev->id_b,
                                  ev->id_b_len, &rb, &fb, errstr, n);
    if (!err)
        err = edge_load(id, ev, &st, &fe, errstr, n);
    if (!err)
        err = guard(id, ev, &ra, fa, &rb, fb, !fe, result, errstr, n);
    if (err || *result != SEGD_IDENT_APPLIED)
        return err ? err : refuse(id, b);
    ident_id_t a, bb;
    memcpy(a.s, ev->id_a, a.len = ev->id_a_len);
    memcpy(bb.s, ev->id_b, bb.len = ev->id_b_len);
    if ((err = edge_store(id, b, ev, &st, fe)) ||
        (err = touch_id(id, b, a.s, a.len, &ra, fa, !fe, &oa)) ||
        (err = touch_id(id, b, bb.s, bb.len, &rb, fb, !fe, &ob)))
        return err;
    if (oa && (err = promote_if_older(id, b, &a, ra.first_seen_ms, errstr, n)))
        return err;
    if (ob && (err = promote_if_older(id, b, &bb, rb.first_seen_ms, errstr, n)))
        return err;
    if (segd_link_joins(&id->opts, ev->op, ev->weight))
        err = join(id, b, &a, &bb, errstr, n);
    if (!err)
        id->applied++;
    return err;
}

segd_err_t segd_ident_apply(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                            segd_ident_change_cb cb, void *ctx, segd_ident_result_t *result,
                            char *errstr, size_t errstr_size)
{
    segd_err_t err = segd_link_event_check(ev, errstr, errstr_size);
    if (err)
        return err;
    if (id->epoch_stale) {
        if ((err = segd_store_counter_get(id->store, SEGD_IDENT_EPOCH_COUNTER, &id->epoch_ms,
                                          errstr, errstr_size)))
            return err;
        id->epoch_stale = 0;
    }
    id->cb = cb;
    id->cb_ctx = ctx;
    id->ts_ms = ev->ts_ms;
    err = apply_checked(id, b, ev, result, errstr, errstr_size);
    id->cb = NULL;
    if (err == SEGD_ERR_NOMEM && !errstr[0])
        segd_errf(err, errstr, errstr_size, "identity apply: out of memory");
    return err;
}
