/* Tests for base/utf8.c and issue 9 #15: known answers for the strict
 * validator, an exhaustive comparison with an independent decoder over
 * every 1-3 byte sequence (and every 4-byte one under the lead bytes F0..F7
 * with chosen tails), event validation refusing such user ids, and a
 * snapshot holding one failing `segd snapshot verify`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

/* headers whose paths are the same before and after the layer moves */
#include "app/app.h"
#include "base/utf8.h"
#include "consumer/apply.h"
#include "core/record.h"
#include "publisher/snapshot.h"
#include "core/partition.h"
#include "store/store.h"

#define NOW_MS 1800000000000LL

typedef struct kat {
    const char *bytes;
    size_t len;
    int valid;
} kat_t;

#define K(s, v) {s, sizeof(s) - 1, v}

static const kat_t kats[] = {
    K("", 1),
    K("u0000000042", 1),
    K("\x00", 1),                 /* NUL is UTF-8; events refuse it separately */
    K("\x7F", 1),
    K("caf\xC3\xA9", 1),          /* U+00E9 */
    K("\xC2\x80", 1),             /* U+0080, smallest 2-byte */
    K("\xDF\xBF", 1),             /* U+07FF */
    K("\xE0\xA0\x80", 1),         /* U+0800, smallest 3-byte */
    K("\xED\x9F\xBF", 1),         /* U+D7FF, just below the surrogates */
    K("\xEE\x80\x80", 1),         /* U+E000, just above */
    K("\xEF\xBF\xBF", 1),         /* U+FFFF */
    K("\xEF\xBB\xBF", 1),         /* BOM: a character like any other */
    K("\xF0\x90\x80\x80", 1),     /* U+10000, smallest 4-byte */
    K("\xF0\x9F\x98\x80", 1),     /* U+1F600 */
    K("\xF4\x8F\xBF\xBF", 1),     /* U+10FFFF, the last */
    K("\xC0\x80", 0),             /* overlong NUL */
    K("\xC1\xBF", 0),             /* overlong U+007F */
    K("\xE0\x80\x80", 0),         /* overlong NUL, 3 bytes */
    K("\xE0\x9F\xBF", 0),         /* overlong U+07FF */
    K("\xF0\x80\x80\x80", 0),     /* overlong NUL, 4 bytes */
    K("\xF0\x8F\xBF\xBF", 0),     /* overlong U+FFFF */
    K("\xED\xA0\x80", 0),         /* U+D800 */
    K("\xED\xBF\xBF", 0),         /* U+DFFF */
    K("\xED\xA0\xBD\xED\xB8\x80", 0), /* CESU-8 pair for U+1F600 */
    K("\xF4\x90\x80\x80", 0),     /* U+110000 */
    K("\xF5\x80\x80\x80", 0),
    K("\xF8\x88\x80\x80\x80", 0), /* 5-byte form */
    K("\xFE", 0),
    K("\xFF", 0),
    K("\x80", 0),                 /* lone continuation */
    K("a\xBF", 0),
    K("\xC3", 0),                 /* truncated */
    K("\xE0\xA0", 0),
    K("\xF0\x90\x80", 0),
    K("\xC3\x41", 0),             /* lead without its continuation */
    K("\xE1\x80\x41", 0),
    K("\xF1\x80\x80\xC0", 0),
    K("ok\xC3\xA9\xF0\x9F\x98", 0), /* valid prefix, truncated tail */
};

static void test_known_answers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(kats) / sizeof(kats[0]); i++) {
        int got = segd_utf8_valid(kats[i].bytes, kats[i].len);
        if (got != kats[i].valid)
            fail_msg("kat %zu (%zu bytes): got %d, want %d", i, kats[i].len, got,
                     kats[i].valid);
    }
}

/* An independent reference: decode by bit patterns, then refuse what RFC
 * 3629 forbids (non-shortest forms, surrogates, above U+10FFFF). */
static int ref_valid(const uint8_t *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = p[i];
        size_t n;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + n > len)
            return 0;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n;
    }
    return 1;
}

static void test_exhaustive_against_reference(void **state)
{
    (void)state;
    uint8_t b[4];
    uint64_t checked = 0, valid = 0;
    for (size_t len = 1; len <= 3; len++) /* every 1-, 2- and 3-byte string */
        for (uint32_t v = 0; v < 1u << (8 * len); v++) {
            for (size_t k = 0; k < len; k++)
                b[k] = (uint8_t)(v >> (8 * k));
            int want = ref_valid(b, len);
            if (segd_utf8_valid(b, len) != want)
                fail_msg("%zu bytes %02x %02x %02x: want %d", len, b[0], b[1], b[2], want);
            checked++;
            valid += (uint64_t)want;
        }
    static const uint8_t tails[] = {0x00, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xFF};
    for (uint32_t lead = 0xF0; lead <= 0xF7; lead++)
        for (uint32_t second = 0; second < 0x100; second++)
            for (size_t t3 = 0; t3 < sizeof(tails); t3++)
                for (size_t t4 = 0; t4 < sizeof(tails); t4++) {
                    b[0] = (uint8_t)lead, b[1] = (uint8_t)second, b[2] = tails[t3],
                    b[3] = tails[t4];
                    int want = ref_valid(b, 4);
                    if (segd_utf8_valid(b, 4) != want)
                        fail_msg("%02x %02x %02x %02x: want %d", b[0], b[1], b[2], b[3], want);
                    checked++;
                }
    /* every code point's encoding is valid */
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const uint8_t first[] = {0, 0, 0xC0, 0xE0, 0xF0};
        for (size_t k = n - 1; k > 0; k--)
            b[k] = (uint8_t)(0x80 | ((cp >> (6 * (n - 1 - k))) & 0x3F));
        b[0] = (uint8_t)(first[n] | (cp >> (6 * (n - 1))));
        if (!segd_utf8_valid(b, n))
            fail_msg("U+%04X refused", (unsigned)cp);
    }
    print_message("checked %llu strings; %llu of the 1-3 byte ones valid\n",
                  (unsigned long long)checked, (unsigned long long)valid);
}

static void test_event_refuses_bad_utf8(void **state)
{
    (void)state;
    segd_event_t ev;
    segd_limits_t lim;
    char err[256];
    segd_limits_default(&lim);
    segd_event_init(&ev);
    ev.ts_ms = NOW_MS;
    ev.op = SEGD_OP_ERASE_USER;
    assert_int_equal(segd_event_set_user(&ev, "caf\xC3\xA9", 5), SEGD_OK);
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_event_set_user(&ev, "u\xED\xA0\x80", 4), SEGD_OK);
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_ERR_INVALID);
    assert_non_null(strstr(err, "UTF-8"));
    assert_int_equal(segd_event_set_user(&ev, "\xC0\xAF", 2), SEGD_OK);
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_ERR_INVALID);
    segd_event_free(&ev);
}

/* A SnapshotRecord decodes only with a UTF-8 user id, as in stock readers. */
static void test_snaprec_refuses_bad_utf8(void **state)
{
    (void)state;
    static const struct { const char *user; size_t len; int ok; } cases[] = {
        {"caf\xC3\xA9", 5, 1}, {"u\xF4\x8F\xBF\xBF", 5, 1},
        {"u\xED\xA0\x80", 4, 0}, {"\xC0\xAF", 2, 0}, {"u\xF4\x90\x80\x80", 5, 0}};
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_profile_init(&p);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf.len = 0;
        assert_int_equal(segd_snaprec_encode(cases[i].user, cases[i].len, &p, &buf), SEGD_OK);
        const uint8_t *pos = buf.data;
        const char *user;
        size_t ulen;
        segd_err_t err = segd_snaprec_decode(&pos, buf.data + buf.len, &user, &ulen, &p);
        assert_int_equal(err, cases[i].ok ? SEGD_OK : SEGD_ERR_CORRUPT);
    }
    segd_buf_free(&buf);
    segd_profile_free(&p);
}

/* A store that already holds such a user id (written before this check)
 * exports a snapshot that stock Avro readers refuse: loading it must fail. */
static void put_user(segd_store_t *s, const char *user, size_t len)
{
    segd_profile_t p;
    segd_buf_t buf = {0};
    char err[256];
    segd_profile_init(&p);
    segd_entry_t e = {.segment_id = 7, .ts_ms = NOW_MS - 1000, .expiry_s = NOW_MS / 1000 + 86400};
    assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
    assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
    segd_batch_t *b;
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_batch_merge(b, user, len, buf.data, buf.len);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&buf);
    segd_profile_free(&p);
}

static void test_snapshot_with_bad_utf8_fails_to_load(void **state)
{
    (void)state;
    char dir[64] = "/tmp/segd-test-utf8-XXXXXX", db[96], good[96], bad[96], err[512] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof(db), "%s/db", dir);
    snprintf(good, sizeof(good), "%s/good", dir);
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = db;
    so.now_ms = NOW_MS;
    so.block_cache_mb = 8;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &so, err, sizeof(err)), SEGD_OK);
    put_user(s, "caf\xC3\xA9", 5);
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "t";
    o.buckets = 2;
    assert_int_equal(segd_snapshot_export(s, good, &o, NULL, NULL, err, sizeof(err)), SEGD_OK);
    put_user(s, "bad\xED\xA0\x80", 6);
    assert_int_equal(segd_snapshot_export(s, bad, &o, NULL, NULL, err, sizeof(err)), SEGD_OK);
    segd_store_close(s);

    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s snapshot verify %s | grep -q '^valid: t, 2 units .* 1 users'",
             SEGD_BIN, good);
    assert_int_equal(system(cmd), 0);
    /* verify exits 1 and names the unit and the file that hold the record */
    int p = segd_partition_of(SEGD_PARTITIONER_MURMUR2, "bad\xED\xA0\x80", 6, 2);
    snprintf(cmd, sizeof(cmd), "%s snapshot verify %s | grep -q '^p-0000%d: invalid: p-0000%d-'",
             SEGD_BIN, bad, p, p);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s snapshot verify %s | grep -q '^p-0000%d: valid: '", SEGD_BIN,
             bad, 1 - p);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s snapshot verify %s > /dev/null", SEGD_BIN, bad);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_exhaustive_against_reference),
        cmocka_unit_test(test_event_refuses_bad_utf8),
        cmocka_unit_test(test_snaprec_refuses_bad_utf8),
        cmocka_unit_test(test_snapshot_with_bad_utf8_fails_to_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
