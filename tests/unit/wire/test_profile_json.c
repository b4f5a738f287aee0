/* Tests for wire/profile_json.c's text writers: the HTTP API prints users
 * with them instead of jansson, and promises the same bytes as `segd get
 * --json`. Each case compares with jansson's own output for the same value:
 * random entries (extreme numbers included) and random UTF-8 strings
 * holding every character class jansson escapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "wire/profile_json.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static int64_t rnd_i64(void)
{
    static const int64_t edge[] = {0, -1, 1, INT64_MIN, INT64_MAX, 1799999999999LL};
    return rnd() % 4 == 0 ? edge[rnd() % 6] : (int64_t)rnd() >> (rnd() % 63);
}

static int32_t rnd_i32(void)
{
    static const int32_t edge[] = {0, -1, INT32_MIN, INT32_MAX};
    return rnd() % 4 == 0 ? edge[rnd() % 4] : (int32_t)(uint32_t)rnd();
}

/* jansson's compact, ordered text of v (consumes v) */
static char *jansson_text(json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    json_decref(v);
    assert_non_null(s);
    return s;
}

/* out[from..) is want */
static void assert_text_is(const segd_buf_t *b, size_t from, const char *want)
{
    const char *got = (const char *)b->data + from;
    size_t n = b->len - from;
    if (n != strlen(want) || memcmp(got, want, n) != 0)
        fail_msg("writer: %.*s\njansson: %s", (int)n, got, want);
}

static void test_entries_equal_jansson(void **state)
{
    (void)state;
    segd_entry_t e[40];
    for (int round = 0; round < 300; round++) {
        size_t n = rnd() % 41;
        for (size_t i = 0; i < n; i++)
            e[i] = (segd_entry_t){.segment_id = rnd_i64(), .expiry_s = rnd_i64(),
                                  .ts_ms = rnd_i64(), .flags = rnd_i32(),
                                  .partner_id = rnd_i32()};
        char *want = jansson_text(segd_entries_json(e, n));
        segd_buf_t b = {0};
        segd_buf_append(&b, "x", 1); /* appends: what is there stays */
        assert_int_equal(segd_entries_json_text(&b, e, n), SEGD_OK);
        assert_int_equal(((char *)b.data)[0], 'x');
        assert_text_is(&b, 1, want);
        segd_buf_free(&b);
        free(want);
    }
}

/* pieces a random string is made of: every byte jansson escapes, bytes it
 * does not (0x7f, '/'), and 2-4 byte UTF-8 characters */
static const char *const pieces[] = {
    "\"", "\\", "\b", "\f", "\n", "\r", "\t", "\x01", "\x1f", "\x7f", "/", "a", "Z",
    "0", " ", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xE2\x80\xA8", "'",
};

static void test_strings_equal_jansson(void **state)
{
    (void)state;
    char s[256];
    for (int round = 0; round < 2000; round++) {
        size_t len = 0;
        size_t k = rnd() % 24;
        for (size_t i = 0; i < k; i++) {
            const char *p = pieces[rnd() % (sizeof pieces / sizeof *pieces)];
            memcpy(s + len, p, strlen(p));
            len += strlen(p);
        }
        if (rnd() % 8 == 0)
            s[len++] = '\0'; /* an embedded NUL: json_stringn keeps it as \u0000 */
        char *want = jansson_text(json_stringn(s, len));
        segd_buf_t b = {0};
        assert_int_equal(segd_json_string_text(&b, s, len), SEGD_OK);
        assert_text_is(&b, 0, want);
        segd_buf_free(&b);
        free(want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_equal_jansson),
        cmocka_unit_test(test_strings_equal_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
