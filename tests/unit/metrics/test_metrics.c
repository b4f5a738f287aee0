/* metrics/registry.c and metrics/server.c: the exact exposition text of a
 * counter, a labelled gauge and a histogram, label and help escaping,
 * registration rules, updates from threads, and the HTTP endpoints. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/listen.h"
#include "metrics/process.h"
#include "metrics/registry.h"
#include "metrics/server.h"

static char *render(segd_metrics_t *m)
{
    segd_buf_t b = {0};
    assert_int_equal(segd_metrics_render(m, &b), SEGD_OK);
    char *s = calloc(1, b.len + 1);
    if (b.len)
        memcpy(s, b.data, b.len);
    segd_buf_free(&b);
    return s;
}

static void test_counter_text(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    segd_metric_t *c = segd_metrics_counter(m, "segd_things_total", "Things done.", NULL);
    assert_non_null(c);
    char *s = render(m);
    assert_string_equal(s, ""); /* no series yet: the family is not shown */
    free(s);
    segd_metric_add(c, NULL, 2);
    segd_metric_add(c, NULL, 3);
    segd_metric_add(c, NULL, -7); /* a counter never goes down */
    s = render(m);
    assert_string_equal(s, "# HELP segd_things_total Things done.\n"
                           "# TYPE segd_things_total counter\n"
                           "segd_things_total 5\n");
    free(s);
    segd_metrics_destroy(m);
}

static void test_labelled_gauge_text(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    segd_metric_t *g = segd_metrics_gauge(m, "segd_lag", "Lag.\nIn messages \\ offsets.",
                                          "topic,partition");
    assert_non_null(g);
    const char *a[] = {"in", "0"}, *b[] = {"we\"ird\\to\npic", "12"};
    segd_metric_set(g, a, 42);
    segd_metric_set(g, b, 0.25);
    segd_metric_add(g, a, -2);
    char *s = render(m);
    assert_string_equal(s, "# HELP segd_lag Lag.\\nIn messages \\\\ offsets.\n"
                           "# TYPE segd_lag gauge\n"
                           "segd_lag{topic=\"in\",partition=\"0\"} 40\n"
                           "segd_lag{topic=\"we\\\"ird\\\\to\\npic\",partition=\"12\"} 0.25\n");
    free(s);
    segd_metric_remove(g, a);
    s = render(m);
    assert_null(strstr(s, "topic=\"in\""));
    assert_non_null(strstr(s, "partition=\"12\"} 0.25\n"));
    free(s);
    segd_metric_clear(g);
    s = render(m);
    assert_string_equal(s, "");
    free(s);
    segd_metrics_destroy(m);
}

static void test_histogram_text(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    const double bounds[] = {0.005, 0.1, 1};
    segd_metric_t *h = segd_metrics_histogram(m, "segd_apply_seconds", "Apply time.", "topic",
                                              bounds, 3);
    assert_non_null(h);
    const char *t[] = {"in"};
    segd_metric_observe(h, t, 0.001);
    segd_metric_observe(h, t, 0.005); /* on the bound: le is inclusive */
    segd_metric_observe(h, t, 0.5);
    segd_metric_observe(h, t, 7);
    char *s = render(m);
    assert_string_equal(s, "# HELP segd_apply_seconds Apply time.\n"
                           "# TYPE segd_apply_seconds histogram\n"
                           "segd_apply_seconds_bucket{topic=\"in\",le=\"0.005\"} 2\n"
                           "segd_apply_seconds_bucket{topic=\"in\",le=\"0.1\"} 2\n"
                           "segd_apply_seconds_bucket{topic=\"in\",le=\"1\"} 3\n"
                           "segd_apply_seconds_bucket{topic=\"in\",le=\"+Inf\"} 4\n"
                           "segd_apply_seconds_sum{topic=\"in\"} 7.506\n"
                           "segd_apply_seconds_count{topic=\"in\"} 4\n");
    free(s);
    /* without labels, le is the only one */
    segd_metric_t *u = segd_metrics_histogram(m, "segd_size", "Size.", NULL, bounds, 1);
    segd_metric_observe(u, NULL, 1e9);
    s = render(m);
    assert_non_null(strstr(s, "segd_size_bucket{le=\"0.005\"} 0\n"
                              "segd_size_bucket{le=\"+Inf\"} 1\n"
                              "segd_size_sum 1000000000\n"
                              "segd_size_count 1\n"));
    free(s);
    segd_metrics_destroy(m);
}

static void test_registration_rules(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    segd_metric_t *c = segd_metrics_counter(m, "segd_x_total", "X.", "topic");
    assert_ptr_equal(segd_metrics_counter(m, "segd_x_total", "X again.", "topic"), c);
    assert_null(segd_metrics_gauge(m, "segd_x_total", "X.", "topic"));     /* other type */
    assert_null(segd_metrics_counter(m, "segd_x_total", "X.", "partition")); /* other labels */
    assert_null(segd_metrics_counter(m, "9lives", "bad name", NULL));
    assert_null(segd_metrics_counter(m, "segd-dash", "bad name", NULL));
    assert_null(segd_metrics_gauge(m, "segd_y", "reserved label", "le"));
    assert_null(segd_metrics_gauge(m, "segd_y", "bad label", "a:b"));
    assert_null(segd_metrics_gauge(m, "segd_y", "too many", "a,b,c,d,e"));
    const double down[] = {1, 0.5};
    assert_null(segd_metrics_histogram(m, "segd_h", "unsorted", NULL, down, 2));
    assert_null(segd_metrics_histogram(m, "segd_h", "no buckets", NULL, down, 0));
    /* updates of a NULL family (no registry) or of the wrong kind do nothing */
    segd_metric_add(NULL, NULL, 1);
    segd_metric_observe(c, (const char *[]){"t"}, 1);
    segd_metric_add(c, NULL, 1); /* labels missing */
    char *s = render(m);
    assert_string_equal(s, "");
    free(s);
    segd_metrics_destroy(m);
}

static void collect(void *ctx)
{
    segd_metric_t *g = ctx;
    segd_metric_add(g, NULL, 1);
}

static void test_collectors_run_at_render(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    segd_metric_t *g = segd_metrics_gauge(m, "segd_renders", "Renders.", NULL);
    assert_int_equal(segd_metrics_add_collector(m, collect, g), SEGD_OK);
    free(render(m));
    char *s = render(m);
    assert_non_null(strstr(s, "segd_renders 2\n"));
    free(s);
    segd_metrics_remove_collector(m, collect, g);
    s = render(m);
    assert_non_null(strstr(s, "segd_renders 2\n"));
    free(s);
    assert_int_equal(segd_process_metrics_register(m), SEGD_OK);
    s = render(m);
    assert_non_null(strstr(s, "# TYPE segd_process_cpu_seconds_total counter\n"));
    assert_null(strstr(s, "segd_process_resident_memory_bytes 0\n"));
    assert_true(segd_process_rss_bytes() > 0);
    free(s);
    segd_metrics_destroy(m);
}

typedef struct worker {
    segd_metric_t *c, *h;
} worker_t;

static void *work(void *arg)
{
    worker_t *w = arg;
    const char *v[] = {"p"};
    for (int i = 0; i < 10000; i++) {
        segd_metric_add(w->c, v, 1);
        segd_metric_observe(w->h, NULL, 0.01);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    worker_t w = {segd_metrics_counter(m, "segd_n_total", "N.", "p"),
                  segd_metrics_histogram(m, "segd_t_seconds", "T.", NULL,
                                         segd_metric_latency_buckets,
                                         segd_metric_latency_nbuckets)};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, work, &w);
    for (int i = 0; i < 20; i++)
        free(render(m)); /* renders while they count */
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    char *s = render(m);
    assert_non_null(strstr(s, "segd_n_total{p=\"p\"} 40000\n"));
    assert_non_null(strstr(s, "segd_t_seconds_count 40000\n"));
    free(s);
    segd_metrics_destroy(m);
}

/* A GET on 127.0.0.1:port; the status and (into body) the whole response. */
static int http_get(int port, const char *path, char *body, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < size && (r = read(fd, body + len, size - 1 - len)) > 0)
        len += (size_t)r;
    body[len] = 0;
    close(fd);
    int status = 0;
    sscanf(body, "HTTP/1.%*d %d", &status);
    return status;
}

/* ctx: an atomic flag the test flips while the server runs */
static int ready(void *ctx, segd_buf_t *body)
{
    int yes = atomic_load((atomic_int *)ctx);
    const char *j = yes ? "{\"ready\":true}" : "{\"ready\":false,\"reason\":\"lag\"}";
    segd_buf_append(body, j, strlen(j));
    return yes;
}

static void test_server(void **state)
{
    (void)state;
    segd_metrics_t *m = segd_metrics_new();
    segd_metric_set(segd_metrics_gauge(m, "segd_up", "Up.", NULL), NULL, 1);
    segd_metrics_server_t *s = NULL;
    char err[256];
    atomic_int ready_flag = 0;
    assert_int_equal(segd_metrics_server_start(&s, "127.0.0.1:0", m, ready, &ready_flag, err,
                                               sizeof(err)), SEGD_OK);
    int port = segd_metrics_server_port(s);
    assert_true(port > 0);
    char body[8192];
    assert_int_equal(http_get(port, "/metrics", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "text/plain; version=0.0.4"));
    assert_non_null(strstr(body, "\r\n\r\n# HELP segd_up Up.\n# TYPE segd_up gauge\nsegd_up 1\n"));
    assert_int_equal(http_get(port, "/healthz", body, sizeof(body)), 200);
    assert_int_equal(http_get(port, "/readyz", body, sizeof(body)), 503);
    assert_non_null(strstr(body, "{\"ready\":false,\"reason\":\"lag\"}"));
    atomic_store(&ready_flag, 1);
    assert_int_equal(http_get(port, "/readyz", body, sizeof(body)), 200);
    assert_int_equal(http_get(port, "/nope", body, sizeof(body)), 404);

    /* the same port again: in use, said so */
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    segd_metrics_server_t *s2 = NULL;
    assert_int_equal(segd_metrics_server_start(&s2, addr, m, NULL, NULL, err, sizeof(err)),
                     SEGD_ERR_IO);
    assert_non_null(strstr(err, "Address already in use"));
    segd_metrics_server_stop(s);
    /* bad addresses are configuration errors */
    const char *bad[] = {"localhost", "127.0.0.1", "127.0.0.1:", "no.such.host.invalid:80",
                         "127.0.0.1:70000", "[::1:9464", "127.0.0.1:12ab", "[nonsense]:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(segd_metrics_server_start(&s2, bad[i], m, NULL, NULL, err,
                                                   sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "metrics.listen"));
    assert_int_equal(segd_metrics_server_start(&s2, "localhost:0", m, NULL, NULL, err,
                                               sizeof(err)), SEGD_OK);
    segd_metrics_server_stop(s2);
    assert_false(segd_metrics_listen_enabled("off"));
    assert_false(segd_metrics_listen_enabled(""));
    assert_true(segd_metrics_listen_enabled("127.0.0.1:9464"));
    segd_metrics_destroy(m);
}

/* The one parser behind metrics.listen, the cache's --listen and --resp. */
static void test_listen_parse(void **state)
{
    (void)state;
    struct sockaddr_storage sa;
    socklen_t len = 0;
    char err[256] = "";
    assert_int_equal(segd_listen_parse("--x", "127.0.0.1:9464", &sa, &len, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(sa.ss_family, AF_INET);
    assert_int_equal(len, sizeof(struct sockaddr_in));
    assert_int_equal(segd_listen_port(&sa), 9464);
    assert_int_equal(((struct sockaddr_in *)&sa)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    assert_int_equal(segd_listen_parse("--x", ":0", &sa, &len, err, sizeof(err)), SEGD_OK);
    assert_int_equal(((struct sockaddr_in *)&sa)->sin_addr.s_addr, htonl(INADDR_ANY));
    assert_int_equal(segd_listen_port(&sa), 0);
    assert_int_equal(segd_listen_parse("--x", "[::1]:7", &sa, &len, err, sizeof(err)), SEGD_OK);
    assert_int_equal(sa.ss_family, AF_INET6);
    assert_int_equal(len, sizeof(struct sockaddr_in6));
    assert_int_equal(segd_listen_port(&sa), 7);
    assert_int_equal(segd_listen_parse("--x", "localhost:80", &sa, &len, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(sa.ss_family, AF_INET);
    const char *bad[] = {"9464", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "1.2.3.4:9x",
                         "[::1:5", "[zz]:5", "no-such-host.invalid:5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        assert_int_equal(segd_listen_parse("--x", bad[i], &sa, &len, err, sizeof(err)),
                         SEGD_ERR_CONFIG);
        assert_non_null(strstr(err, "--x"));
        assert_non_null(strstr(err, bad[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_text),
        cmocka_unit_test(test_labelled_gauge_text),
        cmocka_unit_test(test_histogram_text),
        cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_collectors_run_at_render),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_server),
        cmocka_unit_test(test_listen_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
