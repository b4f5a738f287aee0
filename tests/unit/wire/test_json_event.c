/* Tests for wire/json_event.c: the fast SegmentEvent parser against the
 * jansson reference. A table of edge cases (each with the decision jansson
 * takes, so a wrong expectation fails here too), nesting at jansson's depth
 * limit, duplicate keys in big objects, and a randomized differential test:
 * 30 000 mutations of valid lines (fixed seed) on which both parsers must
 * take the same decision and decode the same event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire/json_event.h"

static int same_event(const segd_event_t *a, const segd_event_t *b)
{
    if (a->user_id_len != b->user_id_len || memcmp(a->user_id, b->user_id, a->user_id_len) ||
        a->ts_ms != b->ts_ms || a->op != b->op || a->n_segments != b->n_segments ||
        strcmp(a->source, b->source))
        return 0;
    for (size_t i = 0; i < a->n_segments; i++) { /* field by field: padding differs */
        const segd_seg_update_t *x = &a->segments[i], *y = &b->segments[i];
        if (x->segment_id != y->segment_id || x->ttl_s != y->ttl_s || x->flags != y->flags ||
            x->partner_id != y->partner_id)
            return 0;
    }
    return 1;
}

/* Parses with both; fails the test on a difference. Returns 1 if accepted. */
static int both(const char *s, size_t len)
{
    segd_event_t a, b;
    char ea[256] = "", eb[256] = "";
    segd_event_init(&a);
    segd_event_init(&b);
    segd_err_t fa = segd_json_event_parse(s, len, &a, ea, sizeof(ea));
    segd_err_t fb = segd_json_event_parse_reference(s, len, &b, eb, sizeof(eb));
    if ((fa == SEGD_OK) != (fb == SEGD_OK) || (fa == SEGD_OK && !same_event(&a, &b))) {
        for (size_t i = 0; i < len; i++) /* the whole input, escaped */
            fprintf(stderr, (uint8_t)s[i] < 0x20 || (uint8_t)s[i] > 0x7e ? "\\x%02x" : "%c",
                    (uint8_t)s[i]);
        fputc('\n', stderr);
        fail_msg("fast %s (%s), reference %s (%s): %.*s", fa ? "refused" : "accepted", ea,
                 fb ? "refused" : "accepted", eb, (int)(len > 300 ? 300 : len), s);
    }
    if (fa)
        assert_true(ea[0] != 0); /* a refusal says why */
    segd_event_free(&a);
    segd_event_free(&b);
    return fa == SEGD_OK;
}

static int both_str(const char *s) { return both(s, strlen(s)); }

#define GOOD "{\"user_id\":\"u1\",\"ts_ms\":1799990000000,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":12,\"ttl_s\":86400,\"flags\":1,\"partner_id\":7}]"

typedef struct edge {
    const char *line;
    int accept;
} edge_t;

static const edge_t edges[] = {
    {GOOD "}", 1},
    {" \t" GOOD "} \r\n", 1},
    {GOOD "}x", 0},
    {GOOD "} {}", 0},
    {GOOD "}\f", 0},                                /* not JSON whitespace */
    {"\xEF\xBB\xBF" GOOD "}", 0},                    /* a BOM */
    {"", 0},
    {"   ", 0},
    {"[]", 0},
    {"[1,2]", 0},
    {"\"x\"", 0},
    {"null", 0},
    {"{}", 0},
    {GOOD, 0},                                       /* unterminated */
    {GOOD ",}", 0},
    {GOOD ",\"source\":\"s\"}", 1},
    {GOOD ",\"source\":null}", 1},
    {GOOD ",\"source\":1}", 0},
    {GOOD ",\"source\":\"" "0123456789012345678901234567890123456789012345678901234567890123"
          "45678901234567890123456789012345678901234567890123456789012345678\xC3\xA9\"}", 1},
    {GOOD ",\"user_id\":\"u2\"}", 0},               /* duplicate known key */
    {GOOD ",\"us\\u0065r_id\":\"u2\"}", 0},         /* duplicate through an escape */
    {GOOD ",\"x\":1,\"x\":2}", 0},                  /* duplicate unknown key */
    {GOOD ",\"x\":{\"a\":1,\"a\":2}}", 0},          /* duplicate in a nested object */
    {GOOD ",\"x\":[{\"a\":1},{\"a\":2}]}", 1},      /* same key, different objects */
    {GOOD ",\"x\":{\"a\":{\"b\":1},\"b\":2}}", 1},
    {GOOD ",\"\":1,\"\":2}", 0},
    {GOOD ",\"x\":[1,-0,0.5,-1.5e3,1E+2,true,false,null,\"s\",{},[]]}", 1},
    {GOOD ",\"x\":1e400}", 0},                      /* real overflow */
    {GOOD ",\"x\":-1e400}", 0},
    {GOOD ",\"x\":1e-400}", 1},                     /* underflow is fine */
    {GOOD ",\"x\":9223372036854775807}", 1},
    {GOOD ",\"x\":9223372036854775808}", 0},        /* too big integer */
    {GOOD ",\"x\":-9223372036854775808}", 1},
    {GOOD ",\"x\":-9223372036854775809}", 0},
    {GOOD ",\"x\":01}", 0},
    {GOOD ",\"x\":-}", 0},
    {GOOD ",\"x\":1.}", 0},
    {GOOD ",\"x\":.5}", 0},
    {GOOD ",\"x\":1e}", 0},
    {GOOD ",\"x\":+1}", 0},
    {GOOD ",\"x\":tru}", 0},
    {GOOD ",\"x\":truex}", 0},
    {GOOD ",\"x\":NaN}", 0},
    {GOOD ",\"x\":\"\\u0000\"}", 0},               /* no NUL */
    {GOOD ",\"x\":\"\\ud83d\\ude00\"}", 1},        /* a surrogate pair */
    {GOOD ",\"x\":\"\\ud83d\"}", 0},
    {GOOD ",\"x\":\"\\ud83dx\"}", 0},
    {GOOD ",\"x\":\"\\ud83d\\u0041\"}", 0},
    {GOOD ",\"x\":\"\\ude00\"}", 0},
    {GOOD ",\"x\":\"\\u12G4\"}", 0},
    {GOOD ",\"x\":\"\\u12\"}", 0},
    {GOOD ",\"x\":\"\\q\"}", 0},
    {GOOD ",\"x\":\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"}", 1},
    {GOOD ",\"x\":\"a\tb\"}", 0},                   /* raw control character */
    {GOOD ",\"x\":\"\x7f\"}", 1},
    {GOOD ",\"x\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}", 1},
    {GOOD ",\"x\":\"\xC0\xAF\"}", 0},               /* overlong */
    {GOOD ",\"x\":\"\xE0\x80\xAF\"}", 0},
    {GOOD ",\"x\":\"\xED\xA0\x80\"}", 0},           /* an encoded surrogate */
    {GOOD ",\"x\":\"\xF4\x90\x80\x80\"}", 0},       /* above U+10FFFF */
    {GOOD ",\"x\":\"\xC3\"}", 0},
    {GOOD ",\"x\":\"\x80\"}", 0},
    {GOOD ",\"x\":\"\xFF\"}", 0},
    {"{\"user_id\":\"\\u00e9\\ud83d\\ude00\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[{\"segment_id\":1}]}", 1},
    {"{\"user_id\":\"\xC3\xA9\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[]}", 1},
    {"{\"user_id\":5,\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":null,\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[]}", 1}, /* validate refuses */
    {"{\"user_id\":\"a\",\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":null,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1.0,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1e3,\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":\"1\",\"op\":\"REMOVE\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":-5,\"op\":\"REMOVE\",\"segments\":[]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"upsert\",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT \",\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"\\u0055PSERT\",\"segments\":[]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":null,\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"segments\":[]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\"}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\",\"segments\":null}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\",\"segments\":[{\"segment_id\":3}]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"REMOVE\"}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":{}}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[1]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[{}]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"REMOVE\",\"segments\":[{\"segment_id\":null}]}", 0},
    {"{\"segments\":[{\"segment_id\":1}],\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\"}", 0},
    {"{\"segments\":[{\"segment_id\":1,\"ttl_s\":null}],\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\"}", 0},
    {"{\"segments\":[{\"segment_id\":1,\"ttl_s\":5}],\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\"}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":2147483647,\"flags\":-2147483648,\"partner_id\":null}]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":2147483648}]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":1,\"flags\":-2147483649}]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":1,\"partner_id\":true}]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":-9223372036854775808,\"ttl_s\":1}]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":1,\"ttl_s\":2}]}", 0},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":1,\"zz\":[{\"q\":1}]}]}", 1},
    {"{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":1,\"ttl_s\":1},]}", 0},
    {"{\"user_id\":\"a\" \"ts_ms\":1}", 0},
    {"{\"user_id\" : \"a\" , \"ts_ms\" : 1 , \"op\" : \"REMOVE\" , \"segments\" : [ ] }", 1},
    {"{'user_id':\"a\"}", 0},
};

static void test_edge_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        int got = both_str(edges[i].line);
        if (got != edges[i].accept)
            fail_msg("case %zu: expected %s: %s", i, edges[i].accept ? "accept" : "refusal",
                     edges[i].line);
    }
}

/* A line with an embedded NUL byte, and the user id length limit. */
static void test_nul_and_long_user(void **state)
{
    (void)state;
    static const char nul[] = "{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\"}\0";
    assert_int_equal(both(nul, sizeof(nul) - 1), 0);
    assert_int_equal(both(nul, sizeof(nul) - 2), 1);
    /* jansson drops one NUL right after a number or literal (its stream
     * buffer's quirk): the reference decides, so both accept these */
    static const char after_num[] = "{\"user_id\":\"a\",\"ts_ms\":1\0,\"op\":\"ERASE_USER\"}";
    static const char after_null[] = "{\"user_id\":\"a\",\"ts_ms\":1,\"source\":null\0,\"op\":\"ERASE_USER\"}";
    static const char two[] = "{\"user_id\":\"a\",\"ts_ms\":1\0\0,\"op\":\"ERASE_USER\"}";
    static const char after_str[] = "{\"user_id\":\"a\"\0,\"ts_ms\":1,\"op\":\"ERASE_USER\"}";
    assert_int_equal(both(after_num, sizeof(after_num) - 1), 1);
    assert_int_equal(both(after_null, sizeof(after_null) - 1), 1);
    assert_int_equal(both(two, sizeof(two) - 1), 0);
    assert_int_equal(both(after_str, sizeof(after_str) - 1), 0);
    char line[1024];
    for (int len = 255; len <= 258; len++) {
        int k = snprintf(line, sizeof(line), "{\"user_id\":\"%0*d\",\"ts_ms\":1,\"op\":\"ERASE_USER\"}", len, 7);
        assert_int_equal(both(line, (size_t)k), len <= 256);
    }
    /* 256 bytes with an escape counts decoded bytes */
    int k = snprintf(line, sizeof(line), "{\"user_id\":\"\\u00e9%0*d\",\"ts_ms\":1,\"op\":\"ERASE_USER\"}", 254, 7);
    assert_int_equal(both(line, (size_t)k), 1);
    k = snprintf(line, sizeof(line), "{\"user_id\":\"\\u00e9%0*d\",\"ts_ms\":1,\"op\":\"ERASE_USER\"}", 255, 7);
    assert_int_equal(both(line, (size_t)k), 0);
}

/* jansson counts every value, scalars included, up to 2048 deep. */
static void test_depth_limit(void **state)
{
    (void)state;
    size_t cap = 20000;
    char *line = malloc(cap);
    assert_non_null(line);
    for (int n = 2044; n <= 2050; n++) {
        for (int scalar = 0; scalar < 2; scalar++) {
            size_t k = (size_t)snprintf(line, cap, "{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\",\"x\":");
            for (int i = 0; i < n; i++)
                line[k++] = '[';
            if (scalar)
                line[k++] = '1';
            for (int i = 0; i < n; i++)
                line[k++] = ']';
            line[k++] = '}';
            /* the root object is depth 1, "x" 2: n arrays + a scalar */
            int want = 1 + n + scalar <= 2048;
            assert_int_equal(both(line, k), want);
        }
    }
    free(line);
}

/* Many unknown keys: the hash index path, a duplicate found at the end. */
static void test_many_keys(void **state)
{
    (void)state;
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    assert_non_null(line);
    for (int dup = 0; dup < 2; dup++) {
        for (int nested = 0; nested < 2; nested++) {
            size_t k = (size_t)snprintf(line, cap, "{\"user_id\":\"a\",\"ts_ms\":1,\"op\":\"ERASE_USER\"%s",
                                        nested ? ",\"o\":{\"z\":0" : "");
            for (int i = 0; i < 5000; i++)
                k += (size_t)snprintf(line + k, cap - k, ",\"k%d\":%d", i, i);
            if (dup) /* k77 again, spelled with an escape */
                k += (size_t)snprintf(line + k, cap - k, ",\"\\u006b77\":1");
            k += (size_t)snprintf(line + k, cap - k, "%s}", nested ? "}" : "");
            assert_int_equal(both(line, k), !dup);
        }
    }
    free(line);
}

/* ---- randomized differential test ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *const pieces[] = {
    "{", "}", "[", "]", "\"", ":", ",", "\\", "\\u", "\\ud83d", "\\ude00", "\\u0000", "0", "-",
    "1", "9223372036854775808", "2147483648", ".5", "e9", "1e400", "null", "true", " ", "\t",
    "\"x\":1,", "\"user_id\":\"b\",", "\"ts_ms\":2,", "\"op\":\"REMOVE\",", "\"segments\":[],",
    "\"source\":null,", "{\"segment_id\":3}", "\xC3\xA9", "\xC3", "\xED\xA0\x80", "\x01",
    "\"ttl_s\":", "\"flags\":-1,", "ERASE_USER", "\"zz\":{\"a\":[1,{\"b\":null}]},",
};

static size_t make_valid(uint64_t *r, char *out, size_t cap)
{
    static const char *const ops[] = {"UPSERT", "REMOVE", "ERASE_USER"};
    int op = (int)(rng_next(r) % 3);
    size_t k = (size_t)snprintf(out, cap, "{\"user_id\":\"u%llu\",\"ts_ms\":%llu,\"op\":\"%s\"",
                                (unsigned long long)(rng_next(r) % 100000),
                                (unsigned long long)(rng_next(r) % 2000000000000ull), ops[op]);
    if (op != 2 || rng_next(r) % 2) {
        k += (size_t)snprintf(out + k, cap - k, ",\"segments\":[");
        int n = op == 2 ? 0 : (int)(rng_next(r) % 5);
        for (int i = 0; i < n; i++)
            k += (size_t)snprintf(out + k, cap - k,
                                  "%s{\"segment_id\":%llu,\"ttl_s\":%d,\"flags\":%d,\"partner_id\":%d}",
                                  i ? "," : "", (unsigned long long)(rng_next(r) % 100000),
                                  (int)(rng_next(r) % 100000) + 1, (int)(rng_next(r) % 4),
                                  (int)(rng_next(r) % 100));
        k += (size_t)snprintf(out + k, cap - k, "]");
    }
    if (rng_next(r) % 3 == 0)
        k += (size_t)snprintf(out + k, cap - k, ",\"source\":\"s\\u00e9%d\"", (int)(rng_next(r) % 9));
    k += (size_t)snprintf(out + k, cap - k, "}");
    return k;
}

static size_t mutate(uint64_t *r, char *buf, size_t len, size_t cap)
{
    int rounds = 1 + (int)(rng_next(r) % 3);
    for (int m = 0; m < rounds && len > 0; m++) {
        size_t at = (size_t)(rng_next(r) % len);
        switch (rng_next(r) % 5) {
        case 0: /* flip a byte */
            buf[at] = (char)(rng_next(r) & 0xff);
            break;
        case 1: /* delete a run */
        {
            size_t run = 1 + (size_t)(rng_next(r) % 4);
            if (run > len - at)
                run = len - at;
            memmove(buf + at, buf + at + run, len - at - run);
            len -= run;
            break;
        }
        case 2: /* cut the line */
            len = at;
            break;
        default: /* insert a piece */
        {
            const char *p = pieces[rng_next(r) % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = strlen(p);
            if (len + pl >= cap)
                break;
            memmove(buf + at + pl, buf + at, len - at);
            memcpy(buf + at, p, pl);
            len += pl;
            break;
        }
        }
    }
    return len;
}

static void test_differential(void **state)
{
    (void)state;
    uint64_t r = 0x5e6d2026u;
    char buf[4096];
    int accepted = 0, refused = 0;
    for (int i = 0; i < 30000; i++) {
        size_t len = make_valid(&r, buf, sizeof(buf));
        if (i % 10) /* one in ten stays valid */
            len = mutate(&r, buf, len, sizeof(buf));
        if (both(buf, len))
            accepted++;
        else
            refused++;
    }
    /* the mix exercises both outcomes in quantity */
    assert_true(accepted > 3000);
    assert_true(refused > 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_nul_and_long_user),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_differential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
