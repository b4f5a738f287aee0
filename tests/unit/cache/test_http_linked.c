/* The cache's HTTP linked reads (cache/http.h, DESIGN §10.5): the server
 * started in process over an edge table fed deltas and MemberEvents;
 * GET /v1/users/{id}?linked=true and a batch with "linked": true answer the
 * component's join with "master" and "members" after the other keys, in
 * `segd get --linked --json`'s order; linked=false and no parameter answer
 * the id alone; any other value is 400 naming "linked". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "cache/edge.h"
#include "cache/http.h"
#include "metrics/registry.h"

#define NOW_S 1800000000LL

static size_t collect(char *p, size_t size, size_t n, void *ctx)
{
    segd_buf_t *b = ctx;
    return segd_buf_append(b, p, size * n) ? 0 : size * n;
}

/* status code; the body (NUL-terminated) into *body. */
static long call(const char *url, const char *post, segd_buf_t *body)
{
    CURL *c = curl_easy_init();
    body->len = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    if (post)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    assert_int_equal(segd_buf_append(body, "", 1), SEGD_OK);
    return code;
}

static void put(segd_edge_t *e, const char *user, int64_t seg, int64_t ts, int64_t expiry)
{
    segd_change_t c;
    segd_change_init(&c);
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = user;
    c.user_id_len = strlen(user);
    segd_entry_t en = {seg, ts, expiry, 0, 0};
    assert_int_equal(segd_profile_push(&c.profile, &en), SEGD_OK);
    assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    segd_change_free(&c);
}

static void member(segd_edge_t *e, const char *id, const char *master)
{
    segd_member_t m = {.id = id, .id_len = strlen(id), .master = master,
                       .master_len = strlen(master), .master_first_seen_ms = 1};
    assert_int_equal(segd_edge_apply_member(e, &m), SEGD_OK);
}

static void test_http_linked(void **state)
{
    (void)state;
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW_S * 1000;
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    put(e, "ann", 1, 100, NOW_S + 60);
    put(e, "bob", 1, 200, 0); /* bob's later tombstone of 1 wins the join */
    put(e, "bob", 2, 200, NOW_S + 120);
    put(e, "cy", 3, 300, NOW_S + 180);
    member(e, "bob", "ann");
    member(e, "cy", "ann");
    member(e, "ann", "ann");
    segd_metrics_t *metrics = segd_metrics_new();
    segd_http_t *h = NULL;
    char err[256] = "", url[256], base[64];
    int port = 0;
    for (int attempt = 0; attempt < 20 && !h; attempt++) {
        port = 20000 + (int)((unsigned)rand() % 20000);
        snprintf(base, sizeof(base), "127.0.0.1:%d", port);
        if (segd_http_start(&h, base, e, NULL, metrics, NULL, NULL, err, sizeof(err)))
            h = NULL;
    }
    assert_non_null(h);
    segd_http_set_ready(h, 1);
    segd_buf_t b = {0};

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/users/cy?linked=true", port);
    assert_int_equal(call(url, NULL, &b), 200);
    assert_string_equal((char *)b.data,
                        "{\"user_id\":\"cy\",\"known\":true,\"segments\":[{\"id\":2,"
                        "\"expires_at\":1800000120,\"ts_ms\":200,\"flags\":0,\"partner_id\":0},"
                        "{\"id\":3,\"expires_at\":1800000180,\"ts_ms\":300,\"flags\":0,"
                        "\"partner_id\":0}],\"master\":\"ann\",\"members\":[\"ann\",\"bob\","
                        "\"cy\"]}");
    snprintf(url, sizeof(url),
             "http://127.0.0.1:%d/v1/users/bob?linked=true&count_range=1:2", port);
    assert_int_equal(call(url, NULL, &b), 200);
    assert_non_null(strstr((char *)b.data, "\"count_range\":{\"from\":1,\"to\":2,\"count\":1},"
                                           "\"master\":\"ann\",\"members\":[\"ann\",\"bob\","
                                           "\"cy\"]}"));
    /* linked=false and no parameter: cy alone */
    for (int k = 0; k < 2; k++) {
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/users/cy%s", port,
                 k ? "?linked=false" : "");
        assert_int_equal(call(url, NULL, &b), 200);
        assert_string_equal((char *)b.data,
                            "{\"user_id\":\"cy\",\"known\":true,\"segments\":[{\"id\":3,"
                            "\"expires_at\":1800000180,\"ts_ms\":300,\"flags\":0,"
                            "\"partner_id\":0}]}");
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/users/cy?linked=yes", port);
    assert_int_equal(call(url, NULL, &b), 400);
    assert_non_null(strstr((char *)b.data, "\"parameters\":[\"linked\"]"));
    /* an id never seen: alone, 404 */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/users/zz?linked=true", port);
    assert_int_equal(call(url, NULL, &b), 404);
    assert_string_equal((char *)b.data, "{\"user_id\":\"zz\",\"known\":false,\"segments\":[],"
                                         "\"master\":\"zz\",\"members\":[\"zz\"]}");
    /* the batch */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/users:batch", port);
    assert_int_equal(call(url, "{\"users\":[\"ann\",\"zz\"],\"linked\":true}", &b), 200);
    assert_non_null(strstr((char *)b.data, "\"master\":\"ann\",\"members\":[\"ann\",\"bob\","
                                           "\"cy\"]},{\"user_id\":\"zz\""));
    assert_int_equal(call(url, "{\"users\":[\"ann\"],\"linked\":false}", &b), 200);
    assert_null(strstr((char *)b.data, "members"));
    assert_int_equal(call(url, "{\"users\":[\"ann\"],\"linked\":1}", &b), 400);
    segd_buf_free(&b);
    segd_http_stop(h);
    segd_metrics_destroy(metrics);
    segd_edge_destroy(e);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_linked),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
