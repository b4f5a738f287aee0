/* Tests for core/record.c, record_encode.c and profile.c: codec round
 * trips, rejection of every truncation and corruption, the join's algebra
 * and pruning rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/record.h"

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A random valid profile: n entries, ids spread over id_space, ndict tuples. */
static void random_profile(segd_profile_t *p, size_t n, int64_t id_space, int ndict,
                           int attrs)
{
    segd_profile_clear(p);
    for (size_t i = 0; i < n; i++) {
        int d = (int)(rnd() % (uint64_t)ndict);
        segd_entry_t e = {
            .segment_id = (int64_t)(rnd() % (uint64_t)id_space),
            .ts_ms = 1700000000000LL + d * 7919LL,
            .expiry_s = d % 5 == 0 ? 0 : (1700000000LL / 3600 + d) * 3600,
            .flags = attrs ? (int32_t)(d % 3) - 1 : 0,
            .partner_id = attrs ? d * 11 : 0,
        };
        assert_int_equal(segd_profile_push(p, &e), SEGD_OK);
    }
    segd_profile_normalize(p);
    if (rnd() % 3 == 0)
        p->erased_before_ms = 1699999000000LL;
}

static void assert_profiles_equal(const segd_profile_t *a, const segd_profile_t *b)
{
    assert_int_equal(a->erased_before_ms, b->erased_before_ms);
    assert_int_equal(a->n, b->n);
    if (a->n)
        assert_memory_equal(a->entries, b->entries, a->n * sizeof(*a->entries));
}

static void roundtrip(const segd_profile_t *p)
{
    segd_buf_t buf = {0};
    segd_profile_t q;
    segd_profile_init(&q);
    assert_int_equal(segd_record_encode(p, &buf), SEGD_OK);
    assert_int_equal(segd_record_decode(buf.data, buf.len, &q), SEGD_OK);
    assert_profiles_equal(p, &q);
    segd_profile_free(&q);
    segd_buf_free(&buf);
}

static void test_roundtrip_shapes(void **state)
{
    (void)state;
    segd_profile_t p;
    segd_profile_init(&p);
    roundtrip(&p); /* empty encodes to zero bytes and back */
    size_t sizes[] = {1, 2, 20, 1000, 5000};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int attrs = 0; attrs < 2; attrs++) {
            random_profile(&p, sizes[s], 82000, 50, attrs);
            roundtrip(&p);
            random_profile(&p, sizes[s], INT64_MAX, 3, attrs); /* escape-coded gaps */
            roundtrip(&p);
        }
    /* extremes: id 0 and INT64_MAX, negative flags, erase marker only */
    segd_profile_clear(&p);
    segd_entry_t lo = {0, 1, 3600, INT32_MIN, INT32_MAX};
    segd_entry_t hi = {INT64_MAX, INT64_MAX / 2, 7200, -1, 0};
    segd_profile_push(&p, &lo);
    segd_profile_push(&p, &hi);
    roundtrip(&p);
    segd_profile_clear(&p);
    p.erased_before_ms = 1700000000000LL;
    roundtrip(&p);
    segd_profile_free(&p);
}

static void test_empty_is_zero_bytes(void **state)
{
    (void)state;
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_profile_init(&p);
    assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
    assert_int_equal(buf.len, 0);
    segd_buf_free(&buf);
}

static void test_truncation_and_corruption_rejected(void **state)
{
    (void)state;
    segd_profile_t p, q;
    segd_profile_init(&p);
    segd_profile_init(&q);
    segd_buf_t buf = {0};
    random_profile(&p, 300, 82000, 20, 1);
    p.erased_before_ms = 5;
    assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
    for (size_t len = 1; len < buf.len; len++) {
        /* a heap copy of exactly len bytes lets ASan catch any overread */
        uint8_t *t = malloc(len);
        memcpy(t, buf.data, len);
        assert_int_equal(segd_record_decode(t, len, &q), SEGD_ERR_CORRUPT);
        free(t);
    }
    uint8_t *c = malloc(buf.len);
    for (size_t i = 0; i < buf.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(c, buf.data, buf.len);
            c[i] ^= (uint8_t)(1u << bit);
            assert_int_equal(segd_record_decode(c, buf.len, &q), SEGD_ERR_CORRUPT);
        }
    free(c);
    segd_buf_free(&buf);
    segd_profile_free(&p);
    segd_profile_free(&q);
}

static void test_garbage_never_crashes(void **state)
{
    (void)state;
    segd_profile_t q;
    segd_profile_init(&q);
    for (int round = 0; round < 20000; round++) {
        size_t len = rnd() % 64 + 1;
        uint8_t *g = malloc(len);
        for (size_t i = 0; i < len; i++)
            g[i] = (uint8_t)rnd();
        if (round % 2)
            g[0] = SEGD_RECORD_VERSION;
        segd_err_t err = segd_record_decode(g, len, &q);
        assert_true(err == SEGD_OK || err == SEGD_ERR_CORRUPT);
        free(g);
    }
    segd_profile_free(&q);
}

static void test_entry_join_order(void **state)
{
    (void)state;
    segd_entry_t a = {1, 100, 7200, 0, 0}, b = {1, 100, 3600, 5, 5};
    assert_ptr_equal(segd_entry_join(&a, &b), &a); /* equal ts: larger expiry wins */
    assert_ptr_equal(segd_entry_join(&b, &a), &a);
    segd_entry_t c = {1, 101, 0, 0, 0};            /* newer tombstone beats both */
    assert_ptr_equal(segd_entry_join(&a, &c), &c);
    segd_entry_t d = {1, 100, 7200, 1, 0};
    assert_ptr_equal(segd_entry_join(&a, &d), &d); /* then flags */
    segd_entry_t e = {1, 100, 7200, 1, 9};
    assert_ptr_equal(segd_entry_join(&e, &d), &e); /* then partner */
}

/* issue 9 defect 4: a REMOVE and an UPSERT with the same ts_ms: the removal
 * wins (as ERASE_USER does with <=), whatever the upsert's expiry or
 * attributes, and the join stays a semilattice over such ties. */
static void test_removal_wins_ties(void **state)
{
    (void)state;
    segd_entry_t up = {1, 100, 7200, 3, 9}, tomb = {1, 100, 0, 0, 0};
    assert_ptr_equal(segd_entry_join(&up, &tomb), &tomb);
    assert_ptr_equal(segd_entry_join(&tomb, &up), &tomb);
    segd_entry_t newer = {1, 101, 3600, 0, 0}; /* a newer upsert still wins */
    assert_ptr_equal(segd_entry_join(&tomb, &newer), &newer);
    segd_entry_t e[] = {{1, 100, 7200, 0, 0}, {1, 100, 0, 0, 0}, {1, 100, 0, 1, 0},
                        {1, 100, 3600, 2, 2}, {1, 99, 0, 0, 0},  {1, 101, 3600, 0, 0}};
    size_t n = sizeof(e) / sizeof(e[0]);
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(segd_entry_join(&e[i], &e[i]), &e[i]);
        for (size_t j = 0; j < n; j++) {
            const segd_entry_t *x = segd_entry_join(&e[i], &e[j]);
            const segd_entry_t *y = segd_entry_join(&e[j], &e[i]);
            assert_memory_equal(x, y, sizeof(*x));
            for (size_t k = 0; k < n; k++) {
                const segd_entry_t *l = segd_entry_join(segd_entry_join(&e[i], &e[j]), &e[k]);
                const segd_entry_t *r = segd_entry_join(&e[i], segd_entry_join(&e[j], &e[k]));
                assert_memory_equal(l, r, sizeof(*l));
            }
        }
    }
    /* through the k-way join and the encoded record too */
    segd_profile_t a, b, out;
    segd_profile_init(&a);
    segd_profile_init(&b);
    segd_profile_init(&out);
    segd_profile_push(&a, &up);
    segd_profile_push(&b, &tomb);
    const segd_profile_t *in[] = {&a, &b};
    assert_int_equal(segd_profile_join(&out, in, 2, NULL), SEGD_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.entries[0].expiry_s, 0);
    segd_profile_free(&a);
    segd_profile_free(&b);
    segd_profile_free(&out);
}

static void test_join_commutative_idempotent(void **state)
{
    (void)state;
    segd_profile_t a, b, ab, ba, aa;
    segd_profile_init(&a);
    segd_profile_init(&b);
    segd_profile_init(&ab);
    segd_profile_init(&ba);
    segd_profile_init(&aa);
    for (int round = 0; round < 200; round++) {
        random_profile(&a, rnd() % 50, 100, 7, 1);
        random_profile(&b, rnd() % 50, 100, 7, 1);
        const segd_profile_t *x[] = {&a, &b}, *y[] = {&b, &a}, *z[] = {&a, &a, &a};
        assert_int_equal(segd_profile_join(&ab, x, 2, NULL), SEGD_OK);
        assert_int_equal(segd_profile_join(&ba, y, 2, NULL), SEGD_OK);
        assert_int_equal(segd_profile_join(&aa, z, 3, NULL), SEGD_OK);
        assert_profiles_equal(&ab, &ba);
        assert_profiles_equal(&aa, &a);
    }
    segd_profile_free(&a);
    segd_profile_free(&b);
    segd_profile_free(&ab);
    segd_profile_free(&ba);
    segd_profile_free(&aa);
}

static void test_prune_rules(void **state)
{
    (void)state;
    const int64_t now_ms = 1700000000000LL, hz = 24 * 3600 * 1000LL;
    /* the GC watermark W (not now - horizon) decides what may be dropped */
    segd_prune_t partial = {now_ms, hz, 0, NULL, NULL, now_ms - hz, 0};
    segd_prune_t full = {now_ms, hz, 1, NULL, NULL, now_ms - hz, 0};
    segd_profile_t p, out;
    segd_profile_init(&p);
    segd_profile_init(&out);
    segd_entry_t live = {1, now_ms - 1000, now_ms / 1000 + 3600, 0, 0};
    segd_entry_t old_tomb = {2, now_ms - 2 * hz, 0, 0, 0};
    segd_entry_t new_tomb = {3, now_ms - 1000, 0, 0, 0};
    segd_entry_t old_expired = {4, now_ms - 2 * hz, now_ms / 1000 - 10, 0, 0};
    segd_entry_t erased = {5, now_ms - 5000, now_ms / 1000 + 3600, 0, 0};
    segd_profile_push(&p, &live);
    segd_profile_push(&p, &old_tomb);
    segd_profile_push(&p, &new_tomb);
    segd_profile_push(&p, &old_expired);
    segd_profile_push(&p, &erased);
    const segd_profile_t *in[] = {&p};
    /* partial merges keep old dead entries: they must beat an older base */
    assert_int_equal(segd_profile_join(&out, in, 1, &partial), SEGD_OK);
    assert_int_equal(out.n, 5);
    /* complete joins drop dead entries past the horizon */
    assert_int_equal(segd_profile_join(&out, in, 1, &full), SEGD_OK);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.entries[0].segment_id, 1);
    assert_int_equal(out.entries[1].segment_id, 3);
    assert_int_equal(out.entries[2].segment_id, 5);
    assert_true(segd_entry_live(&out.entries[0], out.erased_before_ms, &full));
    assert_false(segd_entry_live(&out.entries[1], out.erased_before_ms, &full));
    /* whatever an erase marker covers goes at once, even in partial merges */
    p.erased_before_ms = now_ms - 4000;
    assert_int_equal(segd_profile_join(&out, in, 1, &partial), SEGD_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.entries[0].segment_id, 1);
    assert_int_equal(out.entries[1].segment_id, 3);
    assert_int_equal(out.erased_before_ms, now_ms - 4000);
    /* an erase marker below W stays, even in a complete join: older events
     * can still come back from the topic into a rebuilt store, from a unit
     * or a backfill file (issue 29 finding 4) */
    segd_profile_clear(&p);
    p.erased_before_ms = now_ms - 2 * hz;
    assert_int_equal(segd_profile_join(&out, in, 1, &partial), SEGD_OK);
    assert_int_equal(out.erased_before_ms, now_ms - 2 * hz);
    assert_int_equal(segd_profile_join(&out, in, 1, &full), SEGD_OK);
    assert_int_equal(out.erased_before_ms, now_ms - 2 * hz);
    /* W = 0 (a fresh store) or below them: nothing dead is dropped by age */
    segd_profile_clear(&p);
    segd_profile_push(&p, &old_tomb);
    segd_profile_push(&p, &old_expired);
    for (int w = 0; w < 2; w++) {
        full.gc_before_ms = w ? now_ms - 2 * hz : 0;
        assert_int_equal(segd_profile_join(&out, in, 1, &full), SEGD_OK);
        assert_int_equal(out.n, 2);
    }
    full.gc_before_ms = now_ms - 2 * hz + 1;
    assert_int_equal(segd_profile_join(&out, in, 1, &full), SEGD_OK);
    assert_int_equal(out.n, 0);
    segd_profile_clear(&p);
    p.erased_before_ms = now_ms - 2 * hz;
    full.gc_before_ms = 0;
    assert_int_equal(segd_profile_join(&out, in, 1, &full), SEGD_OK);
    assert_int_equal(out.erased_before_ms, now_ms - 2 * hz);
    segd_profile_free(&p);
    segd_profile_free(&out);
}

static void test_expiry_rounding(void **state)
{
    (void)state;
    /* roundup(floor(ts_ms/1000) + ttl, G) */
    assert_int_equal(segd_expiry_for(1700000000999LL, 1, 3600), 1700002800LL);
    assert_int_equal(segd_expiry_for(3600000LL, 3600, 3600), 7200);
    assert_int_equal(segd_expiry_for(3600000LL, 3601, 3600), 10800);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_shapes),
        cmocka_unit_test(test_empty_is_zero_bytes),
        cmocka_unit_test(test_truncation_and_corruption_rejected),
        cmocka_unit_test(test_garbage_never_crashes),
        cmocka_unit_test(test_entry_join_order),
        cmocka_unit_test(test_removal_wins_ties),
        cmocka_unit_test(test_join_commutative_idempotent),
        cmocka_unit_test(test_prune_rules),
        cmocka_unit_test(test_expiry_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
