/* libsegd-cache's public API (include/segd/cache.h), called through the
 * shared library as a bidder does: change messages in both framings, the
 * filters, known/unknown users, count_range, a too-small array, bad
 * messages and arguments. tests/deploy/lib_install.sh covers installing it and
 * loading a real snapshot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "segd/cache.h"
#include "wire/change.h"
#include "wire/change_frame.h"
#include "wire/member.h"

#define NOW_S 1800000000LL

/* A framed DELTA of user with n segments: id k*10, expiry NOW_S + k hours,
 * ts 1000 + k, at time base_ts. */
static void delta(segd_buf_t *msg, segd_change_framing_t f, const char *user, int n,
                  int64_t base_ts, int tombstone_id)
{
    segd_change_t c;
    segd_change_init(&c);
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = user;
    c.user_id_len = strlen(user);
    c.bucket = 0;
    c.buckets = 1;
    for (int k = 1; k <= n; k++) {
        segd_entry_t e = {.segment_id = k * 10, .ts_ms = base_ts + k,
                          .expiry_s = k * 10 == tombstone_id ? 0 : NOW_S + k * 3600};
        assert_int_equal(segd_profile_push(&c.profile, &e), SEGD_OK);
    }
    msg->len = 0;
    assert_int_equal(segd_change_frame(f, 7, msg), SEGD_OK);
    assert_int_equal(segd_change_encode(&c, msg), SEGD_OK);
    segd_change_free(&c);
}

static void test_apply_lookup_filters(void **state)
{
    (void)state;
    assert_int_equal(segd_cache_version(), SEGD_CACHE_VERSION);
    segd_cache_t *c = NULL;
    assert_int_equal(segd_cache_new(&c, NOW_S * 1000), SEGD_CACHE_OK);
    segd_buf_t msg = {0};
    delta(&msg, SEGD_CHANGE_SINGLE_OBJECT, "alice", 5, 1000, -1);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK); /* dup */
    /* a later delta removes segment 30, in the Confluent framing */
    delta(&msg, SEGD_CHANGE_CONFLUENT, "alice", 3, 5000, 30);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);

    segd_cache_segment_t s[8];
    size_t n = 99;
    int known = -1;
    assert_int_equal(segd_cache_lookup(c, "alice", 5, NULL, s, 8, &n, &known), SEGD_CACHE_OK);
    assert_int_equal(known, 1);
    assert_int_equal(n, 4); /* 10 20 40 50 */
    assert_int_equal(s[2].id, 40);
    assert_int_equal(s[0].ts_ms, 5001); /* the later delta won */
    assert_int_equal(s[2].expires_at, NOW_S + 4 * 3600);

    segd_cache_filter_t f = {.expiring_after = NOW_S + 2 * 3600};
    assert_int_equal(segd_cache_lookup(c, "alice", 5, &f, s, 8, &n, NULL), SEGD_CACHE_OK);
    assert_int_equal(n, 2); /* 40 50: expiring strictly after 2 h */
    assert_int_equal(s[0].id, 40);
    f = (segd_cache_filter_t){.updated_since_ms = 5001};
    assert_int_equal(segd_cache_lookup(c, "alice", 5, &f, s, 8, &n, NULL), SEGD_CACHE_OK);
    assert_int_equal(n, 2); /* 10 20 were rewritten at 5001, 5002 */
    assert_int_equal(s[1].id, 20);

    uint64_t count = 0;
    assert_int_equal(segd_cache_count_range(c, "alice", 5, 15, 45, &count), SEGD_CACHE_OK);
    assert_int_equal(count, 2); /* 20 40 */

    /* too small: *n says how many it takes */
    assert_int_equal(segd_cache_lookup(c, "alice", 5, NULL, s, 2, &n, NULL), SEGD_CACHE_ELIMIT);
    assert_int_equal(n, 4);

    /* never seen against nothing live: bob's only segment expires */
    assert_int_equal(segd_cache_lookup(c, "carol", 5, NULL, s, 8, &n, &known), SEGD_CACHE_OK);
    assert_int_equal(known, 0);
    assert_int_equal(n, 0);
    delta(&msg, SEGD_CHANGE_SINGLE_OBJECT, "bob", 1, 1000, -1);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    segd_cache_set_now(c, (NOW_S + 7200) * 1000);
    assert_int_equal(segd_cache_lookup(c, "bob", 3, NULL, s, 8, &n, &known), SEGD_CACHE_OK);
    assert_int_equal(known, 1);
    assert_int_equal(n, 0);

    segd_cache_stats_t st;
    segd_cache_stats(c, &st);
    assert_int_equal(st.users, 2);
    assert_int_equal(st.changes, 4);
    segd_buf_free(&msg);
    segd_cache_destroy(c);
}

static void test_bad_input(void **state)
{
    (void)state;
    segd_cache_t *c = NULL;
    assert_int_equal(segd_cache_new(&c, 0), SEGD_CACHE_OK);
    segd_buf_t msg = {0};
    delta(&msg, SEGD_CHANGE_SINGLE_OBJECT, "alice", 3, 1000, -1);
    /* a wrong fingerprint, a truncated body, no framing: nothing applied */
    msg.data[3] ^= 1;
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_ECORRUPT);
    msg.data[3] ^= 1;
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len - 1), SEGD_CACHE_ECORRUPT);
    assert_int_equal(segd_cache_apply_change(c, "junk", 4), SEGD_CACHE_ECORRUPT);
    assert_int_equal(segd_cache_apply_change(c, NULL, 0), SEGD_CACHE_ECORRUPT);
    segd_cache_stats_t st;
    segd_cache_stats(c, &st);
    assert_int_equal(st.users, 0);
    assert_int_equal(st.changes, 0);

    size_t n;
    assert_int_equal(segd_cache_lookup(c, NULL, 0, NULL, NULL, 0, &n, NULL), SEGD_CACHE_EINVAL);
    assert_int_equal(segd_cache_new(NULL, 0), SEGD_CACHE_EINVAL);
    assert_int_equal(segd_cache_load_snapshot(c, "/nonexistent/segd-snapshot", 1, NULL),
                     SEGD_CACHE_ENOTFOUND);
    assert_int_equal(segd_cache_load_snapshot(c, "https://example.com/snap", 1, NULL),
                     SEGD_CACHE_EINVAL);
    assert_string_equal(segd_cache_strerror(SEGD_CACHE_ELIMIT), "array too small");
    assert_string_equal(segd_cache_strerror(-5), "unknown status");
    assert_non_null(strstr(segd_cache_strerror(SEGD_CACHE_EGAP), "newer snapshot"));
    assert_string_equal(segd_cache_strerror(SEGD_CACHE_EKAFKA + 1), "unknown status");
    segd_buf_free(&msg);
    segd_cache_destroy(c);
    segd_cache_destroy(NULL);
}

/* A framed MemberEvent: id's master is master. */
static void member_msg(segd_buf_t *msg, segd_change_framing_t f, const char *id,
                       const char *master, int64_t first_seen, int64_t epoch)
{
    segd_member_t m = {.id = id, .id_len = strlen(id), .master = master,
                       .master_len = strlen(master), .master_first_seen_ms = first_seen,
                       .epoch_ms = epoch, .bucket = 0, .buckets = 1, .committed_at_ms = 1};
    msg->len = 0;
    assert_int_equal(segd_frame(SEGD_FRAME_MEMBER, f, 8, msg), SEGD_OK);
    assert_int_equal(segd_member_encode(&m, msg), SEGD_OK);
}

typedef struct names {
    int n;
    char v[8][16];
} names_t;

static int on_member(void *ctx, const char *m, size_t len)
{
    names_t *l = ctx;
    snprintf(l->v[l->n++], sizeof(l->v[0]), "%.*s", (int)len, m);
    return 0;
}

static void test_lookup_linked(void **state)
{
    (void)state;
    assert_true(segd_cache_version() >= 10200);
    segd_cache_t *c = NULL;
    assert_int_equal(segd_cache_new(&c, NOW_S * 1000), SEGD_CACHE_OK);
    segd_buf_t msg = {0};
    /* ann: 10..50 at ts 1000+k; bob: 10..20 later, 20 a tombstone */
    delta(&msg, SEGD_CHANGE_SINGLE_OBJECT, "ann", 5, 1000, -1);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    delta(&msg, SEGD_CHANGE_CONFLUENT, "bob", 2, 9000, 20);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    segd_cache_segment_t s[8];
    size_t n = 0;
    int known = -1;
    names_t mem = {0};
    /* no membership yet: bob alone */
    assert_int_equal(segd_cache_lookup_linked(c, "bob", 3, NULL, s, 8, &n, &known, on_member,
                                              &mem),
                     SEGD_CACHE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(mem.n, 1);
    assert_string_equal(mem.v[0], "bob");
    /* bob -> ann in both framings, a stale one for bob, ann -> ann */
    member_msg(&msg, SEGD_CHANGE_SINGLE_OBJECT, "bob", "ann", 500, 0);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    member_msg(&msg, SEGD_CHANGE_CONFLUENT, "bob", "ann", 500, 0);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    member_msg(&msg, SEGD_CHANGE_CONFLUENT, "bob", "zed", 900, 0); /* loses: later first-seen */
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    member_msg(&msg, SEGD_CHANGE_SINGLE_OBJECT, "ann", "ann", 500, 0);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_OK);
    for (int who = 0; who < 2; who++) {
        mem.n = 0;
        n = 0;
        assert_int_equal(segd_cache_lookup_linked(c, who ? "bob" : "ann", 3, NULL, s, 8, &n,
                                                  &known, on_member, &mem),
                         SEGD_CACHE_OK);
        assert_int_equal(known, 1);
        assert_int_equal(mem.n, 2);
        assert_string_equal(mem.v[0], "ann");
        assert_string_equal(mem.v[1], "bob");
        /* 10 from bob (later), 20 removed by bob's later tombstone, 30..50 ann's */
        assert_int_equal(n, 4);
        assert_int_equal(s[0].id, 10);
        assert_int_equal(s[0].ts_ms, 9001);
        assert_int_equal(s[1].id, 30);
        assert_int_equal(s[3].id, 50);
    }
    /* filters, a short array, an unknown id */
    segd_cache_filter_t f = {.expiring_after = NOW_S + 3 * 3600};
    assert_int_equal(segd_cache_lookup_linked(c, "bob", 3, &f, s, 8, &n, NULL, NULL, NULL),
                     SEGD_CACHE_OK);
    assert_int_equal(n, 2); /* 40, 50 */
    assert_int_equal(segd_cache_lookup_linked(c, "bob", 3, NULL, s, 2, &n, NULL, NULL, NULL),
                     SEGD_CACHE_ELIMIT);
    assert_int_equal(n, 4);
    assert_int_equal(segd_cache_lookup_linked(c, "nobody", 6, NULL, s, 8, &n, &known, NULL,
                                              NULL),
                     SEGD_CACHE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(known, 0);
    assert_int_equal(segd_cache_lookup_linked(c, NULL, 3, NULL, s, 8, &n, NULL, NULL, NULL),
                     SEGD_CACHE_EINVAL);
    /* a member event with an empty master does not decode */
    msg.len = 0;
    assert_int_equal(segd_frame(SEGD_FRAME_MEMBER, SEGD_CHANGE_SINGLE_OBJECT, 8, &msg), SEGD_OK);
    const uint8_t bad[] = {0x01, 0x02, 'x', 0x00, 0, 0, 0, 0, 0};
    assert_int_equal(segd_buf_append(&msg, bad, sizeof(bad)), SEGD_OK);
    assert_int_equal(segd_cache_apply_change(c, msg.data, msg.len), SEGD_CACHE_ECORRUPT);
    segd_cache_stats_t st;
    segd_cache_stats(c, &st);
    assert_int_equal(st.changes, 6);
    segd_buf_free(&msg);
    segd_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply_lookup_filters),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_lookup_linked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
