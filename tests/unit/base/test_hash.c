/* Tests for base/hash.h: FNV-1a 64 and 32 give the published test vectors
 * (the FNV authors' own), and hashing in pieces equals hashing at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/hash.h"

static const struct {
    const char *s;
    uint64_t h64;
    uint32_t h32;
} vectors[] = {
    {"", 0xcbf29ce484222325ULL, 0x811c9dc5u},
    {"a", 0xaf63dc4c8601ec8cULL, 0xe40c292cu},
    {"foobar", 0x85944171f73967e8ULL, 0xbf9cf968u},
};

static void test_fnv1a64_vectors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        assert_int_equal(segd_fnv1a64(vectors[i].s, strlen(vectors[i].s)), vectors[i].h64);
}

static void test_fnv1a32_vectors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        assert_int_equal(segd_fnv1a32(vectors[i].s, strlen(vectors[i].s)), vectors[i].h32);
}

static void test_fnv1a64_in_pieces(void **state)
{
    (void)state;
    uint64_t h = segd_fnv1a64_more(SEGD_FNV64_OFFSET, "foo", 3);
    assert_int_equal(segd_fnv1a64_more(h, "bar", 3), segd_fnv1a64("foobar", 6));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a64_vectors),
        cmocka_unit_test(test_fnv1a32_vectors),
        cmocka_unit_test(test_fnv1a64_in_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
