/* Schema registry over HTTP against a real nginx serving the registry's JSON
 * answers: evolved writer schemas by id (added field with default, dropped
 * field, int -> long), an unknown id, a failing server and a closed port. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "consumer/avro_codec.h"
#include "tests/avro_util.h"
#include "tests/nginx_util.h"

static int setup(void **state)
{
    static nginx_t n;
    if (nginx_start(&n, "location = /schemas/ids/500 { return 500; }"))
        return -1;
    const char *writers[] = {WRITER_NO_DEFAULTS, WRITER_EXTRA, WRITER_INT_ID};
    for (int i = 0; i < 3; i++) {
        char rel[64];
        json_t *j = json_pack("{s:s}", "schema", writers[i]);
        char *body = json_dumps(j, JSON_COMPACT);
        snprintf(rel, sizeof(rel), "schemas/ids/%d", i + 1);
        int rc = nginx_put_file(&n, rel, body);
        free(body);
        json_decref(j);
        if (rc)
            return -1;
    }
    *state = &n;
    return 0;
}

static int teardown(void **state)
{
    nginx_stop(*state);
    return 0;
}

static segd_registry_t *registry_at(int port, int retries)
{
    char url[64], err[256];
    segd_registry_opts_t o;
    segd_registry_opts_default(&o);
    o.max_retries = retries;
    o.backoff_ms = 10;
    o.timeout_ms = 2000;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    segd_registry_t *r = NULL;
    assert_int_equal(segd_registry_new(&r, url, &o, err, sizeof(err)), SEGD_OK);
    return r;
}

static size_t confluent_frame(int32_t id, const char *writer, const segd_event_t *ev,
                              uint8_t *msg, size_t cap)
{
    int64_t n = encode_with_writer(writer, ev, (char *)msg + 5, cap - 5);
    assert_true(n > 0);
    msg[0] = 0;
    for (int i = 0; i < 4; i++)
        msg[1 + i] = (uint8_t)((uint32_t)id >> (24 - 8 * i));
    return (size_t)n + 5;
}

static void test_evolved_writers_by_id(void **state)
{
    nginx_t *n = *state;
    segd_registry_t *r = registry_at(n->port, 2);
    segd_avro_codec_t *c;
    char err[256];
    uint8_t msg[1024];
    segd_event_t ev, out;
    segd_event_init(&ev);
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, r, err, sizeof(err)), SEGD_OK);
    const char *writers[] = {WRITER_NO_DEFAULTS, WRITER_EXTRA, WRITER_INT_ID};
    for (int w = 0; w < 3; w++) {
        segd_event_reset(&ev);
        segd_event_set_user(&ev, "dev-7", 5);
        ev.ts_ms = 1799990000000;
        ev.op = SEGD_OP_UPSERT;
        snprintf(ev.source, sizeof(ev.source), "%s", w ? "partner-x" : "");
        segd_seg_update_t u = {81999, 3600, 2, 5};
        segd_event_add_segment(&ev, &u);
        size_t len = confluent_frame(w + 1, writers[w], &ev, msg, sizeof(msg));
        for (int again = 0; again < 2; again++) { /* the second decode hits the cache */
            assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_CONFLUENT, msg, len, &out, err,
                                              sizeof(err)), SEGD_OK);
            assert_string_equal(out.user_id, "dev-7");
            assert_int_equal(out.ts_ms, 1799990000000);
            assert_int_equal(out.n_segments, 1);
            assert_int_equal(out.segments[0].segment_id, 81999);
            assert_int_equal(out.segments[0].ttl_s, 3600);
            assert_int_equal(out.segments[0].flags, 2);
            /* writer 1 lacks partner_id and source: the reader's defaults */
            assert_int_equal(out.segments[0].partner_id, w == 0 ? 0 : 5);
            assert_string_equal(out.source, w == 0 ? "" : "partner-x");
        }
    }
    /* unknown id: bad input (dead letter), not an outage */
    size_t len = confluent_frame(4, WRITER_EXTRA, &ev, msg, sizeof(msg));
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, len, &out, err, sizeof(err)),
                     SEGD_ERR_DECODE);
    assert_string_equal(err, "unknown schema id 4");
    /* a failing registry is an outage: the caller waits and retries */
    len = confluent_frame(500, WRITER_EXTRA, &ev, msg, sizeof(msg));
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, len, &out, err, sizeof(err)),
                     SEGD_ERR_HTTP);
    segd_avro_codec_destroy(c);
    segd_registry_destroy(r);
    segd_event_free(&ev);
    segd_event_free(&out);
}

static void test_unreachable_registry(void **state)
{
    (void)state;
    segd_registry_t *r = registry_at(free_port(), 1);
    const char *json;
    char err[256];
    assert_int_equal(segd_registry_get_schema(r, 1, &json, err, sizeof(err)), SEGD_ERR_HTTP);
    assert_non_null(strstr(err, "schema registry"));
    segd_registry_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_evolved_writers_by_id),
        cmocka_unit_test(test_unreachable_registry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
