/* Tests for store/identity_*.c (DESIGN §10): the codecs, the event checks,
 * and a model test: random LINK/UNLINK events with weights, duplicated and
 * shuffled, applied in random batches, against a reference union-find with
 * the master rule; membership changes replayed equal the store; linked reads
 * equal the §3 join of the members' segments; the super-node guard; the
 * offline rebuild against the model's components over the final edges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <rocksdb/c.h>

#include "consumer/apply.h"
#include "store/identity.h"
#include "store/identity_components.h"
#include "store/store_int.h" /* writing junk into the graph's families */
#include "store_util.h"

#define NOW_MS 1800000000000LL
#define T0 (NOW_MS - 3600000)
#define N 30      /* ids u00..u29: bytewise order = index order */
#define SEGS 12   /* segment ids drawn from 0..SEGS-1: members overlap */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *name(int i)
{
    static char names[N][8];
    snprintf(names[i], sizeof(names[i]), "u%02d", i);
    return names[i];
}

/* The index of "uNN" (ids handed to callbacks are not NUL-terminated). */
static int idx(const char *id)
{
    return (id[1] - '0') * 10 + (id[2] - '0');
}

static segd_link_event_t link_ev(int a, int b, segd_link_op_t op, int64_t ts, double w)
{
    segd_link_event_t e = {name(a), 3, name(b), 3, op, ts, w};
    return e;
}

/* ---------- the reference model ---------- */

typedef struct model {
    int64_t fs[N]; /* 0 = never named */
    int parent[N];
    segd_link_state_t edge[N][N];
    int has_edge[N][N];
} model_t;

static void model_init(model_t *m)
{
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < N; i++)
        m->parent[i] = i;
}

static int model_root(const model_t *m, int x)
{
    while (m->parent[x] != x)
        x = m->parent[x];
    return x;
}

static void model_union(model_t *m, int a, int b)
{
    int ra = model_root(m, a), rb = model_root(m, b);
    if (ra != rb)
        m->parent[ra] = rb;
}

static void model_apply(model_t *m, int a, int b, const segd_link_event_t *e, double min_w)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    segd_link_state_t st = {e->ts_ms, e->weight, e->op == SEGD_LINK};
    m->edge[lo][hi] = m->has_edge[lo][hi] ? segd_link_state_join(&m->edge[lo][hi], &st) : st;
    m->has_edge[lo][hi] = 1;
    for (int k = 0; k < 2; k++) {
        int x = k ? b : a;
        if (!m->fs[x] || e->ts_ms < m->fs[x])
            m->fs[x] = e->ts_ms;
    }
    if (e->op == SEGD_LINK && e->weight >= min_w)
        model_union(m, a, b);
}

/* The master of x's component: the smallest (first_seen, index). */
static int model_master(const model_t *m, int x)
{
    if (!m->fs[x])
        return x;
    int r = model_root(m, x), best = -1;
    for (int i = 0; i < N; i++)
        if (m->fs[i] && model_root(m, i) == r &&
            (best < 0 || m->fs[i] < m->fs[best] || (m->fs[i] == m->fs[best] && i < best)))
            best = i;
    return best;
}

/* The offline components: over the final edges, linked and >= min_w. */
static void model_rebuild(const model_t *m, model_t *out, double min_w)
{
    *out = *m;
    for (int i = 0; i < N; i++)
        out->parent[i] = i;
    for (int a = 0; a < N; a++)
        for (int b = a + 1; b < N; b++)
            if (m->has_edge[a][b] && m->edge[a][b].linked && m->edge[a][b].weight >= min_w)
                model_union(out, a, b);
}

/* ---------- store side ---------- */

typedef struct members {
    int ids[N + 1];
    int n;
} members_t;

static int collect(void *ctx, const char *m, size_t len)
{
    members_t *ms = ctx;
    assert_int_equal(len, 3);
    ms->ids[ms->n++] = idx(m);
    return 0;
}

/* The store's component of x equals the model's, master first. */
static void expect_component(segd_store_t *s, const model_t *m, int x)
{
    members_t got = {0};
    char err[256] = "";
    assert_int_equal(segd_ident_members(s, name(x), 3, collect, &got, err, sizeof(err)),
                     SEGD_OK);
    int master = model_master(m, x), r = model_root(m, x), n = 0;
    assert_int_equal(got.ids[0], master);
    for (int i = 0; i < N; i++)
        if (i == x || (m->fs[i] && m->fs[x] && model_root(m, i) == r))
            n++;
    assert_int_equal(got.n, n);
    for (int k = 1; k < got.n; k++) {
        assert_int_equal(model_root(m, got.ids[k]), r);
        if (k > 1)
            assert_true(got.ids[k] > got.ids[k - 1]);
    }
}

static void expect_graph(segd_store_t *s, const model_t *m)
{
    char err[256] = "";
    for (int x = 0; x < N; x++) {
        expect_component(s, m, x);
        for (int y = 0; y < N; y++) {
            int c = -1;
            segd_ident_rec_t rec;
            assert_int_equal(segd_ident_check(s, name(x), 3, name(y), 3, &c, &rec, err,
                                              sizeof(err)),
                             SEGD_OK);
            int want = x == y || (m->fs[x] && m->fs[y] && model_root(m, x) == model_root(m, y));
            assert_int_equal(c, want);
            if (c)
                assert_int_equal(idx(rec.master), model_master(m, x));
        }
    }
}

typedef struct edge_check {
    const model_t *m;
    int n;
} edge_check_t;

static int check_edge(void *ctx, const char *a, size_t al, const char *b, size_t bl,
                      const segd_link_state_t *st)
{
    edge_check_t *ec = ctx;
    assert_int_equal(al, 3);
    assert_int_equal(bl, 3);
    int x = idx(a), y = idx(b);
    assert_true(x < y);
    assert_true(ec->m->has_edge[x][y]);
    const segd_link_state_t *w = &ec->m->edge[x][y];
    assert_int_equal(st->ts_ms, w->ts_ms);
    assert_int_equal(st->linked, w->linked);
    assert_true(st->weight == w->weight);
    ec->n++;
    return 0;
}

static void expect_edges(segd_store_t *s, const model_t *m)
{
    edge_check_t ec = {m, 0};
    char err[256] = "";
    assert_int_equal(segd_ident_scan_links(s, check_edge, &ec, err, sizeof(err)), SEGD_OK);
    int want = 0;
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++)
            want += m->has_edge[a][b];
    assert_int_equal(ec.n, want);
}

/* Membership changes replayed onto "every id is its own master". */
typedef struct replay {
    int master[N];
    int changes;
} replay_t;

static int on_change(void *ctx, const segd_ident_change_t *c)
{
    replay_t *r = ctx;
    assert_int_equal(c->id_len, 3);
    assert_int_equal(c->master_len, 3);
    r->master[idx(c->id)] = idx(c->master);
    r->changes++;
    return 0;
}

typedef struct gen {
    segd_link_event_t ev[1024];
    int a[1024], b[1024];
    int n;
} gen_t;

static void generate(gen_t *g, uint64_t *seed, int n_events)
{
    static const double weights[] = {0.3, 0.5, 0.7, 1.0};
    g->n = 0;
    for (int i = 0; i < n_events; i++) {
        int a = (int)(rng_next(seed) % N), b = (int)(rng_next(seed) % (N - 1));
        if (b >= a)
            b++;
        segd_link_op_t op = rng_next(seed) % 4 == 0 ? SEGD_UNLINK : SEGD_LINK;
        /* a narrow clock: ties of ts (edges) and of first-seen (masters) */
        int64_t ts = T0 + (int64_t)(rng_next(seed) % 200);
        g->a[g->n] = a;
        g->b[g->n] = b;
        g->ev[g->n++] = link_ev(a, b, op, ts, weights[rng_next(seed) % 4]);
        if (rng_next(seed) % 5 == 0) { /* a duplicate, sometimes with ids swapped */
            g->a[g->n] = b;
            g->b[g->n] = a;
            g->ev[g->n] = g->ev[g->n - 1];
            g->ev[g->n].id_a = name(b);
            g->ev[g->n++].id_b = name(a);
        }
    }
}

static void shuffle(gen_t *g, uint64_t *seed)
{
    for (int i = g->n - 1; i > 0; i--) {
        int j = (int)(rng_next(seed) % (uint64_t)(i + 1));
        segd_link_event_t t = g->ev[i];
        int ta = g->a[i], tb = g->b[i];
        g->ev[i] = g->ev[j];
        g->a[i] = g->a[j];
        g->b[i] = g->b[j];
        g->ev[j] = t;
        g->a[j] = ta;
        g->b[j] = tb;
    }
}

/* Applies g in random batches, each written with an offset as segd run
 * does, the overlay reset after every write. */
static void apply_all(segd_store_t *s, const gen_t *g, uint64_t *seed, replay_t *rp)
{
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    char err[256] = "";
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int i = 0; i < g->n;) {
        int k = 1 + (int)(rng_next(seed) % 16);
        for (; k > 0 && i < g->n; k--, i++) {
            segd_ident_result_t res = -1;
            assert_int_equal(segd_ident_apply(id, b, &g->ev[i], on_change, rp, &res, err,
                                              sizeof(err)),
                             SEGD_OK);
            assert_int_equal(res, SEGD_IDENT_APPLIED);
        }
        segd_batch_set_offset(b, "segments.links", 0, i);
        assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
        segd_batch_clear(b);
        segd_ident_reset(id);
    }
    segd_batch_destroy(b);
    segd_ident_destroy(id);
}

/* ---------- segments: the §3 join across members ---------- */

typedef struct segs_model {
    segd_profile_t p[N]; /* each id's events joined entry by entry */
} segs_model_t;

static void join_into(segd_profile_t *acc, const segd_entry_t *e)
{
    for (size_t i = 0; i < acc->n; i++)
        if (acc->entries[i].segment_id == e->segment_id) {
            acc->entries[i] = *segd_entry_join(&acc->entries[i], e);
            return;
        }
    assert_int_equal(segd_profile_push(acc, e), SEGD_OK);
}

static void write_segments(segd_store_t *s, segs_model_t *sm, uint64_t *seed)
{
    segd_applier_t ap;
    segd_event_t ev;
    segd_profile_t op;
    char err[256] = "";
    segd_profile_init(&op);
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    for (int x = 0; x < N; x++) {
        segd_profile_init(&sm->p[x]);
        for (int e = 0; e < 3; e++) {
            segd_event_reset(&ev);
            segd_event_set_user(&ev, name(x), 3);
            ev.ts_ms = T0 + (int64_t)(rng_next(seed) % 50) * 1000;
            ev.op = rng_next(seed) % 5 == 0 ? SEGD_OP_REMOVE : SEGD_OP_UPSERT;
            for (int k = 0; k < 3; k++) {
                segd_seg_update_t u = {(int64_t)(rng_next(seed) % SEGS),
                                       86400 * (1 + (int32_t)(rng_next(seed) % 30)),
                                       (int32_t)(rng_next(seed) % 3), x};
                segd_event_add_segment(&ev, &u);
            }
            assert_int_equal(segd_event_to_profile(&ev, segd_store_granularity(s), &op),
                             SEGD_OK);
            for (size_t i = 0; i < op.n; i++)
                join_into(&sm->p[x], &op.entries[i]);
            assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
        }
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_profile_free(&op);
}

static void expect_linked(segd_store_t *s, const model_t *m, const segs_model_t *sm)
{
    segd_profile_t got, want;
    segd_profile_init(&got);
    segd_profile_init(&want);
    char err[256] = "";
    for (int x = 0; x < N; x++) {
        segd_profile_clear(&want);
        for (int i = 0; i < N; i++)
            if (i == x || (m->fs[i] && m->fs[x] && model_root(m, i) == model_root(m, x)))
                for (size_t k = 0; k < sm->p[i].n; k++)
                    join_into(&want, &sm->p[i].entries[k]);
        segd_profile_normalize(&want);
        members_t mem = {0};
        assert_int_equal(segd_ident_get_linked(s, name(x), 3, &got, collect, &mem, err,
                                               sizeof(err)),
                         SEGD_OK);
        assert_int_equal(mem.ids[0], model_master(m, x));
        assert_int_equal(got.n, want.n);
        for (size_t k = 0; k < got.n; k++)
            assert_memory_equal(&got.entries[k], &want.entries[k], sizeof(segd_entry_t));
    }
    segd_profile_free(&got);
    segd_profile_free(&want);
}

/* ---------- tests ---------- */

static void test_codecs(void **state)
{
    (void)state;
    segd_buf_t k = {0};
    assert_int_equal(segd_link_key("b", 1, "a", 1, &k), SEGD_OK);
    assert_int_equal(k.len, 3);
    assert_memory_equal(k.data, "a\0b", 3);
    assert_int_equal(segd_link_key("ab", 2, "a", 1, &k), SEGD_OK);
    assert_memory_equal(k.data, "a\0ab", 4);
    segd_buf_free(&k);

    segd_link_state_t x = {5, 0.7, 1}, y = {5, 0.2, 0}, z = {6, 0.1, 1}, d;
    uint8_t v[18];
    segd_link_state_encode(&x, v);
    assert_int_equal(segd_link_state_decode(v, sizeof(v), &d), SEGD_OK);
    assert_int_equal(d.ts_ms, 5);
    assert_true(d.weight == 0.7 && d.linked == 1);
    v[17] = 7;
    assert_int_equal(segd_link_state_decode(v, sizeof(v), &d), SEGD_ERR_CORRUPT);
    assert_int_equal(segd_link_state_decode(v, 17, &d), SEGD_ERR_CORRUPT);
    /* UNLINK wins a tie of ts; a larger ts wins; commutative */
    assert_int_equal(segd_link_state_join(&x, &y).linked, 0);
    assert_int_equal(segd_link_state_join(&y, &x).linked, 0);
    assert_int_equal(segd_link_state_join(&y, &z).ts_ms, 6);
    assert_int_equal(segd_link_state_join(&z, &y).ts_ms, 6);
    segd_link_state_t x2 = {5, 0.9, 1};
    assert_true(segd_link_state_join(&x, &x2).weight == 0.9);
    assert_true(segd_link_state_join(&x2, &x).weight == 0.9);
}

static void test_event_check(void **state)
{
    (void)state;
    char err[256];
    segd_link_event_t e = {"a", 1, "b", 1, SEGD_LINK, T0, 1.0};
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_OK);
    e.id_b = "a";
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_ERR_INVALID);
    e.id_b = "b\0c";
    e.id_b_len = 3;
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_ERR_INVALID);
    e.id_b_len = 0;
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_ERR_INVALID);
    e.id_b = "b";
    e.id_b_len = 1;
    e.weight = 1.5;
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_ERR_INVALID);
    e.weight = 0.0 / 0.0;
    assert_int_equal(segd_link_event_check(&e, err, sizeof(err)), SEGD_ERR_INVALID);
}

static void test_model(void **state)
{
    test_dir_t *f = *state;
    static model_t m, off;
    static gen_t g;
    static segs_model_t sm;
    char dir[96], err[256] = "";
    for (uint64_t round = 0; round < 6; round++) {
        uint64_t seed = 0x9e3779b97f4a7c15ull + round * 7919;
        snprintf(dir, sizeof(dir), "%s/r%d", f->dir, (int)round);
        segd_store_t *s = test_store_open(dir, NOW_MS);
        generate(&g, &seed, 20 + (int)(round * 25));
        shuffle(&g, &seed);
        model_init(&m);
        for (int i = 0; i < g.n; i++)
            model_apply(&m, g.a[i], g.b[i], &g.ev[i], SEGD_IDENT_MIN_WEIGHT);
        replay_t rp;
        for (int i = 0; i < N; i++)
            rp.master[i] = i;
        rp.changes = 0;
        apply_all(s, &g, &seed, &rp);
        expect_graph(s, &m);
        expect_edges(s, &m);
        for (int x = 0; x < N; x++) /* the change stream's view equals the store */
            assert_int_equal(rp.master[x], model_master(&m, x));
        write_segments(s, &sm, &seed);
        expect_linked(s, &m, &sm);

        /* a second pass of the same events in another order changes nothing */
        rp.changes = 0;
        shuffle(&g, &seed);
        apply_all(s, &g, &seed, &rp);
        assert_int_equal(rp.changes, 0);
        expect_graph(s, &m);

        segd_ident_opts_t o;
        segd_ident_opts_default(&o);
        segd_ident_rebuild_stats_t st;
        assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err,
                                            sizeof(err)),
                         SEGD_OK);
        model_rebuild(&m, &off, o.min_weight);
        expect_graph(s, &off);
        expect_linked(s, &off, &sm);
        assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err,
                                            sizeof(err)),
                         SEGD_OK);
        assert_int_equal(st.repointed, 0); /* idempotent */
        expect_graph(s, &off);
        for (int x = 0; x < N; x++)
            segd_profile_free(&sm.p[x]);
        segd_store_close(s);
    }
}

static void test_supernode(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    segd_ident_opts_t o;
    segd_ident_opts_default(&o);
    o.max_component = 3;
    o.max_links = 3;
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    assert_int_equal(segd_ident_new(s, &o, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_ident_result_t res;
    segd_link_event_t e[] = {link_ev(0, 1, SEGD_LINK, T0, 1), link_ev(1, 2, SEGD_LINK, T0 + 1, 1),
                             link_ev(3, 4, SEGD_LINK, T0 + 2, 1)};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(segd_ident_apply(id, b, &e[i], NULL, NULL, &res, err, sizeof(err)),
                         SEGD_OK);
        assert_int_equal(res, SEGD_IDENT_APPLIED);
    }
    /* {0,1,2} + {3,4} = 5 > 3: refused, nothing written */
    segd_link_event_t big = link_ev(2, 3, SEGD_LINK, T0 - 100, 1);
    assert_int_equal(segd_ident_apply(id, b, &big, NULL, NULL, &res, err, sizeof(err)), SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_SUPERNODE_COMPONENT);
    /* a weak link between them joins nothing: applied */
    segd_link_event_t weak = link_ev(2, 3, SEGD_LINK, T0 + 3, 0.1);
    assert_int_equal(segd_ident_apply(id, b, &weak, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_APPLIED);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_clear(b);
    segd_ident_reset(id);
    int c = -1;
    assert_int_equal(segd_ident_check(s, name(2), 3, name(3), 3, &c, NULL, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(c, 0);
    segd_ident_rec_t r;
    assert_int_equal(segd_ident_get(s, name(3), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_int_equal(r.first_seen_ms, T0 + 2); /* the refused event's ts did not count */
    int64_t total = 0;
    assert_int_equal(segd_store_counter_get(s, SEGD_IDENT_SUPERNODE_COUNTER, &total, err,
                                            sizeof(err)),
                     SEGD_OK);
    assert_int_equal(total, 1);

    /* u02 has 2 edges (u01, u03); a third is allowed, a fourth new one not */
    segd_link_event_t l3 = link_ev(2, 5, SEGD_UNLINK, T0 + 4, 1),
                      l4 = link_ev(2, 6, SEGD_UNLINK, T0 + 5, 1),
                      again = link_ev(2, 1, SEGD_LINK, T0 + 6, 0.9);
    assert_int_equal(segd_ident_apply(id, b, &l3, NULL, NULL, &res, err, sizeof(err)), SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_APPLIED);
    assert_int_equal(segd_ident_apply(id, b, &l4, NULL, NULL, &res, err, sizeof(err)), SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_SUPERNODE_LINKS);
    assert_int_equal(segd_ident_apply(id, b, &again, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_APPLIED); /* an existing edge: always */
    /* the boundary from the other end: u02 (max_links edges) as id_b of a
     * new edge is refused; u05 (1 edge) takes one up to max_links - 1 = 2 */
    segd_link_event_t as_b = link_ev(8, 2, SEGD_UNLINK, T0 + 7, 1),
                      below = link_ev(5, 8, SEGD_UNLINK, T0 + 8, 1);
    assert_int_equal(segd_ident_apply(id, b, &as_b, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_SUPERNODE_LINKS);
    assert_int_equal(segd_ident_apply(id, b, &below, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_APPLIED);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_ident_get(s, name(2), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_int_equal(r.n_links, 3); /* exactly max_links, never more */
    assert_int_equal(segd_ident_get(s, name(5), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_int_equal(r.n_links, 2);
    assert_int_equal(segd_ident_get(s, name(6), 3, &r, err, sizeof(err)), SEGD_ERR_NOTFOUND);
    assert_int_equal(segd_ident_supernode_total(id), 3);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    segd_store_close(s);

    /* the counter survives a reopen and goes on from there */
    s = test_store_open(f->dir, NOW_MS);
    assert_int_equal(segd_ident_new(s, &o, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_ident_supernode_total(id), 3);
    segd_ident_destroy(id);
    segd_store_close(s);
}

/* One UPSERT of segment seg for id x, written. */
static void write_one(segd_store_t *s, int x, int64_t seg, int64_t ts)
{
    segd_applier_t ap;
    segd_event_t ev;
    char err[256] = "";
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    segd_event_set_user(&ev, name(x), 3);
    ev.ts_ms = ts;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t u = {seg, 86400, 0, x};
    segd_event_add_segment(&ev, &u);
    assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
}

static void apply_one(segd_store_t *s, segd_link_event_t e)
{
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    char err[256] = "";
    segd_ident_result_t res;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    assert_int_equal(segd_ident_apply(id, b, &e, NULL, NULL, &res, err, sizeof(err)), SEGD_OK);
    assert_int_equal(res, SEGD_IDENT_APPLIED);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
}

static int has_segment(const segd_profile_t *p, int64_t seg)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].segment_id == seg)
            return 1;
    return 0;
}

/* A linked read through a view sees the graph and every member's record as
 * of the view, whatever is written after it (a join and a new segment of a
 * member): the whole read is of one store state. The plain read, which
 * opens its own view, sees the new state. */
static void test_linked_view(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    write_one(s, 1, 101, T0);
    write_one(s, 2, 102, T0);
    write_one(s, 3, 103, T0);
    apply_one(s, link_ev(1, 2, SEGD_LINK, T0, 1));

    segd_profile_t before, in_view, after;
    segd_profile_init(&before);
    segd_profile_init(&in_view);
    segd_profile_init(&after);
    members_t m0 = {0}, m1 = {0}, m2 = {0}, m3 = {0};
    assert_int_equal(segd_ident_get_linked(s, name(1), 3, &before, collect, &m0, err,
                                           sizeof(err)),
                     SEGD_OK);
    segd_store_view_t *v = NULL;
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);

    /* after the view: u02 joins u03's component and gains a segment */
    apply_one(s, link_ev(2, 3, SEGD_LINK, T0 + 1, 1));
    write_one(s, 2, 999, T0 + 2);

    assert_int_equal(segd_ident_view_get_linked(v, name(1), 3, &in_view, collect, &m1, err,
                                                sizeof(err)),
                     SEGD_OK);
    assert_int_equal(segd_ident_view_members(v, name(3), 3, collect, &m2, err, sizeof(err)),
                     SEGD_OK);
    segd_store_view_close(v);
    /* the view's answer is the one read before the writes */
    assert_int_equal(m1.n, 2);
    assert_int_equal(m1.n, m0.n);
    assert_memory_equal(m1.ids, m0.ids, sizeof(int) * (size_t)m0.n);
    assert_int_equal(in_view.n, before.n);
    assert_memory_equal(in_view.entries, before.entries, before.n * sizeof(segd_entry_t));
    assert_false(has_segment(&in_view, 999));
    assert_false(has_segment(&in_view, 103));
    assert_int_equal(m2.n, 1); /* u03 alone, as the view holds it */

    assert_int_equal(segd_ident_get_linked(s, name(1), 3, &after, collect, &m3, err,
                                           sizeof(err)),
                     SEGD_OK);
    assert_int_equal(m3.n, 3);
    assert_true(has_segment(&after, 999));
    assert_true(has_segment(&after, 103));
    segd_profile_free(&before);
    segd_profile_free(&in_view);
    segd_profile_free(&after);
    segd_store_close(s);
}

#define PAIRS 4500 /* a rebuild of 2 * PAIRS ids writes more than one batch */

static const char *pair_id(int i)
{
    static char b[2][32];
    snprintf(b[i & 1], sizeof(b[0]), "p%05d", i);
    return b[i & 1];
}

static int ignore_member(void *ctx, const char *m, size_t len)
{
    (void)ctx, (void)m, (void)len;
    return 0;
}

/* What every reader says while the rebuild mark is set. */
static void expect_refused(segd_store_t *s)
{
    char err[256] = "";
    int c;
    segd_profile_t p;
    segd_profile_init(&p);
    segd_ident_t *id = NULL;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_ERR_INVALID);
    assert_string_equal(err, SEGD_IDENT_REBUILD_MSG);
    err[0] = 0;
    assert_int_equal(segd_ident_check(s, "p00000", 6, "p00001", 6, &c, NULL, err, sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_string_equal(err, SEGD_IDENT_REBUILD_MSG);
    err[0] = 0;
    assert_int_equal(segd_ident_members(s, "p00000", 6, ignore_member, NULL, err, sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_string_equal(err, SEGD_IDENT_REBUILD_MSG);
    err[0] = 0;
    assert_int_equal(segd_ident_get_linked(s, "p00000", 6, &p, NULL, NULL, err, sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_string_equal(err, SEGD_IDENT_REBUILD_MSG);
    assert_int_equal(segd_ident_rebuild_check(s, err, sizeof(err)), SEGD_ERR_INVALID);
    segd_profile_free(&p);
}

/* Collects a listing as "MASTER:SIZE:M,A,B " (ids of up to 16 bytes). */
typedef struct comp_text {
    char s[512];
    size_t len;
} comp_text_t;

static int comp_collect(void *ctx, const segd_ident_component_t *c)
{
    comp_text_t *t = ctx;
    t->len += (size_t)snprintf(t->s + t->len, sizeof(t->s) - t->len, "%.*s:%zu:",
                               (int)c->master_len, c->master, c->size);
    for (size_t i = 0; i < c->size; i++)
        t->len += (size_t)snprintf(t->s + t->len, sizeof(t->s) - t->len, "%s%.*s",
                                   i ? "," : "", (int)c->members[i].len, c->members[i].s);
    t->len += (size_t)snprintf(t->s + t->len, sizeof(t->s) - t->len, " ");
    return 0;
}

/* A rebuild cut short after its first batch (the second write fails)
 * leaves the mark: segd run's handle (segd_ident_new, also backfill's) and
 * every read refuse with the message; a second rebuild completes, clears
 * it, and the graph reads as before. A rebuild of one batch never sets it. */
static void test_rebuild_interrupted(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    segd_ident_result_t res;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int i = 0; i < PAIRS; i++) {
        char a[8];
        memcpy(a, pair_id(2 * i), 7); /* "pNNNNN": pair_id's buffers rotate */
        segd_link_event_t e = {a, 6, pair_id(2 * i + 1), 6, SEGD_LINK, T0 + i, 1};
        assert_int_equal(segd_ident_apply(id, b, &e, NULL, NULL, &res, err, sizeof(err)), 0);
    }
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_ident_destroy(id);

    segd_ident_opts_t o;
    segd_ident_opts_default(&o);
    segd_ident_rebuild_stats_t st;
    segd_store_fault_set(s, SEGD_FAULT_WRITE, 2, 1); /* the second batch fails */
    assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err, sizeof(err)),
                     SEGD_ERR_IO);
    int64_t mark = 0;
    assert_int_equal(segd_store_counter_get(s, SEGD_IDENT_REBUILD_COUNTER, &mark, err,
                                            sizeof(err)),
                     SEGD_OK);
    assert_true(mark > 0);
    expect_refused(s);
    segd_ident_list_opts_t lo = {.min_size = 2};
    comp_text_t ct = {0};
    assert_int_equal(segd_ident_components(s, &lo, comp_collect, &ct, NULL, err, sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_string_equal(err, SEGD_IDENT_REBUILD_MSG);
    assert_int_equal(ct.len, 0);
    segd_store_close(s);
    s = test_store_open(f->dir, NOW_MS); /* a restart does not clear it */
    expect_refused(s);

    assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(st.linked_components, PAIRS);
    assert_int_equal(segd_store_counter_get(s, SEGD_IDENT_REBUILD_COUNTER, &mark, err,
                                            sizeof(err)),
                     SEGD_OK);
    assert_int_equal(mark, 0);
    assert_int_equal(segd_ident_rebuild_check(s, err, sizeof(err)), SEGD_OK);
    int c = 0;
    segd_ident_rec_t m;
    assert_int_equal(segd_ident_check(s, "p08998", 6, "p08999", 6, &c, &m, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(c, 1);
    assert_memory_equal(m.master, "p08998", 6);
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    segd_ident_destroy(id);
    segd_store_close(s);
}

/* Overwrites ids key kind‖x (or links key of x, y) with junk, straight
 * through RocksDB (no segd writer produces one). */
static void put_junk(segd_store_t *s, char kind, int x, int y)
{
    char key[16];
    size_t kl;
    rocksdb_column_family_handle_t *cf;
    if (kind == 'L') {
        kl = (size_t)snprintf(key, sizeof(key), "%s", name(x)) + 1; /* the 0x00 */
        kl += (size_t)snprintf(key + kl, sizeof(key) - kl, "%s", name(y));
        cf = segd_store_links_cf(s);
    } else {
        kl = (size_t)snprintf(key, sizeof(key), "%c%s", kind, name(x));
        cf = segd_store_ids_cf(s);
    }
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    char *rerr = NULL;
    rocksdb_put_cf(segd_store_rocks(s), wo, cf, key, kl, "junk", 4, &rerr);
    rocksdb_writeoptions_destroy(wo);
    assert_null(rerr);
}

/* Corrupt graph records: the reads and the online apply report the id and
 * SEGD_ERR_CORRUPT (segd run then stops before writing the batch); the
 * rebuild rewrites `i` records that do not decode from the id's edges and
 * deletes one no edge names; a corrupt `links` value is named. */
static void test_corrupt_graph(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    apply_one(s, link_ev(1, 2, SEGD_LINK, T0 + 5, 1));
    apply_one(s, link_ev(2, 3, SEGD_LINK, T0 + 1, 1));
    apply_one(s, link_ev(4, 5, SEGD_LINK, T0 + 3, 1));
    apply_one(s, link_ev(6, 7, SEGD_UNLINK, T0 + 4, 1));
    segd_ident_rec_t r;
    assert_int_equal(segd_ident_get(s, name(2), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_memory_equal(r.master, name(2), 3); /* (T0+1, u02) < (T0+1, u03) */
    put_junk(s, 'i', 2, 0); /* the master of {1, 2, 3} */
    put_junk(s, 'i', 5, 0); /* a member of {4, 5} */
    put_junk(s, 'm', 4, 0); /* and its master's list */
    put_junk(s, 'i', 9, 0); /* an id no edge names */

    members_t got = {0};
    int c;
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_ident_members(s, name(2), 3, collect, &got, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "bad ids record of u02"));
    assert_int_equal(segd_ident_check(s, name(4), 3, name(5), 3, &c, NULL, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "u05"));
    assert_int_equal(segd_ident_get_linked(s, name(4), 3, &p, NULL, NULL, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "bad member list of u04"));
    segd_ident_list_opts_t lo = {.min_size = 2};
    comp_text_t ct = {0};
    assert_int_equal(segd_ident_components(s, &lo, comp_collect, &ct, NULL, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "bad member list of u04"));
    /* the online apply (segd run, backfill): an error, nothing to write */
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    segd_ident_result_t res;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_link_event_t e = link_ev(2, 8, SEGD_LINK, T0 + 9, 1);
    assert_int_equal(segd_ident_apply(id, b, &e, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "u02"));
    segd_batch_destroy(b);
    segd_ident_destroy(id);

    segd_ident_opts_t o;
    segd_ident_opts_default(&o);
    segd_ident_rebuild_stats_t st;
    assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(st.repaired, 3);
    assert_int_equal(segd_ident_get(s, name(2), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_int_equal(r.first_seen_ms, T0 + 1); /* the smallest ts of its edges */
    assert_int_equal(r.n_links, 2);
    assert_memory_equal(r.master, name(2), 3);
    assert_int_equal(segd_ident_get(s, name(5), 3, &r, err, sizeof(err)), SEGD_OK);
    assert_int_equal(r.first_seen_ms, T0 + 3);
    assert_int_equal(r.n_links, 1);
    assert_memory_equal(r.master, name(4), 3);
    assert_int_equal(segd_ident_get(s, name(9), 3, &r, err, sizeof(err)), SEGD_ERR_NOTFOUND);
    memset(&got, 0, sizeof(got));
    assert_int_equal(segd_ident_members(s, name(1), 3, collect, &got, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(got.n, 3);
    assert_int_equal(got.ids[0], 2);
    memset(&got, 0, sizeof(got));
    assert_int_equal(segd_ident_members(s, name(5), 3, collect, &got, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(got.n, 2);
    assert_int_equal(got.ids[0], 4);
    assert_int_equal(segd_ident_get_linked(s, name(5), 3, &p, NULL, NULL, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(st.repaired, 0);
    assert_int_equal(st.repointed, 0);
    /* the repaired graph lists: largest first, the master first */
    segd_ident_list_stats_t ls;
    memset(&ct, 0, sizeof(ct));
    assert_int_equal(segd_ident_components(s, &lo, comp_collect, &ct, &ls, err, sizeof(err)),
                     SEGD_OK);
    assert_string_equal(ct.s, "u02:3:u02,u01,u03 u04:2:u04,u05 ");
    assert_int_equal(ls.linked_components, 2);
    assert_int_equal(ls.reported, 2);
    lo.min_size = 3;
    memset(&ct, 0, sizeof(ct));
    assert_int_equal(segd_ident_components(s, &lo, comp_collect, &ct, &ls, err, sizeof(err)),
                     SEGD_OK);
    assert_string_equal(ct.s, "u02:3:u02,u01,u03 ");
    lo.min_size = 1;
    assert_int_equal(segd_ident_components(s, &lo, comp_collect, &ct, NULL, err, sizeof(err)),
                     SEGD_ERR_INVALID);

    /* a links value is the graph's source: named, not guessed */
    put_junk(s, 'L', 6, 7);
    assert_int_equal(segd_ident_rebuild(s, &o, NULL, NULL, NULL, NULL, &st, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "u06.u07"));
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    e = link_ev(7, 6, SEGD_LINK, T0 + 9, 1);
    assert_int_equal(segd_ident_apply(id, b, &e, NULL, NULL, &res, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "bad links value of u07 and u06"));
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    segd_profile_free(&p);
    segd_store_close(s);
}

/* An older master loses its place when a late event shows a member seen
 * earlier: every member is re-pointed and told. */
static void test_master_moves(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    replay_t rp = {{0}, 0};
    for (int i = 0; i < N; i++)
        rp.master[i] = i;
    segd_ident_result_t res;
    segd_link_event_t e1 = link_ev(5, 6, SEGD_LINK, T0 + 10, 1),
                      e2 = link_ev(6, 7, SEGD_LINK, T0 + 20, 1),
                      late = link_ev(7, 9, SEGD_UNLINK, T0, 1);
    assert_int_equal(segd_ident_apply(id, b, &e1, on_change, &rp, &res, err, sizeof(err)), 0);
    assert_int_equal(segd_ident_apply(id, b, &e2, on_change, &rp, &res, err, sizeof(err)), 0);
    assert_int_equal(rp.master[7], 5);
    assert_int_equal(rp.changes, 2); /* u06 and u07 now point at u05 */
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_clear(b);
    segd_ident_reset(id);
    rp.changes = 0;
    assert_int_equal(segd_ident_apply(id, b, &late, on_change, &rp, &res, err, sizeof(err)), 0);
    assert_int_equal(rp.changes, 3); /* u07 is now the oldest: u05, u06, u07 move */
    assert_int_equal(rp.master[5], 7);
    assert_int_equal(rp.master[7], 7);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    members_t got = {0};
    assert_int_equal(segd_ident_members(s, name(6), 3, collect, &got, err, sizeof(err)), 0);
    assert_int_equal(got.n, 3);
    assert_int_equal(got.ids[0], 7);
    assert_int_equal(got.ids[1], 5);
    assert_int_equal(got.ids[2], 6);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    segd_store_close(s);
}

/* Membership changes carry the master's first-seen and the store's epoch
 * (DESIGN §10.6), read again after each batch: a restore beside segd run
 * raises it while the handle lives. */
typedef struct keys {
    int64_t fs[4], epoch[4];
    int n;
} keys_t;

static int on_key(void *ctx, const segd_ident_change_t *c)
{
    keys_t *k = ctx;
    if (k->n < 4) {
        k->fs[k->n] = c->master_first_seen_ms;
        k->epoch[k->n] = c->epoch_ms;
    }
    k->n++;
    return 0;
}

static void test_change_keys(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = test_store_open(f->dir, NOW_MS);
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_ident_result_t res;
    keys_t k = {0};
    segd_link_event_t e1 = link_ev(1, 2, SEGD_LINK, T0 + 10, 1),
                      e2 = link_ev(2, 3, SEGD_LINK, T0 + 5, 1);
    assert_int_equal(segd_ident_apply(id, b, &e1, on_key, &k, &res, err, sizeof(err)), 0);
    assert_int_equal(k.n, 1); /* u02 -> u01, first seen T0 + 10, epoch 0 */
    assert_true(k.fs[0] == T0 + 10 && k.epoch[0] == 0);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_clear(b);
    segd_ident_reset(id);
    /* the epoch moves under the handle (as a restore moves it) */
    segd_batch_set_counter(b, SEGD_IDENT_EPOCH_COUNTER, 1800000000999LL);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_clear(b);
    k.n = 0;
    assert_int_equal(segd_ident_apply(id, b, &e2, on_key, &k, &res, err, sizeof(err)), 0);
    /* u02 (first seen T0 + 5 now) is the oldest: u01, u02, u03 point at it */
    assert_int_equal(k.n, 3);
    for (int i = 0; i < 3; i++)
        assert_true(k.fs[i] == T0 + 5 && k.epoch[i] == 1800000000999LL);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    segd_store_close(s);
}

/* A store written before the graph existed (no `links`, no `ids`): a
 * read-only open reads an empty graph, a writable one creates them. */
static void test_older_store(void **state)
{
    test_dir_t *f = *state;
    static const char *names[] = {"default", "profiles", "meta", "outbox"};
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_create_missing_column_families(o, 1);
    const rocksdb_options_t *cfo[4] = {o, o, o, o};
    rocksdb_column_family_handle_t *h[4];
    char *rerr = NULL;
    rocksdb_t *db = rocksdb_open_column_families(o, f->dir, 4, names, cfo, h, &rerr);
    assert_null(rerr);
    for (int i = 0; i < 4; i++)
        rocksdb_column_family_handle_destroy(h[i]);
    rocksdb_close(db);
    rocksdb_options_destroy(o);

    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = f->dir;
    so.read_only = 1;
    so.now_ms = NOW_MS;
    so.block_cache_mb = 8;
    so.min_free_mb = 0;
    segd_store_t *s = NULL;
    char err[256] = "";
    assert_int_equal(segd_store_open(&s, &so, err, sizeof(err)), SEGD_OK);
    int c = -1;
    assert_int_equal(segd_ident_check(s, "a", 1, "b", 1, &c, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(c, 0);
    members_t got = {0};
    assert_int_equal(segd_ident_members(s, name(3), 3, collect, &got, err, sizeof(err)), 0);
    assert_int_equal(got.n, 1);
    segd_ident_t *id = NULL;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_ERR_INVALID);
    segd_store_close(s);

    s = test_store_open(f->dir, NOW_MS); /* writable: the families are created */
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    segd_batch_t *b = NULL;
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_ident_result_t res;
    segd_link_event_t e = link_ev(1, 2, SEGD_LINK, T0, 1);
    assert_int_equal(segd_ident_apply(id, b, &e, NULL, NULL, &res, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    segd_store_close(s);
    so.read_only = 1;
    assert_int_equal(segd_store_open(&s, &so, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_ident_check(s, name(1), 3, name(2), 3, &c, NULL, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(c, 1);
    segd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_event_check),
        cmocka_unit_test_setup_teardown(test_model, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_supernode, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_master_moves, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_change_keys, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_older_store, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_linked_view, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_interrupted, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_graph, test_dir_setup, test_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
