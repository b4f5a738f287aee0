/* Tests for wire/member.c and the two-kind framing of wire/change_frame.c
 * (DESIGN §10.6): MemberEvent bodies round-trip, every truncation and bad
 * id is refused, the register rule is a total order on (epoch, first-seen,
 * master) so any order of events ends at the same register, and a change
 * topic reader tells MemberEvents from ChangeEvents under both framings
 * while the ChangeEvent-only reader (deployed caches) refuses them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire/change.h"
#include "wire/change_frame.h"
#include "wire/manifest.h"
#include "wire/member.h"

static segd_member_t member(const char *id, const char *master, int64_t fs, int64_t epoch)
{
    return (segd_member_t){.id = id, .id_len = strlen(id), .master = master,
                           .master_len = strlen(master), .master_first_seen_ms = fs,
                           .epoch_ms = epoch, .bucket = 3, .buckets = 8,
                           .committed_at_ms = 1800000000123LL};
}

static void test_round_trip_and_truncation(void **state)
{
    (void)state;
    segd_member_t m = member("cookie-\xC3\xA9", "device-1", -5, 1700000000000LL);
    segd_buf_t b = {0};
    assert_int_equal(segd_member_encode(&m, &b), SEGD_OK);
    assert_int_equal(b.data[0], 0x01);
    assert_true(segd_member_is_body(b.data, b.len));
    segd_member_t d;
    assert_int_equal(segd_member_decode(b.data, b.len, &d), SEGD_OK);
    assert_int_equal(d.id_len, m.id_len);
    assert_memory_equal(d.id, m.id, m.id_len);
    assert_memory_equal(d.master, m.master, m.master_len);
    assert_true(d.master_first_seen_ms == -5 && d.epoch_ms == m.epoch_ms && d.bucket == 3 &&
                d.buckets == 8 && d.committed_at_ms == m.committed_at_ms);
    for (size_t cut = 0; cut < b.len; cut++)
        assert_int_equal(segd_member_decode(b.data, cut, &d), SEGD_ERR_DECODE);
    uint8_t longer[512];
    memcpy(longer, b.data, b.len);
    longer[b.len] = 0;
    assert_int_equal(segd_member_decode(longer, b.len + 1, &d), SEGD_ERR_DECODE);
    segd_buf_free(&b);

    segd_member_t empty = member("", "m", 0, 0);
    assert_int_equal(segd_member_encode(&empty, &b), SEGD_ERR_INVALID);
    /* ids the graph refuses: NUL, bad UTF-8, longer than 256 bytes */
    char big[300];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    const segd_member_t bad[] = {
        {.id = "a\0b", .id_len = 3, .master = "m", .master_len = 1},
        {.id = "a", .id_len = 1, .master = "\xC3(", .master_len = 2},
        {.id = big, .id_len = 257, .master = "m", .master_len = 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        b.len = 0;
        assert_int_equal(segd_member_encode(&bad[i], &b), SEGD_OK);
        assert_int_equal(segd_member_decode(b.data, b.len, &d), SEGD_ERR_DECODE);
    }
    segd_buf_free(&b);
}

static void test_change_bodies_are_not_members(void **state)
{
    (void)state;
    segd_change_t c;
    segd_change_init(&c);
    c.user_id = "u1";
    c.user_id_len = 2;
    c.buckets = 1;
    segd_buf_t b = {0};
    assert_int_equal(segd_change_encode(&c, &b), SEGD_OK);
    assert_false(segd_member_is_body(b.data, b.len));
    segd_member_t d;
    assert_int_equal(segd_member_decode(b.data, b.len, &d), SEGD_ERR_DECODE);
    c.kind = SEGD_CHANGE_RETIRE;
    b.len = 0;
    assert_int_equal(segd_change_encode(&c, &b), SEGD_OK);
    assert_false(segd_member_is_body(b.data, b.len));
    /* and a member body is no change event */
    segd_member_t m = member("a", "b", 1, 0);
    b.len = 0;
    assert_int_equal(segd_member_encode(&m, &b), SEGD_OK);
    assert_int_not_equal(segd_change_decode(b.data, b.len, &c), SEGD_OK);
    segd_buf_free(&b);
    segd_change_free(&c);
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* wins is a strict total order on the keys: the register after any
 * sequence is the maximum, whatever the order and duplicates. */
static void test_wins_is_an_order(void **state)
{
    (void)state;
    static const char *masters[] = {"a", "ab", "b", "\xC3\xA9"};
    segd_member_t ev[64];
    for (int i = 0; i < 64; i++)
        ev[i] = member("x", masters[rnd() % 4], (int64_t)(rnd() % 3), (int64_t)(rnd() % 3));
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            int same = ev[i].epoch_ms == ev[j].epoch_ms &&
                       ev[i].master_first_seen_ms == ev[j].master_first_seen_ms &&
                       !strcmp(ev[i].master, ev[j].master);
            int x = segd_member_wins(&ev[i], &ev[j]), y = segd_member_wins(&ev[j], &ev[i]);
            assert_int_equal(x + y, same ? 0 : 1);
        }
    segd_member_t want = ev[0];
    for (int i = 1; i < 64; i++)
        if (segd_member_wins(&ev[i], &want))
            want = ev[i];
    for (int round = 0; round < 50; round++) {
        segd_member_t reg = ev[rnd() % 64];
        for (int k = 0; k < 200; k++) {
            const segd_member_t *e = &ev[rnd() % 64];
            if (segd_member_wins(e, &reg))
                reg = *e;
        }
        for (int i = 0; i < 64; i++) /* every event once more, any order seen */
            if (segd_member_wins(&ev[i], &reg))
                reg = ev[i];
        assert_true(reg.epoch_ms == want.epoch_ms &&
                    reg.master_first_seen_ms == want.master_first_seen_ms &&
                    !strcmp(reg.master, want.master));
    }
    /* the rule's direction: a later epoch beats an older master; within an
     * epoch the older master, then the bytewise smaller one */
    segd_member_t old = member("x", "z", 1, 0), split = member("x", "x", 9, 5);
    assert_true(segd_member_wins(&split, &old));
    segd_member_t m1 = member("x", "b", 1, 0), m2 = member("x", "a", 2, 0);
    assert_true(segd_member_wins(&m1, &m2));
    segd_member_t m3 = member("x", "a", 1, 0);
    assert_true(segd_member_wins(&m3, &m1));
}

static void frame_body(segd_frame_kind_t kind, segd_change_framing_t f, int32_t id,
                       const segd_buf_t *body, segd_buf_t *out)
{
    out->len = 0;
    assert_int_equal(segd_frame(kind, f, id, out), SEGD_OK);
    assert_int_equal(segd_buf_append(out, body->data, body->len), SEGD_OK);
}

static void test_framing_kinds(void **state)
{
    (void)state;
    segd_member_t m = member("a", "b", 1, 0);
    segd_change_t c;
    segd_change_init(&c);
    c.user_id = "u1";
    c.user_id_len = 2;
    c.buckets = 1;
    segd_buf_t mb = {0}, cb = {0}, f = {0};
    assert_int_equal(segd_member_encode(&m, &mb), SEGD_OK);
    assert_int_equal(segd_change_encode(&c, &cb), SEGD_OK);
    const uint8_t *body;
    size_t blen;
    segd_frame_kind_t k;

    /* single-object: each kind by its fingerprint; the old reader refuses members */
    frame_body(SEGD_FRAME_MEMBER, SEGD_CHANGE_SINGLE_OBJECT, -1, &mb, &f);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, -1, -1, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_MEMBER);
    assert_int_equal(blen, mb.len);
    assert_int_equal(segd_change_unframe(f.data, f.len, -1, &body, &blen), SEGD_ERR_DECODE);
    frame_body(SEGD_FRAME_CHANGE, SEGD_CHANGE_SINGLE_OBJECT, -1, &cb, &f);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, -1, -1, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_CHANGE);
    /* a member body behind the change fingerprint: the kinds disagree */
    frame_body(SEGD_FRAME_CHANGE, SEGD_CHANGE_SINGLE_OBJECT, -1, &mb, &f);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, -1, -1, &body, &blen, &k),
                     SEGD_ERR_DECODE);

    /* Confluent: by registry id, or by the body when an id is not known */
    frame_body(SEGD_FRAME_MEMBER, SEGD_CHANGE_CONFLUENT, 12, &mb, &f);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 11, 12, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_MEMBER);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 11, -1, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_MEMBER);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, -1, -1, &body, &blen, &k), SEGD_OK);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 11, 13, &body, &blen, &k),
                     SEGD_ERR_DECODE);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 12, -1, &body, &blen, &k),
                     SEGD_ERR_DECODE); /* id 12 is the change schema's, the body a member's */
    assert_int_equal(segd_change_unframe(f.data, f.len, 11, &body, &blen), SEGD_ERR_DECODE);
    frame_body(SEGD_FRAME_CHANGE, SEGD_CHANGE_CONFLUENT, 11, &cb, &f);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 11, 12, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_CHANGE);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, -1, 12, &body, &blen, &k), SEGD_OK);
    assert_int_equal(k, SEGD_FRAME_CHANGE);
    assert_int_equal(segd_change_unframe_kind(f.data, f.len, 10, -1, &body, &blen, &k),
                     SEGD_ERR_DECODE);
    assert_int_equal(segd_change_unframe_kind((const uint8_t *)"\x00\x00", 2, -1, -1, &body,
                                              &blen, &k),
                     SEGD_ERR_DECODE);
    segd_buf_free(&mb);
    segd_buf_free(&cb);
    segd_buf_free(&f);
    segd_change_free(&c);
}

/* A unit manifest's members file survives dump and parse; its absence is
 * parsed as none; a malformed one is refused. */
static void test_manifest_members(void **state)
{
    (void)state;
    segd_manifest_t m, back;
    segd_manifest_init(&m);
    m.topic = "segments";
    m.partition = 2;
    m.partitions = 4;
    m.units = 1;
    char err[256];
    char *json = segd_manifest_dump(&m, "null");
    segd_manifest_init(&back);
    assert_int_equal(segd_manifest_parse(json, strlen(json), &back, err, sizeof(err)), SEGD_OK);
    assert_false(back.has_members);
    segd_manifest_free(&back);
    free(json);
    m.has_members = 1;
    snprintf(m.members.name, sizeof(m.members.name), "members-00002-1800000000000.avro");
    m.members.records = 17;
    m.members.bytes = 900;
    m.identity_epoch_ms = 1800000000777LL;
    memset(m.members.sha256, 'a', 64);
    json = segd_manifest_dump(&m, "null");
    segd_manifest_init(&back);
    assert_int_equal(segd_manifest_parse(json, strlen(json), &back, err, sizeof(err)), SEGD_OK);
    assert_true(back.has_members);
    assert_string_equal(back.members.name, m.members.name);
    assert_true(back.members.records == 17 && back.members.bytes == 900 &&
                back.members.partition == 2 && back.identity_epoch_ms == 1800000000777LL);
    assert_string_equal(back.members.sha256, m.members.sha256);
    segd_manifest_free(&back);
    char *bad = strstr(json, "members-00002");
    memcpy(bad, "../x/", 5);
    segd_manifest_init(&back);
    assert_int_equal(segd_manifest_parse(json, strlen(json), &back, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    segd_manifest_free(&back);
    free(json);
    m.topic = NULL;
    segd_manifest_free(&m);
}

static void test_schema_text(void **state)
{
    (void)state;
    assert_non_null(strstr(segd_member_schema_json(), "\"MemberEvent\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_truncation),
        cmocka_unit_test(test_change_bodies_are_not_members),
        cmocka_unit_test(test_wins_is_an_order),
        cmocka_unit_test(test_framing_kinds),
        cmocka_unit_test(test_manifest_members),
        cmocka_unit_test(test_schema_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
