/* Tests for consumer/static_member.c (a segd run's group.instance.id): the
 * store's id comes first; the same topics in any order give the same id;
 * other topics, a topic more, or names split differently give another; no
 * topics, or an id that does not fit, is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "consumer/static_member.h"

#define STORE "segd-0f33502b9bb8fdae"

static void id_of(char *const *topics, size_t n, char out[128])
{
    char err[256];
    assert_int_equal(segd_static_member_id(STORE, topics, n, out, 128, err, sizeof(err)), SEGD_OK);
}

static void test_form(void **state)
{
    (void)state;
    char *t[] = {"events"};
    char id[128];
    id_of(t, 1, id);
    /* "<store id>-t" and 16 lowercase hex digits: legal in group.instance.id */
    assert_int_equal(strlen(id), strlen(STORE) + 2 + 16);
    assert_memory_equal(id, STORE "-t", strlen(STORE) + 2);
    for (const char *c = id + strlen(STORE) + 2; *c; c++)
        assert_true((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'));
    char again[128];
    id_of(t, 1, again);
    assert_string_equal(id, again);
}

/* The digest is FNV-1a 64 over the sorted names, each with its NUL. A broker
 * remembers the id across restarts, so the same topics must give the same
 * digest from one segd version to the next. */
static void test_pinned(void **state)
{
    (void)state;
    char *one[] = {"events"}, *two[] = {"events", "clicks"};
    char id[128];
    id_of(one, 1, id);
    assert_string_equal(id, STORE "-tec18d35bb0956dcc");
    id_of(two, 2, id);
    assert_string_equal(id, STORE "-tce0d5e92b179a6ff");
}

static void test_set(void **state)
{
    (void)state;
    char *ab[] = {"a", "b"}, *ba[] = {"b", "a"}, *a[] = {"a"}, *b[] = {"b"};
    char *abc[] = {"a", "b", "c"}, *split1[] = {"ab", "c"}, *split2[] = {"a", "bc"};
    char x[128], y[128];
    id_of(ab, 2, x);
    id_of(ba, 2, y);
    assert_string_equal(x, y); /* a subscription is a set */
    id_of(a, 1, y);
    assert_string_not_equal(x, y);
    id_of(b, 1, x);
    assert_string_not_equal(x, y);
    id_of(abc, 3, x);
    id_of(ab, 2, y);
    assert_string_not_equal(x, y);
    id_of(split1, 2, x);
    id_of(split2, 2, y);
    assert_string_not_equal(x, y);
}

static void test_refused(void **state)
{
    (void)state;
    char *t[] = {"events"};
    char out[128], err[256];
    assert_int_equal(segd_static_member_id(STORE, t, 0, out, sizeof(out), err, sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_non_null(strstr(err, "0 input topics"));
    /* room for the store id but not the digest */
    assert_int_equal(segd_static_member_id(STORE, t, 1, out, strlen(STORE) + 10, err,
                                           sizeof(err)),
                     SEGD_ERR_INVALID);
    assert_non_null(strstr(err, "exceed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_form),
        cmocka_unit_test(test_pinned),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
