/* HTTP endpoints of the edge cache; see http.h. */
#include "cache/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

#define USERS_PREFIX "/v1/users/"
#define FIRST_GUESS 4096 /* entries; a lookup that needs more is retried */

struct segd_http {
    struct MHD_Daemon *d;
    segd_edge_t *edge;
    segd_health_cb health;
    segd_metrics_t *metrics;
    segd_ready_cb ready_cb;
    segd_metric_t *lookups, *lookup_seconds;
    void *ctx;
    _Atomic int ready;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (!text)
        return MHD_NO;
    size_t len = strlen(text);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static json_t *message(const char *key, const char *value)
{
    return json_pack("{s:s}", key, value);
}

static enum MHD_Result user(segd_http_t *h, struct MHD_Connection *c, const char *id)
{
    size_t len = strlen(id), cap = FIRST_GUESS, n = 0;
    if (len == 0 || len > 256)
        return reply(c, MHD_HTTP_BAD_REQUEST, message("error", "bad user id"));
    segd_entry_t *e = malloc(cap * sizeof(*e));
    segd_err_t err = e ? segd_edge_lookup(h->edge, id, len, e, cap, &n) : SEGD_ERR_NOMEM;
    if (err == SEGD_ERR_LIMIT) { /* a huge profile: once more with room for it */
        free(e);
        cap = n + 64;
        e = malloc(cap * sizeof(*e));
        err = e ? segd_edge_lookup(h->edge, id, len, e, cap, &n) : SEGD_ERR_NOMEM;
    }
    segd_metric_add(h->lookups, (const char *[]){err ? "error" : n ? "hit" : "miss"}, 1);
    if (err) {
        free(e);
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, message("error", segd_err_str(err)));
    }
    json_t *o = json_object();
    json_object_set_new(o, "user_id", json_stringn(id, len));
    json_object_set_new(o, "segments", segd_entries_json(e, n));
    free(e);
    return reply(c, MHD_HTTP_OK, o);
}

/* A lookup takes microseconds (bench/RESULTS.md): finer than latencies elsewhere. */
static const double lookup_bounds[] = {0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                       0.0005,   0.001,   0.0025,   0.01,    0.1};

/* The table lookup and its JSON, timed (not the network). */
static enum MHD_Result timed_user(segd_http_t *h, struct MHD_Connection *c, const char *id)
{
    double t0 = segd_mono_s();
    enum MHD_Result r = user(h, c, id);
    segd_metric_observe(h->lookup_seconds, NULL, segd_mono_s() - t0);
    return r;
}

static enum MHD_Result readyz(segd_http_t *h, struct MHD_Connection *c)
{
    if (!atomic_load(&h->ready))
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                     json_pack("{s:b,s:s}", "ready", 0, "reason", "loading"));
    segd_buf_t b = {0};
    int ready = h->ready_cb ? h->ready_cb(h->ctx, &b) : 1;
    json_t *o = b.len ? json_loadb((const char *)b.data, b.len, 0, NULL) : NULL;
    segd_buf_free(&b);
    if (!o)
        o = json_pack("{s:b}", "ready", ready);
    return reply(c, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, o);
}

static enum MHD_Result healthz(segd_http_t *h, struct MHD_Connection *c)
{
    if (!atomic_load(&h->ready))
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, message("status", "loading"));
    json_t *o = message("status", "ok");
    if (h->health)
        h->health(h->ctx, o);
    return reply(c, MHD_HTTP_OK, o);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls)
{
    (void)version, (void)upload, (void)upload_size, (void)req_cls;
    segd_http_t *h = cls;
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, message("error", "GET only"));
    if (!strcmp(url, "/healthz"))
        return healthz(h, c);
    if (!strcmp(url, "/readyz"))
        return readyz(h, c);
    if (!strcmp(url, "/metrics") && h->metrics)
        return (enum MHD_Result)segd_metrics_reply(c, h->metrics);
    if (!strncmp(url, USERS_PREFIX, strlen(USERS_PREFIX))) {
        if (!atomic_load(&h->ready))
            return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, message("status", "loading"));
        return timed_user(h, c, url + strlen(USERS_PREFIX));
    }
    return reply(c, MHD_HTTP_NOT_FOUND, message("error", "no such endpoint"));
}

static segd_err_t parse_listen(const char *listen, struct sockaddr_in *sa, char *errstr,
                               size_t n)
{
    char host[64];
    const char *colon = strrchr(listen, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || (size_t)(colon - listen) >= sizeof(host) || !end || *end || port < 0 ||
        port > 65535)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "--listen %s: want HOST:PORT", listen);
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host[0] ? host : "0.0.0.0", &sa->sin_addr) != 1)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "--listen %s: not an IPv4 address", listen);
    return SEGD_OK;
}

segd_err_t segd_http_start(segd_http_t **out, const char *listen, segd_edge_t *edge,
                           segd_health_cb health, segd_metrics_t *metrics, segd_ready_cb ready,
                           void *ctx, char *errstr, size_t n)
{
    struct sockaddr_in sa;
    segd_err_t err = parse_listen(listen, &sa, errstr, n);
    if (err)
        return err;
    segd_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        return SEGD_ERR_NOMEM;
    h->edge = edge;
    h->health = health;
    h->metrics = metrics;
    h->ready_cb = ready;
    h->ctx = ctx;
    h->lookups = segd_metrics_counter(metrics, "segd_cache_lookups_total",
                                      "User lookups over HTTP, by result (hit: live segments).",
                                      "result");
    h->lookup_seconds = segd_metrics_histogram(
        metrics, "segd_cache_lookup_seconds", "Time of a lookup and its JSON, network aside.",
        NULL, lookup_bounds, sizeof(lookup_bounds) / sizeof(lookup_bounds[0]));
    h->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            handle, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)2,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return segd_errf(SEGD_ERR_IO, errstr, n, "cannot listen on %s", listen);
    }
    *out = h;
    return SEGD_OK;
}

void segd_http_set_ready(segd_http_t *h, int ready) { atomic_store(&h->ready, ready); }

void segd_http_stop(segd_http_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
