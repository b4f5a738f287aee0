/* Linked reads in the edge cache (cache/edge.h identity functions,
 * cache/members.h; DESIGN §10.5 cache side):
 * - random MemberEvents (several epochs, first-seens and masters per id,
 *   duplicated, shuffled) leave the same registers and components as the
 *   winning event per id alone, by a register rule written out here;
 * - lookup_linked equals a reference §3 join written out here over the
 *   members' profiles (overlapping segments with different ts, tombstones,
 *   an erased member whose erase must not reach the others), at several
 *   clocks, with retirements; an id never seen is a singleton equal to
 *   segd_edge_find; a short buffer reports the size it needs; the identity
 *   table's memory is counted;
 * - against the store: link events and segment events (erases included)
 *   applied to a store, its profiles put into a cache with MemberEvents
 *   made from its `ids` records: lookup_linked and get_linked equal
 *   segd_ident_get_linked (and the live selection segd get prints) for
 *   every id, members included, and so does a snapshot with members
 *   files written into its units (without them: every id alone);
 * - readers beside a writer of deltas and membership changes (ASan). */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/edge.h"
#include "cache/edge_load.h"
#include "core/partition.h"
#include "publisher/snapshot.h"
#include "wire/avro_file.h"
#include "wire/manifest.h"
#include "consumer/apply.h"
#include "core/query.h"
#include "store/identity.h"
#include "store_util.h"

#define NOW_MS 1800000000000LL
#define T0 (NOW_MS - 3600000)
#define N 24    /* ids i00..i23: bytewise order = index order */
#define SEGS 10 /* segment ids 0..SEGS-1: members overlap */

static uint64_t rng_s = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

static const char *name(int i)
{
    /* per thread: test_readers_beside_writers names ids on two threads */
    static _Thread_local char names[64][8];
    snprintf(names[i], sizeof(names[i]), "i%02d", i);
    return names[i];
}

static int idx(const char *id) { return (id[1] - '0') * 10 + (id[2] - '0'); }

/* ---------- registers: the rule written out ---------- */

typedef struct ev {
    int id, master;
    int64_t fs, epoch;
} ev_t;

/* Whether a beats b in one id's register: larger epoch, then smaller
 * (master_first_seen, master bytes); names are fixed-width, so master index
 * order is bytewise order. */
static int ref_wins(const ev_t *a, const ev_t *b)
{
    if (a->epoch != b->epoch)
        return a->epoch > b->epoch;
    if (a->fs != b->fs)
        return a->fs < b->fs;
    return a->master < b->master;
}

static segd_member_t member_of(const ev_t *v)
{
    segd_member_t m = {0};
    m.id = name(v->id);
    m.id_len = 3;
    m.master = name(v->master);
    m.master_len = 3;
    m.master_first_seen_ms = v->fs;
    m.epoch_ms = v->epoch;
    m.bucket = 0;
    m.buckets = 1;
    m.committed_at_ms = NOW_MS + (int64_t)(rnd() % 1000); /* takes no part */
    return m;
}

typedef struct regs {
    int has[N];
    ev_t r[N];
} regs_t;

static int on_reg(void *ctx, const segd_member_t *m)
{
    regs_t *g = ctx;
    int i = idx(m->id);
    assert_int_equal(m->id_len, 3);
    assert_int_equal(m->master_len, 3);
    assert_false(g->has[i]);
    g->has[i] = 1;
    g->r[i] = (ev_t){i, idx(m->master), m->master_first_seen_ms, m->epoch_ms};
    return 0;
}

typedef struct list {
    int n, ids[64];
} list_t;

static int on_member(void *ctx, const char *m, size_t len)
{
    list_t *l = ctx;
    assert_int_equal(len, 3);
    l->ids[l->n++] = idx(m);
    return 0;
}

/* The component the registers in want give id x: master first, then the
 * ids naming it bytewise. */
static void ref_component(const regs_t *want, int x, list_t *l)
{
    int m = want->has[x] ? want->r[x].master : x;
    l->n = 0;
    l->ids[l->n++] = m;
    for (int i = 0; i < N; i++)
        if (i != m && want->has[i] && want->r[i].master == m)
            l->ids[l->n++] = i;
}

static void expect_table(segd_edge_t *e, const regs_t *want)
{
    regs_t got = {0};
    assert_int_equal(segd_edge_scan_registers(e, on_reg, &got), SEGD_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got.has[i], want->has[i]);
        if (want->has[i])
            assert_memory_equal(&got.r[i], &want->r[i], sizeof(ev_t));
    }
    for (int x = 0; x < N + 3; x++) { /* N..N+2: never seen */
        list_t l = {0}, r = {0};
        assert_int_equal(segd_edge_members(e, name(x), 3, on_member, &l), SEGD_OK);
        if (x >= N) {
            assert_int_equal(l.n, 1);
            assert_int_equal(l.ids[0], x);
            continue;
        }
        ref_component(want, x, &r);
        assert_int_equal(l.n, r.n);
        assert_memory_equal(l.ids, r.ids, (size_t)r.n * sizeof(int));
    }
}

static void test_registers_order_free(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++) {
        ev_t evs[400];
        int n = 0;
        /* per id a few candidate events: epochs 0..2, masters among the
         * first 8 ids (components of several members), first-seens in a
         * small range so ties on first_seen are decided by the master */
        for (int i = 0; i < N; i++) {
            int k = (int)(rnd() % 5);
            for (int j = 0; j < k; j++) {
                int m = (int)(rnd() % 8);
                evs[n++] = (ev_t){i, m, T0 + (int64_t)(rnd() % 3) * 1000, (int64_t)(rnd() % 3)};
                if (rnd() % 3 == 0)
                    { evs[n] = evs[n - 1]; n++; } /* a duplicate */
            }
        }
        regs_t want = {0};
        for (int i = 0; i < n; i++) {
            ev_t *w = &want.r[evs[i].id];
            if (!want.has[evs[i].id] || ref_wins(&evs[i], w)) {
                *w = evs[i];
                want.has[evs[i].id] = 1;
            }
        }
        /* the winners alone, in id order */
        segd_edge_t *a = NULL, *b = NULL;
        assert_int_equal(segd_edge_new(&a, NULL), SEGD_OK);
        assert_int_equal(segd_edge_new(&b, NULL), SEGD_OK);
        for (int i = 0; i < N; i++)
            if (want.has[i]) {
                segd_member_t m = member_of(&want.r[i]);
                assert_int_equal(segd_edge_apply_member(a, &m), SEGD_OK);
            }
        /* everything shuffled, then again shuffled (all duplicates) */
        for (int pass = 0; pass < 2; pass++) {
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(rnd() % (uint64_t)(i + 1));
                ev_t t = evs[i];
                evs[i] = evs[j];
                evs[j] = t;
            }
            for (int i = 0; i < n; i++) {
                segd_member_t m = member_of(&evs[i]);
                assert_int_equal(segd_edge_apply_member(b, &m), SEGD_OK);
            }
        }
        expect_table(a, &want);
        expect_table(b, &want);
        segd_edge_stats_t sa, sb;
        segd_edge_get_stats(a, &sa);
        segd_edge_get_stats(b, &sb);
        assert_int_equal(sa.ids, sb.ids);
        assert_int_equal(sa.id_bytes, sb.id_bytes);
        if (n)
            assert_int_equal(sb.member_events + sb.member_stale, 2 * (uint64_t)n);
        segd_edge_destroy(a);
        segd_edge_destroy(b);
    }
}

static void test_bad_member(void **state)
{
    (void)state;
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    char big[300];
    memset(big, 'x', sizeof(big));
    segd_member_t m = {.id = "a", .id_len = 1, .master = "", .master_len = 0};
    assert_int_equal(segd_edge_apply_member(e, &m), SEGD_ERR_INVALID);
    m = (segd_member_t){.id = big, .id_len = 257, .master = "a", .master_len = 1};
    assert_int_equal(segd_edge_apply_member(e, &m), SEGD_ERR_INVALID);
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    assert_int_equal(st.ids, 0);
    assert_int_equal(st.id_bytes, 0);
    segd_edge_destroy(e);
}

/* ---------- linked lookups against a reference join ---------- */

/* DESIGN §3's order written out: (ts, removal, expiry, flags, partner). */
static int entry_less(const segd_entry_t *a, const segd_entry_t *b)
{
    int ra = a->expiry_s <= 0, rb = b->expiry_s <= 0;
    if (a->ts_ms != b->ts_ms)
        return a->ts_ms < b->ts_ms;
    if (ra != rb)
        return ra < rb;
    if (a->expiry_s != b->expiry_s)
        return a->expiry_s < b->expiry_s;
    if (a->flags != b->flags)
        return a->flags < b->flags;
    return a->partner_id < b->partner_id;
}

typedef struct prof {
    int has[SEGS];
    segd_entry_t e[SEGS];
    int64_t erased;
    int known;
} prof_t;

static void ref_put(prof_t *p, const segd_entry_t *x)
{
    int s = (int)x->segment_id;
    if (!p->has[s] || entry_less(&p->e[s], x))
        p->e[s] = *x;
    p->has[s] = 1;
}

/* The reference linked answer: per member, entries above its own erase
 * marker; the largest per segment over members; live at now_ms, not
 * retired (retired[s]: entries with ts <= it are dead). */
static size_t ref_linked(const prof_t *ps, const list_t *mem, int64_t now_ms,
                         const int64_t *retired, segd_entry_t *out)
{
    prof_t j = {0};
    for (int i = 0; i < mem->n; i++) {
        const prof_t *p = &ps[mem->ids[i]];
        for (int s = 0; s < SEGS; s++)
            if (p->has[s] && p->e[s].ts_ms > p->erased)
                ref_put(&j, &p->e[s]);
    }
    size_t n = 0;
    for (int s = 0; s < SEGS; s++)
        if (j.has[s] && j.e[s].expiry_s > now_ms / 1000 && j.e[s].ts_ms > retired[s])
            out[n++] = j.e[s];
    return n;
}

static void test_linked_equals_reference(void **state)
{
    (void)state;
    for (int round = 0; round < 10; round++) {
        segd_edge_opts_t o;
        segd_edge_opts_default(&o);
        o.now_ms = NOW_MS;
        o.shards = 4;
        segd_edge_t *e = NULL;
        assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
        prof_t ps[N + 3];
        memset(ps, 0, sizeof(ps));
        int64_t retired[SEGS];
        for (int s = 0; s < SEGS; s++)
            retired[s] = INT64_MIN;
        /* profiles: a few deltas per id (not every id has one) */
        segd_change_t c;
        segd_change_init(&c);
        for (int x = 0; x < N; x++) {
            if (rnd() % 6 == 0)
                continue;
            for (int d = 0; d < 3; d++) {
                segd_change_reset(&c);
                c.kind = SEGD_CHANGE_DELTA;
                c.user_id = name(x);
                c.user_id_len = 3;
                int used[SEGS] = {0};
                for (int k = 0; k < 4; k++) {
                    int s = (int)(rnd() % SEGS);
                    if (used[s])
                        continue;
                    used[s] = 1;
                    int64_t ts = T0 + (int64_t)(rnd() % 20) * 1000; /* ties across members */
                    int64_t exp = rnd() % 4 == 0 ? 0 /* tombstone */
                                  : (NOW_MS / 1000) + (int64_t)(rnd() % 7200) - 1800;
                    segd_entry_t en = {s, ts, exp, (int32_t)(rnd() % 3), (int32_t)(rnd() % 2)};
                    assert_int_equal(segd_profile_push(&c.profile, &en), SEGD_OK);
                    ref_put(&ps[x], &en);
                }
                segd_profile_normalize(&c.profile);
                if (rnd() % 8 == 0) { /* an erase of this member */
                    c.profile.erased_before_ms = T0 + (int64_t)(rnd() % 20) * 1000;
                    if (c.profile.erased_before_ms > ps[x].erased)
                        ps[x].erased = c.profile.erased_before_ms;
                }
                ps[x].known = 1;
                assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
            }
        }
        segd_change_free(&c);
        /* memberships: masters among the first 6 ids */
        segd_edge_stats_t before, after;
        segd_edge_get_stats(e, &before);
        regs_t want = {0};
        for (int x = 0; x < N; x++) {
            if (rnd() % 4 == 0)
                continue;
            ev_t v = {x, (int)(rnd() % 6), T0 - 5000, 0};
            if (x < 6 && rnd() % 2)
                v.master = x;
            want.has[x] = 1;
            want.r[x] = v;
            segd_member_t m = member_of(&v);
            assert_int_equal(segd_edge_apply_member(e, &m), SEGD_OK);
        }
        segd_edge_get_stats(e, &after);
        assert_true(after.ids > 0);
        assert_true(after.id_bytes >= after.ids * 6);
        assert_int_equal(after.bytes - before.bytes, after.id_bytes);
        assert_int_equal(after.users, before.users);
        /* a retirement: entries of segment 3 up to T0 + 9 s are dead */
        assert_int_equal(segd_edge_retire(e, 3, T0 + 9000), SEGD_OK);
        retired[3] = T0 + 9000;
        for (int clock = 0; clock < 3; clock++) {
            int64_t now = NOW_MS + clock * 1800000LL;
            segd_edge_set_now(e, now);
            for (int x = 0; x < N + 3; x++) {
                list_t mem = {0}, got_mem = {0};
                if (x < N)
                    ref_component(&want, x, &mem);
                else
                    mem = (list_t){1, {x}};
                segd_entry_t want_e[SEGS], got[SEGS];
                size_t wn = ref_linked(ps, &mem, now, retired, want_e), n = 99;
                int known = -1, want_known = 0;
                for (int i = 0; i < mem.n; i++)
                    want_known |= mem.ids[i] < N && ps[mem.ids[i]].known;
                assert_int_equal(segd_edge_lookup_linked(e, name(x), 3, got, SEGS, &n, &known,
                                                         on_member, &got_mem),
                                 SEGD_OK);
                assert_int_equal(got_mem.n, mem.n);
                assert_memory_equal(got_mem.ids, mem.ids, (size_t)mem.n * sizeof(int));
                assert_int_equal(known, want_known);
                assert_int_equal(n, wn);
                for (size_t i = 0; i < n; i++)
                    assert_memory_equal(&got[i], &want_e[i], sizeof(segd_entry_t));
                if (mem.n == 1 && mem.ids[0] == x) { /* a singleton: as a plain find */
                    segd_entry_t one[SEGS];
                    size_t on = 0;
                    int ok = -1;
                    assert_int_equal(segd_edge_find(e, name(x), 3, one, SEGS, &on, &ok),
                                     SEGD_OK);
                    assert_int_equal(on, n);
                    assert_int_equal(ok, known);
                    if (n)
                        assert_memory_equal(one, got, n * sizeof(segd_entry_t));
                }
                if (wn > 1) { /* too small a buffer: the size it takes */
                    size_t m = 0;
                    assert_int_equal(segd_edge_lookup_linked(e, name(x), 3, got, wn - 1, &m,
                                                             NULL, NULL, NULL),
                                     SEGD_ERR_LIMIT);
                    assert_int_equal(m, wn);
                }
            }
        }
        segd_edge_destroy(e);
    }
}

/* ---------- readers beside writers ---------- */

typedef struct race {
    segd_edge_t *e;
    _Atomic int stop;
} race_t;

/* Deltas and membership changes of i00..i09 while readers look up. */
static void *race_writer(void *arg)
{
    race_t *r = arg;
    segd_change_t c;
    segd_change_init(&c);
    uint64_t s = 12345;
    for (int k = 0; k < 3000; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int x = (int)(s % 10);
        if (k % 3 == 0) {
            ev_t v = {x, (int)((s >> 8) % 4), T0 - (int64_t)((s >> 16) % 50), (int64_t)(k / 1000)};
            segd_member_t m = member_of(&v);
            assert_int_equal(segd_edge_apply_member(r->e, &m), SEGD_OK);
            continue;
        }
        segd_change_reset(&c);
        c.kind = SEGD_CHANGE_DELTA;
        c.user_id = name(x);
        c.user_id_len = 3;
        segd_entry_t en = {(int64_t)((s >> 20) % SEGS), T0 + k, NOW_MS / 1000 + 3600, 0, 0};
        assert_int_equal(segd_profile_push(&c.profile, &en), SEGD_OK);
        assert_int_equal(segd_edge_apply(r->e, &c), SEGD_OK);
    }
    segd_change_free(&c);
    atomic_store(&r->stop, 1);
    return NULL;
}

static void *race_reader(void *arg)
{
    race_t *r = arg;
    segd_entry_t out[SEGS];
    for (int x = 0; !atomic_load(&r->stop); x = (x + 1) % 10) {
        size_t n = 0;
        list_t l = {0};
        assert_int_equal(segd_edge_lookup_linked(r->e, name(x), 3, out, SEGS, &n, NULL,
                                                 on_member, &l),
                         SEGD_OK);
        assert_true(l.n >= 1 && l.n <= 11);
        for (size_t i = 1; i < n; i++) /* a whole, sorted answer */
            assert_true(out[i - 1].segment_id < out[i].segment_id);
    }
    return NULL;
}

static void test_readers_beside_writers(void **state)
{
    (void)state;
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW_MS;
    race_t r = {0};
    assert_int_equal(segd_edge_new(&r.e, &o), SEGD_OK);
    pthread_t w, rd[2];
    assert_int_equal(pthread_create(&w, NULL, race_writer, &r), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&rd[i], NULL, race_reader, &r), 0);
    pthread_join(w, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(rd[i], NULL);
    segd_edge_destroy(r.e);
}

/* ---------- against the store ---------- */

static int put_scanned(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    assert_int_equal(segd_edge_put(ctx, user, len, p), SEGD_OK);
    return 0;
}

/* A store with links among i00..i17 and segments (erases among them) for
 * every id. */
static segd_store_t *build_store(const char *dir)
{
    char err[256] = "";
    segd_store_t *s = test_store_open(dir, NOW_MS);
    /* links: a few chains and pairs among i00..i17, some weak, an UNLINK */
    segd_ident_t *id = NULL;
    segd_batch_t *b = NULL;
    assert_int_equal(segd_ident_new(s, NULL, &id, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int k = 0; k < 40; k++) {
        int a = (int)(rnd() % 18), c = (int)(rnd() % 18);
        if (a == c)
            continue;
        segd_link_event_t ev = {name(a), 3, name(c), 3, rnd() % 7 ? SEGD_LINK : SEGD_UNLINK,
                                T0 - (int64_t)(rnd() % 100) * 1000, rnd() % 5 ? 0.9 : 0.2};
        segd_ident_result_t res;
        assert_int_equal(segd_ident_apply(id, b, &ev, NULL, NULL, &res, err, sizeof(err)),
                         SEGD_OK);
        if (k % 7 == 6) {
            segd_batch_set_offset(b, "segments.links", 0, k);
            assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
            segd_batch_clear(b);
            segd_ident_reset(id);
        }
    }
    segd_batch_set_offset(b, "segments.links", 0, 99);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_ident_destroy(id);
    /* segments for every id, erases among them */
    segd_applier_t ap;
    segd_event_t ev;
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    for (int x = 0; x < N; x++)
        for (int k = 0; k < 4; k++) {
            segd_event_reset(&ev);
            segd_event_set_user(&ev, name(x), 3);
            ev.ts_ms = T0 + (int64_t)(rnd() % 40) * 1000;
            uint64_t r = rnd() % 10;
            ev.op = r == 0 ? SEGD_OP_ERASE_USER : r < 3 ? SEGD_OP_REMOVE : SEGD_OP_UPSERT;
            if (ev.op != SEGD_OP_ERASE_USER)
                for (int j = 0; j < 3; j++) {
                    segd_seg_update_t u = {(int64_t)(rnd() % SEGS),
                                           r == 9 ? 1 : 86400 * (1 + (int32_t)(rnd() % 3)),
                                           (int32_t)(rnd() % 3), x};
                    segd_event_add_segment(&ev, &u);
                }
            assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
        }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    return s;
}

/* The MemberEvent of the store's `i` record of id x (0 when the graph does
 * not know x); *linked = whether x's master is another id. */
static int store_member(segd_store_t *s, int x, segd_member_t *m, segd_ident_rec_t *rec,
                        int *linked)
{
    char err[256] = "";
    segd_ident_rec_t mrec;
    segd_err_t r = segd_ident_get(s, name(x), 3, rec, err, sizeof(err));
    if (r == SEGD_ERR_NOTFOUND)
        return 0;
    assert_int_equal(r, SEGD_OK);
    assert_int_equal(segd_ident_get(s, rec->master, rec->master_len, &mrec, err, sizeof(err)),
                     SEGD_OK);
    *m = (segd_member_t){.id = name(x), .id_len = 3, .master = rec->master,
                         .master_len = rec->master_len,
                         .master_first_seen_ms = mrec.first_seen_ms, .epoch_ms = 0};
    *linked = rec->master_len != 3 || memcmp(rec->master, name(x), 3);
    return 1;
}

/* For every id (and two never seen): members, the joined profile and the
 * live answer of the cache equal the store's (unlinked: every id alone). */
static void expect_store(segd_store_t *s, segd_edge_t *e, int unlinked)
{
    char err[256] = "";
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_query_t q = {0};
    segd_profile_t want, got;
    segd_profile_init(&want);
    segd_profile_init(&got);
    for (int x = 0; x < N + 2; x++) {
        list_t wm = {0}, gm = {0}, lm = {0};
        assert_int_equal(segd_ident_get_linked(s, name(x), 3, &want, on_member, &wm, err,
                                               sizeof(err)),
                         SEGD_OK);
        assert_int_equal(segd_edge_get_linked(e, name(x), 3, &got, on_member, &gm, NULL),
                         SEGD_OK);
        if (unlinked) { /* the cache answers each id alone */
            assert_int_equal(gm.n, 1);
            assert_int_equal(gm.ids[0], x);
            segd_profile_t one;
            segd_profile_init(&one);
            assert_int_equal(segd_store_get(s, name(x), 3, &one, err, sizeof(err)), SEGD_OK);
            segd_profile_clear(&want);
            const segd_profile_t *in[1] = {&one};
            size_t k = 0;
            for (size_t i = 0; i < one.n; i++)
                if (one.entries[i].ts_ms > one.erased_before_ms)
                    one.entries[k++] = one.entries[i];
            one.n = k;
            one.erased_before_ms = 0;
            assert_int_equal(segd_profile_join(&want, in, 1, NULL), SEGD_OK);
            segd_profile_free(&one);
        } else {
            assert_int_equal(gm.n, wm.n);
            assert_memory_equal(gm.ids, wm.ids, (size_t)wm.n * sizeof(int));
        }
        assert_int_equal(got.n, want.n);
        assert_int_equal(got.erased_before_ms, want.erased_before_ms);
        if (want.n)
            assert_memory_equal(got.entries, want.entries, want.n * sizeof(segd_entry_t));
        /* the live answer: what segd get --linked selects */
        segd_entry_t sel[SEGS * 4], live[SEGS * 4];
        size_t sn = segd_query_select(&want, &rule, &q, sel), ln = 0;
        assert_int_equal(segd_edge_lookup_linked(e, name(x), 3, live, SEGS * 4, &ln, NULL,
                                                 on_member, &lm),
                         SEGD_OK);
        assert_int_equal(ln, sn);
        if (sn)
            assert_memory_equal(live, sel, sn * sizeof(segd_entry_t));
    }
    segd_profile_free(&want);
    segd_profile_free(&got);
}

static void test_linked_equals_store(void **state)
{
    test_dir_t *f = *state;
    char err[256] = "";
    segd_store_t *s = build_store(f->dir);
    /* the cache: the store's profiles and MemberEvents from its `ids` */
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW_MS;
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    assert_int_equal(segd_store_scan(s, put_scanned, e, err, sizeof(err)), SEGD_OK);
    int linked = 0;
    for (int x = 0; x < N; x++) {
        segd_member_t m;
        segd_ident_rec_t rec;
        int l = 0;
        if (store_member(s, x, &m, &rec, &l))
            assert_int_equal(segd_edge_apply_member(e, &m), SEGD_OK);
        linked += l;
    }
    assert_true(linked > 3); /* the fixture links something */
    expect_store(s, e, 0);
    segd_edge_destroy(e);
    segd_store_close(s);
}

/* A snapshot of the store (the exporter's units) with a members file
 * written here into each unit, as DESIGN §6/§10.5 specify it: loading it
 * gives the store's linked answers; a unit without the file, none; a
 * damaged members file fails the load naming it. */
static void add_members_files(segd_store_t *s, const char *topic_dir, int corrupt)
{
    char path[512], err[256] = "";
    for (int32_t p = 0; p < 4; p++) {
        segd_manifest_t m;
        snprintf(path, sizeof(path), "%s/p-%05d/manifest.json", topic_dir, (int)p);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof(text), fp);
        fclose(fp);
        segd_manifest_init(&m);
        assert_int_equal(segd_manifest_parse(text, n, &m, err, sizeof(err)), SEGD_OK);
        snprintf(m.members.name, sizeof(m.members.name), "members-%05d-%lld.avro", (int)p,
                 (long long)m.created_at_ms);
        snprintf(path, sizeof(path), "%s/p-%05d/%s", topic_dir, (int)p, m.members.name);
        segd_ocf_writer_t *w = NULL;
        assert_int_equal(segd_ocf_writer_open(&w, path, segd_member_schema_json(), 1, err,
                                              sizeof(err)),
                         SEGD_OK);
        for (int x = 0; x < N; x++) {
            segd_member_t mm;
            segd_ident_rec_t rec;
            int l;
            if (segd_partition_of(m.partitioner, name(x), 3, m.partitions) != p ||
                !store_member(s, x, &mm, &rec, &l))
                continue;
            mm.bucket = p;
            mm.buckets = m.partitions;
            assert_int_equal(segd_member_encode(&mm, segd_ocf_writer_buf(w)), SEGD_OK);
            assert_int_equal(segd_ocf_writer_commit(w, err, sizeof(err)), SEGD_OK);
        }
        segd_ocf_info_t info;
        assert_int_equal(segd_ocf_writer_close(w, &info, err, sizeof(err)), SEGD_OK);
        m.has_members = 1;
        m.members.partition = p;
        m.members.records = info.records + (corrupt && p == 2);
        m.members.bytes = info.bytes;
        memcpy(m.members.sha256, info.sha256, sizeof(info.sha256));
        char *out = segd_manifest_dump(&m, "deflate");
        assert_non_null(out);
        snprintf(path, sizeof(path), "%s/p-%05d/manifest.json", topic_dir, (int)p);
        fp = fopen(path, "wb");
        assert_non_null(fp);
        fputs(out, fp);
        fclose(fp);
        free(out);
        segd_manifest_free(&m);
    }
}

static void test_snapshot_members(void **state)
{
    test_dir_t *f = *state;
    char err[512] = "", db[128], snap[128], topic_dir[160];
    snprintf(db, sizeof(db), "%s/db", f->dir);
    snprintf(snap, sizeof(snap), "%s/snap", f->dir);
    segd_store_t *s = build_store(db);
    segd_snapshot_opts_t so;
    segd_snapshot_opts_default(&so);
    so.buckets = 4;
    so.topic = "in";
    segd_manifest_t fold;
    assert_int_equal(segd_snapshot_export(s, snap, &so, &fold, NULL, err, sizeof(err)), SEGD_OK);
    segd_manifest_free(&fold);
    snprintf(topic_dir, sizeof(topic_dir), "%s/in", snap);
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW_MS;
    /* as the exporter writes it (publisher/snapshot.c: a members file per
     * unit from the same view): the store's linked answers */
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    assert_int_equal(segd_edge_load_snapshot(e, topic_dir, NULL, &fold, err, sizeof(err)),
                     SEGD_OK);
    segd_manifest_free(&fold);
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    assert_true(st.ids > 0);
    expect_store(s, e, 0);
    segd_edge_destroy(e);
    /* with members files written here, record by record: the same */
    add_members_files(s, topic_dir, 0);
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    assert_int_equal(segd_edge_load_snapshot(e, topic_dir, NULL, &fold, err, sizeof(err)),
                     SEGD_OK);
    segd_manifest_free(&fold);
    segd_edge_get_stats(e, &st);
    assert_true(st.ids > 0);
    expect_store(s, e, 0);
    segd_edge_destroy(e);
    /* verify-only reads check it too; a wrong count fails naming the file */
    segd_manifest_t vm;
    assert_int_equal(segd_snapshot_read(topic_dir, NULL, &vm, NULL, NULL, err, sizeof(err)),
                     SEGD_OK);
    segd_manifest_free(&vm);
    add_members_files(s, topic_dir, 1);
    assert_int_equal(segd_snapshot_read(topic_dir, NULL, &vm, NULL, NULL, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    segd_manifest_free(&vm);
    assert_non_null(strstr(err, "members-00002-"));
    segd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registers_order_free),
        cmocka_unit_test(test_bad_member),
        cmocka_unit_test(test_linked_equals_reference),
        cmocka_unit_test(test_readers_beside_writers),
        cmocka_unit_test_setup_teardown(test_linked_equals_store, test_dir_setup, test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_members, test_dir_setup, test_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
