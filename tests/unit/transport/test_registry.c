/* Tests for transport/registry.c (and the codec's Confluent path) against a
 * real nginx serving the registry's JSON answers: evolved writer schemas by
 * id (added field with default, dropped field, int -> long), unknown and
 * incompatible ids, a failing server, a closed port, basic auth, register. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "wire/avro_codec.h"
#include "transport/registry.h"
#include "tests/support/avro_util.h"
#include "tests/support/nginx_util.h"

/* Registry stand-ins: ids 1-3 the evolved writers, 6 a writer that does not
 * resolve, 7 a non-JSON answer, 500 a failing server, register under
 * segd-events-value (POST with the registry content type only), a 409 with
 * Confluent's error body under segd-refused-value, and the
 * same ids under /auth/ behind basic auth (u:p). */
static const char NGINX_LOCATIONS[] =
    "location = /schemas/ids/500 { return 500; }\n"
    "  location = /subjects/segd-events-value/versions {\n"
    "   if ($request_method != POST) { return 405; }\n"
    "   if ($http_content_type != \"application/vnd.schemaregistry.v1+json\") { return 415; }\n"
    "   return 200 '{\"id\":7}';\n  }\n"
    "  location = /subjects/segd-refused-value/versions {\n"
    "   return 409 '{\"error_code\":409,\"message\":\"Schema being registered is "
    "incompatible with an earlier schema\"}';\n  }\n"
    "  location /auth/ { auth_basic \"registry\"; auth_basic_user_file htpasswd; }";

static const char WRITER_INCOMPATIBLE[] =
    "{\"type\":\"record\",\"name\":\"SegmentEvent\",\"namespace\":\"segd\",\"fields\":["
    "{\"name\":\"user_id\",\"type\":\"int\"}]}";

static int serve_schema(nginx_t *n, const char *rel, const char *schema)
{
    json_t *j = json_pack("{s:s}", "schema", schema);
    char *body = json_dumps(j, JSON_COMPACT);
    int rc = body ? nginx_put_file(n, rel, body) : -1;
    free(body);
    json_decref(j);
    return rc;
}

static int populate(nginx_t *n)
{
    const char *writers[] = {WRITER_NO_DEFAULTS, WRITER_EXTRA, WRITER_INT_ID};
    char rel[64], path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(rel, sizeof(rel), "schemas/ids/%d", i + 1);
        if (serve_schema(n, rel, writers[i]))
            return -1;
        snprintf(rel, sizeof(rel), "auth/schemas/ids/%d", i + 1);
        if (serve_schema(n, rel, writers[i]))
            return -1;
    }
    if (serve_schema(n, "schemas/ids/6", WRITER_INCOMPATIBLE) ||
        nginx_put_file(n, "schemas/ids/7", "<html>not a registry</html>"))
        return -1;
    snprintf(path, sizeof(path), "%s/htpasswd", n->dir); /* relative to the conf dir */
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs("u:{PLAIN}p\n", f);
    return fclose(f);
}

/* A missing or failing nginx fails the group (CI installs it); never skip. */
static int setup(void **state)
{
    static nginx_t n;
    if (access("/usr/sbin/nginx", X_OK)) {
        fprintf(stderr, "test_registry needs /usr/sbin/nginx (apt-get install nginx-light)\n");
        return -1;
    }
    if (nginx_start(&n, NGINX_LOCATIONS) || populate(&n)) {
        nginx_print_errors(&n);
        nginx_stop(&n);
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

static segd_registry_t *registry_with(int port, const char *base_path, int retries,
                                      long backoff_ms, const char *userpass)
{
    char url[128], err[256];
    segd_registry_opts_t o;
    segd_registry_opts_default(&o);
    o.max_retries = retries;
    o.backoff_ms = backoff_ms;
    o.timeout_ms = 2000;
    o.userpass = userpass;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s/", port, base_path);
    segd_registry_t *r = NULL;
    assert_int_equal(segd_registry_new(&r, url, &o, err, sizeof(err)), SEGD_OK);
    return r;
}

static segd_registry_t *registry_at(int port, int retries)
{
    return registry_with(port, "", retries, 10, NULL);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
    assert_int_equal(segd_avro_codec_new(&c, NULL, &(segd_schema_source_t){segd_registry_lookup, r}, err, sizeof(err)), SEGD_OK);
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
                     SEGD_ERR_SCHEMA);
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

/* A writer schema that does not resolve is bad input, asked for only once. */
static void test_incompatible_writer(void **state)
{
    nginx_t *n = *state;
    segd_registry_t *r = registry_at(n->port, 0);
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t out;
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, &(segd_schema_source_t){segd_registry_lookup, r}, err, sizeof(err)), SEGD_OK);
    const uint8_t msg[] = {0, 0, 0, 0, 6, 2, 'u'};
    for (int again = 0; again < 2; again++) {
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_CONFLUENT, msg, sizeof(msg), &out,
                                          err, sizeof(err)), SEGD_ERR_SCHEMA);
        assert_string_equal(err, "incompatible writer schema id 6");
    }
    segd_avro_codec_destroy(c);
    segd_registry_destroy(r);
    segd_event_free(&out);
}

static void test_registry_answers(void **state)
{
    nginx_t *n = *state;
    const char *json;
    char err[256];
    /* 404 is an answer: no retries, even with a slow backoff */
    segd_registry_t *r = registry_with(n->port, "", 3, 500, NULL);
    int64_t t0 = now_ms();
    assert_int_equal(segd_registry_get_schema(r, 4, &json, err, sizeof(err)), SEGD_ERR_NOTFOUND);
    assert_true(now_ms() - t0 < 500);
    assert_int_equal(segd_registry_get_schema(r, 2, &json, err, sizeof(err)), SEGD_OK);
    assert_string_equal(json, WRITER_EXTRA);
    const char *again;
    assert_int_equal(segd_registry_get_schema(r, 2, &again, err, sizeof(err)), SEGD_OK);
    assert_ptr_equal(json, again); /* cached, borrowed until destroy */
    segd_registry_destroy(r);
    /* a 200 that is not a registry answer is a server fault, not bad input */
    r = registry_at(n->port, 0);
    assert_int_equal(segd_registry_get_schema(r, 7, &json, err, sizeof(err)), SEGD_ERR_HTTP);
    assert_string_equal(err, "schema registry: bad answer for id 7");
    int32_t id = 0;
    assert_int_equal(segd_registry_register(r, "segd-events-value", WRITER_EXTRA, &id, err,
                                            sizeof(err)), SEGD_OK);
    assert_int_equal(id, 7);
    assert_int_equal(segd_registry_register(r, "no-such-subject", WRITER_EXTRA, &id, err,
                                            sizeof(err)), SEGD_ERR_HTTP);
    assert_string_equal(err, "register no-such-subject: HTTP 404 Not Found, refused");
    /* a refusal names its meaning and the registry's reason */
    assert_int_equal(segd_registry_register(r, "segd-refused-value", WRITER_EXTRA, &id, err,
                                            sizeof(err)), SEGD_ERR_HTTP);
    assert_string_equal(err, "register segd-refused-value: HTTP 409 Conflict, schema incompatible with "
                             "the subject's earlier versions under its compatibility level: "
                             "Schema being registered is incompatible with an earlier schema");
    segd_registry_destroy(r);
}

static void test_basic_auth(void **state)
{
    nginx_t *n = *state;
    const char *json;
    char err[256];
    segd_registry_t *r = registry_with(n->port, "/auth", 0, 10, "u:p");
    assert_int_equal(segd_registry_get_schema(r, 3, &json, err, sizeof(err)), SEGD_OK);
    assert_string_equal(json, WRITER_INT_ID);
    segd_registry_destroy(r);
    r = registry_with(n->port, "/auth", 0, 10, "u:wrong");
    assert_int_equal(segd_registry_get_schema(r, 3, &json, err, sizeof(err)), SEGD_ERR_HTTP);
    /* the status in words and what it means here: the credentials */
    assert_string_equal(err, "schema registry: HTTP 401 Unauthorized for id 3 (not authorized: "
                             "check input.schema.registry.auth)");
    segd_registry_destroy(r);
}

/* Credentials in the URL never reach a message (and so a log). */
static void test_url_credentials_redacted(void **state)
{
    (void)state;
    char url[128], err[256];
    /* the second password has a raw '@', which the authority's first '@'
     * would cut in two, leaving "krit@127..." in the message */
    const char *users[] = {"alice:sekrit", "alice:se@krit"};
    for (int i = 0; i < 2; i++) {
        snprintf(url, sizeof(url), "http://%s@127.0.0.1:%d/", users[i], free_port());
        segd_registry_opts_t o;
        segd_registry_opts_default(&o);
        o.max_retries = 0;
        segd_registry_t *r = NULL;
        assert_int_equal(segd_registry_new(&r, url, &o, err, sizeof(err)), SEGD_OK);
        const char *json;
        assert_int_equal(segd_registry_get_schema(r, 1, &json, err, sizeof(err)), SEGD_ERR_HTTP);
        assert_non_null(strstr(err, "schema registry http://127.0.0.1:"));
        assert_null(strstr(err, "krit"));
        assert_null(strstr(err, "alice"));
        segd_registry_destroy(r);
    }
}

static void test_unreachable_registry(void **state)
{
    (void)state;
    int port = free_port();
    segd_registry_t *r = registry_at(port, 1);
    const char *json;
    char err[256];
    assert_int_equal(segd_registry_get_schema(r, 1, &json, err, sizeof(err)), SEGD_ERR_HTTP);
    assert_non_null(strstr(err, "schema registry"));
    /* through the codec: an outage (retry later), never "unknown schema id" */
    segd_avro_codec_t *c;
    segd_event_t out;
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, &(segd_schema_source_t){segd_registry_lookup, r}, err, sizeof(err)), SEGD_OK);
    const uint8_t msg[] = {0, 0, 0, 0, 1, 2, 'u'};
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, sizeof(msg), &out, err,
                                      sizeof(err)), SEGD_ERR_HTTP);
    assert_null(strstr(err, "unknown"));
    segd_avro_codec_destroy(c);
    segd_registry_destroy(r);
    segd_event_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_evolved_writers_by_id),
        cmocka_unit_test(test_incompatible_writer),
        cmocka_unit_test(test_registry_answers),
        cmocka_unit_test(test_basic_auth),
        cmocka_unit_test(test_unreachable_registry),
        cmocka_unit_test(test_url_credentials_redacted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
