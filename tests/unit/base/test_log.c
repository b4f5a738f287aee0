/* base/log.c: logfmt and JSON lines, levels, field splitting, quoting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <regex.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/log.h"

/* Everything written to a temporary file by fn, as one string. */
static char *capture(segd_log_level_t min, segd_log_format_t f,
                     void (*fn)(const segd_log_t *l))
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    segd_log_t *l = NULL;
    assert_int_equal(segd_log_new(&l, tmp, min, f), SEGD_OK);
    fn(l);
    segd_log_destroy(l);
    long n = ftell(tmp);
    char *s = calloc(1, (size_t)n + 1);
    rewind(tmp);
    assert_int_equal(fread(s, 1, (size_t)n, tmp), (size_t)n);
    fclose(tmp);
    return s;
}

static void matches(const char *s, const char *re)
{
    regex_t r;
    assert_int_equal(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
    int rc = regexec(&r, s, 0, NULL, 0);
    regfree(&r);
    if (rc)
        fail_msg("'%s' does not match /%s/", s, re);
}

static void restored(const segd_log_t *l)
{
    segd_log_kv(l, SEGD_LOG_INFO, "restorer", "restored",
                "p=%d users=%d segments=%d from=%s in_s=%.1f", 3, 12, 40, "/a dir/x", 0.25);
}

static void test_logfmt_line(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_INFO, SEGD_LOG_LOGFMT, restored);
    matches(s, "^ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
               "level=info component=restorer msg=restored p=3 users=12 segments=40 "
               "from=\"/a dir/x\" in_s=0.2 ?5?\n$");
    /* the figures stay greppable as they were before the logger */
    assert_non_null(strstr(s, "restored p=3 users=12 segments=40 "));
    free(s);
}

static void test_json_line(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_DEBUG, SEGD_LOG_JSON, restored);
    json_error_t e;
    json_t *o = json_loads(s, 0, &e);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(o, "component")), "restorer");
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "restored");
    assert_int_equal(json_integer_value(json_object_get(o, "users")), 12);
    assert_true(json_is_real(json_object_get(o, "in_s")));
    assert_string_equal(json_string_value(json_object_get(o, "from")), "/a dir/x");
    matches(json_string_value(json_object_get(o, "ts")),
            "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$");
    json_decref(o);
    free(s);
}

static void levels(const segd_log_t *l)
{
    segd_log(l, SEGD_LOG_DEBUG, "pipeline", "d");
    segd_log(l, SEGD_LOG_INFO, "pipeline", "i");
    segd_log(l, SEGD_LOG_WARN, "pipeline", "w %d", 2);
    segd_log(l, SEGD_LOG_ERROR, "pipeline", "e");
}

static void test_levels(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_WARN, SEGD_LOG_LOGFMT, levels);
    assert_null(strstr(s, "msg=d"));
    assert_null(strstr(s, "msg=i"));
    assert_non_null(strstr(s, "level=warn component=pipeline msg=\"w 2\"\n"));
    assert_non_null(strstr(s, "level=error component=pipeline msg=e\n"));
    free(s);
    s = capture(SEGD_LOG_DEBUG, SEGD_LOG_LOGFMT, levels);
    assert_non_null(strstr(s, "level=debug component=pipeline msg=d\n"));
    free(s);
    segd_log_level_t lv;
    assert_int_equal(segd_log_level_parse("warn", &lv), 0);
    assert_int_equal(lv, SEGD_LOG_WARN);
    assert_int_equal(segd_log_level_parse("verbose", &lv), -1);
    segd_log_format_t f;
    assert_int_equal(segd_log_format_parse("json", &f), 0);
    assert_int_equal(f, SEGD_LOG_JSON);
    assert_int_equal(segd_log_format_parse("text", &f), -1);
    assert_int_equal(segd_log_min(NULL), SEGD_LOG_INFO);
}

/* Quotes, backslashes, newlines and '=' cannot break a line in either format. */
static void hostile(const segd_log_t *l)
{
    segd_log_kv(l, SEGD_LOG_WARN, "kafka", "a \"quoted\" \\ msg\nsecond=line",
                "facility=FAIL client=rdkafka#consumer-1 empty= eq=a=b");
}

static void test_escaping(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_INFO, SEGD_LOG_LOGFMT, hostile);
    assert_non_null(strstr(s, "msg=\"a \\\"quoted\\\" \\\\ msg\\nsecond=line\" "
                              "facility=FAIL client=rdkafka#consumer-1 empty=\"\" eq=\"a=b\"\n"));
    assert_int_equal(strchr(s, '\n') - s + 1, (long)strlen(s)); /* one line */
    free(s);
    s = capture(SEGD_LOG_INFO, SEGD_LOG_JSON, hostile);
    json_error_t e;
    json_t *o = json_loads(s, 0, &e);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "msg")),
                        "a \"quoted\" \\ msg\nsecond=line");
    assert_string_equal(json_string_value(json_object_get(o, "client")), "rdkafka#consumer-1");
    assert_string_equal(json_string_value(json_object_get(o, "empty")), "");
    assert_string_equal(json_string_value(json_object_get(o, "eq")), "a=b");
    json_decref(o);
    free(s);
}

/* JSON stays valid UTF-8 whatever bytes a message holds; valid UTF-8 passes. */
static void bytes(const segd_log_t *l)
{
    segd_log(l, SEGD_LOG_ERROR, "store", "path /d/\xff\xc3 caf\xc3\xa9 \xe2\x82");
}

static void test_json_utf8(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_INFO, SEGD_LOG_JSON, bytes);
    json_error_t e;
    json_t *o = json_loads(s, 0, &e);
    if (!o)
        fail_msg("not JSON: %s (%s)", s, e.text);
    assert_string_equal(json_string_value(json_object_get(o, "msg")),
                        "path /d/\xef\xbf\xbd\xef\xbf\xbd caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd");
    json_decref(o);
    free(s);
}

/* Text before the first key, and numbers JSON does not accept, stay strings. */
static void odd_fields(const segd_log_t *l)
{
    segd_log_kv(l, SEGD_LOG_INFO, "cache", "m", "lead text k=007 n=-1.5e3 x=1.");
}

static void test_odd_fields(void **state)
{
    (void)state;
    char *s = capture(SEGD_LOG_INFO, SEGD_LOG_JSON, odd_fields);
    json_error_t e;
    json_t *o = json_loads(s, 0, &e);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "fields")), "lead text");
    assert_string_equal(json_string_value(json_object_get(o, "k")), "007");
    assert_true(json_is_real(json_object_get(o, "n")));
    assert_string_equal(json_string_value(json_object_get(o, "x")), "1.");
    json_decref(o);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logfmt_line), cmocka_unit_test(test_json_line),
        cmocka_unit_test(test_levels),      cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_odd_fields),  cmocka_unit_test(test_json_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
