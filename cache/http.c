/* HTTP endpoints of the edge cache; see http.h. */
#include "cache/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/secret.h"
#include "base/utf8.h"
#include "core/query.h"
#include "metrics/listen.h"

#define USERS_PREFIX "/v1/users/"
#define BATCH_PATH "/v1/users:batch"
#define FIRST_GUESS 4096 /* entries; a lookup that needs more is retried */
#define MAX_USER_ID 256
/* a batch body may hold batch_max quoted, escaped ids plus its filters */
#define BODY_BYTES(batch_max) (4096 + (batch_max) * (2 * MAX_USER_ID + 8))

struct segd_http {
    struct MHD_Daemon *d;
    segd_edge_t *edge;
    segd_health_cb health;
    segd_metrics_t *metrics;
    segd_ready_cb ready_cb;
    segd_metric_t *lookups, *lookup_seconds, *requests, *request_seconds, *batch_users;
    void *ctx;
    _Atomic int ready;
    _Atomic size_t batch_max;
    char *token; /* the bearer token every route but the probes needs; NULL = none */
    size_t token_len;
};

/* One request's state across libmicrohttpd's calls: the route, its start
 * time, and a POST body as it arrives. */
typedef struct request {
    const char *route;
    unsigned status;
    double t0;
    segd_buf_t body;
    int too_big;
    int authorized; /* the right bearer token, or none needed */
    int credentials; /* an Authorization header came (a wrong token, not none) */
} request_t;

/* The bidder's filters, as `segd get` takes them (core/query.h). */
typedef struct filters {
    segd_query_t q;
    int has_range;
    int64_t lo, hi;
    int linked; /* the join over the user's identity component (DESIGN §10.5) */
} filters_t;

/* A JSON body of len bytes at text (malloc'd; freed here either way).
 * From a buffer: libmicrohttpd sends Content-Length, never chunks. */
static enum MHD_Result reply_owned(struct MHD_Connection *c, unsigned status, void *text,
                                   size_t len)
{
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

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    return text ? reply_owned(c, status, text, strlen(text)) : MHD_NO;
}

/* A body rendered as text (the users' answers); takes out's memory. */
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, segd_buf_t *out)
{
    segd_buf_t b = *out;
    *out = (segd_buf_t){0};
    return reply_owned(c, status, b.data, b.len);
}

static json_t *message(const char *key, const char *value)
{
    return json_pack("{s:s}", key, value);
}

static enum MHD_Result fail(struct MHD_Connection *c, request_t *rq, unsigned status,
                            const char *msg)
{
    rq->status = status;
    return reply(c, status, message("error", msg));
}

/* A non-negative decimal, all of s. */
static int parse_i64(const char *s, int64_t *out)
{
    char *end = NULL;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_range(const char *s, filters_t *f)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    char lo[32];
    if (!colon || (size_t)(colon - s) >= sizeof(lo))
        return -1;
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = 0;
    if (parse_i64(lo, &f->lo) || parse_i64(colon + 1, &f->hi) || f->lo > f->hi)
        return -1;
    f->has_range = 1;
    return 0;
}

/* One filter by name; 1 = not a filter's name, -1 = a bad value. */
static int set_filter(filters_t *f, const char *key, const char *value)
{
    if (!strcmp(key, "expiring_after"))
        return parse_i64(value, &f->q.expiring_after_s) ? -1 : 0;
    if (!strcmp(key, "updated_since_ms"))
        return parse_i64(value, &f->q.updated_since_ms) ? -1 : 0;
    if (!strcmp(key, "count_range"))
        return parse_range(value, f);
    if (!strcmp(key, "linked")) {
        if (!value || (strcmp(value, "true") && strcmp(value, "false")))
            return -1;
        f->linked = !strcmp(value, "true");
        return 0;
    }
    return 1;
}

/* A linked answer's "master" and "members" as JSON text (master first). */
typedef struct members_text {
    segd_buf_t master, members;
    size_t n;
} members_text_t;

static int add_member(void *ctx, const char *m, size_t len)
{
    members_text_t *t = ctx;
    if (!t->n++ && segd_json_string_text(&t->master, m, len))
        return 1;
    return (t->n > 1 && segd_buf_append(&t->members, ",", 1)) ||
           segd_json_string_text(&t->members, m, len) != SEGD_OK;
}

static segd_err_t lookup(segd_http_t *h, const char *id, size_t len, segd_entry_t *buf,
                         size_t cap, size_t *n, int *known, members_text_t *mt)
{
    if (!mt)
        return segd_edge_find(h->edge, id, len, buf, cap, n, known);
    mt->master.len = mt->members.len = mt->n = 0;
    return segd_edge_lookup_linked(h->edge, id, len, buf, cap, n, known, add_member, mt);
}

/* The live entries of a user (grown into *buf), or of its component when
 * mt is not NULL (its members into mt), then the filters. */
static segd_err_t find(segd_http_t *h, const char *id, size_t len, segd_entry_t **buf,
                       size_t *cap, size_t *n, int *known, members_text_t *mt)
{
    segd_err_t err = lookup(h, id, len, *buf, *cap, n, known, mt);
    if (err == SEGD_ERR_LIMIT) { /* a huge profile: once more with room for it */
        size_t want = *n + 64;
        segd_entry_t *bigger = realloc(*buf, want * sizeof(**buf));
        if (!bigger)
            return SEGD_ERR_NOMEM;
        *buf = bigger;
        *cap = want;
        err = lookup(h, id, len, *buf, *cap, n, known, mt);
    }
    return err;
}

/* The filters over the live entries e[0..n), and the object's text. */
static segd_err_t user_text_tail(const filters_t *f, const char *id, size_t len,
                                 segd_entry_t *e, size_t n, int known,
                                 const members_text_t *mt, segd_buf_t *out)
{
    size_t k = 0;
    uint64_t in_range = 0;
    for (size_t i = 0; i < n; i++) {
        if (f->has_range && e[i].segment_id >= f->lo && e[i].segment_id <= f->hi)
            in_range++;
        if (f->q.expiring_after_s && e[i].expiry_s <= f->q.expiring_after_s)
            continue;
        if (f->q.updated_since_ms && e[i].ts_ms < f->q.updated_since_ms)
            continue;
        e[k++] = e[i];
    }
    char tail[160];
    int tn = f->has_range ? snprintf(tail, sizeof(tail),
                                     ",\"count_range\":{\"from\":%" PRId64 ",\"to\":%" PRId64
                                     ",\"count\":%" PRIu64 "}",
                                     f->lo, f->hi, in_range)
                          : 0;
    const char *kn = known ? ",\"known\":true,\"segments\":" : ",\"known\":false,\"segments\":";
    if (segd_buf_append(out, "{\"user_id\":", 11) || segd_json_string_text(out, id, len) ||
        segd_buf_append(out, kn, strlen(kn)) || segd_entries_json_text(out, e, k) ||
        segd_buf_append(out, tail, (size_t)tn))
        return SEGD_ERR_NOMEM;
    if (mt && (segd_buf_append(out, ",\"master\":", 10) ||
               segd_buf_append(out, mt->master.data, mt->master.len) ||
               segd_buf_append(out, ",\"members\":[", 12) ||
               segd_buf_append(out, mt->members.data, mt->members.len) ||
               segd_buf_append(out, "]", 1)))
        return SEGD_ERR_NOMEM;
    return segd_buf_append(out, "}", 1) ? SEGD_ERR_NOMEM : SEGD_OK;
}

/* The user's object as text, as `segd get --json` prints it plus "known"
 * (key order user_id, known, segments, count_range, then for a linked read
 * master and members as `segd get --linked --json`): live entries matching
 * the filters, and the live count in the range. Written straight into out
 * (wire/profile_json.h): a value per field cost most of a request. */
static segd_err_t user_text(segd_http_t *h, const char *id, size_t len, const filters_t *f,
                            segd_entry_t **buf, size_t *cap, int *known, segd_buf_t *out)
{
    double t0 = segd_mono_s();
    size_t n = 0;
    members_text_t mt = {0};
    segd_err_t err = find(h, id, len, buf, cap, &n, known, f->linked ? &mt : NULL);
    segd_metric_add(h->lookups, (const char *[]){err ? "error" : n ? "hit" : "miss"}, 1);
    if (!err)
        err = user_text_tail(f, id, len, *buf, n, *known, f->linked ? &mt : NULL, out);
    segd_buf_free(&mt.master);
    segd_buf_free(&mt.members);
    if (!err)
        segd_metric_observe(h->lookup_seconds, NULL, segd_mono_s() - t0);
    return err;
}
typedef struct args_scan {
    filters_t *f;
    json_t *unknown, *bad;
} args_scan_t;

static enum MHD_Result scan_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    args_scan_t *a = cls;
    int r = set_filter(a->f, key, value);
    if (r)
        json_array_append_new(r > 0 ? a->unknown : a->bad, json_string(key));
    return MHD_YES;
}

static enum MHD_Result get_user(segd_http_t *h, struct MHD_Connection *c, request_t *rq,
                                const char *id)
{
    size_t len = strlen(id);
    if (len == 0 || len > MAX_USER_ID || !segd_utf8_valid(id, len))
        return fail(c, rq, MHD_HTTP_BAD_REQUEST, "bad user id");
    filters_t f = {0};
    args_scan_t a = {&f, json_array(), json_array()};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, scan_arg, &a);
    if (json_array_size(a.unknown) || json_array_size(a.bad)) {
        int unknown = json_array_size(a.unknown) > 0;
        json_t *o = json_pack("{s:s,s:o}", "error",
                              unknown ? "unknown parameters" : "malformed parameters",
                              "parameters", unknown ? a.unknown : a.bad);
        json_decref(unknown ? a.bad : a.unknown);
        rq->status = MHD_HTTP_BAD_REQUEST;
        return reply(c, rq->status, o);
    }
    json_decref(a.unknown);
    json_decref(a.bad);
    size_t cap = FIRST_GUESS;
    segd_entry_t *buf = malloc(cap * sizeof(*buf));
    int known = 0;
    segd_buf_t out = {0};
    segd_err_t err = buf ? user_text(h, id, len, &f, &buf, &cap, &known, &out) : SEGD_ERR_NOMEM;
    free(buf);
    if (err) {
        segd_buf_free(&out);
        return fail(c, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, segd_err_str(err));
    }
    rq->status = known ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND;
    return reply_text(c, rq->status, &out);
}

/* The batch body's filters and users; a message for a 400 otherwise. */
static const char *parse_batch(json_t *doc, filters_t *f, json_t **users)
{
    const char *key;
    json_t *v;
    *users = NULL;
    if (!json_is_object(doc))
        return "the body is not a JSON object";
    json_object_foreach(doc, key, v) {
        if (!strcmp(key, "users")) {
            *users = v;
            continue;
        }
        char num[32];
        const char *text = json_is_string(v)    ? json_string_value(v)
                           : json_is_boolean(v) ? (json_is_true(v) ? "true" : "false")
                                                : NULL;
        if (json_is_integer(v)) {
            snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            text = num;
        }
        int r = set_filter(f, key, text);
        if (r > 0)
            return "unknown field in the body";
        if (r < 0)
            return "malformed filter in the body";
    }
    if (!json_is_array(*users))
        return "\"users\" must be an array of user ids";
    size_t i;
    json_array_foreach(*users, i, v) {
        size_t len = json_is_string(v) ? json_string_length(v) : 0;
        if (len == 0 || len > MAX_USER_ID)
            return "every user id must be a string of 1 to 256 bytes";
    }
    return NULL;
}

static enum MHD_Result batch(segd_http_t *h, struct MHD_Connection *c, request_t *rq)
{
    size_t max = atomic_load(&h->batch_max);
    if (rq->too_big)
        return fail(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, "body too large");
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)rq->body.data, rq->body.len, 0, &jerr);
    if (!doc)
        return fail(c, rq, MHD_HTTP_BAD_REQUEST, "malformed JSON");
    filters_t f = {0};
    json_t *users;
    const char *bad = parse_batch(doc, &f, &users);
    if (bad) {
        json_decref(doc);
        return fail(c, rq, MHD_HTTP_BAD_REQUEST, bad);
    }
    size_t n = json_array_size(users);
    segd_metric_observe(h->batch_users, NULL, (double)n);
    if (n > max) {
        json_decref(doc);
        char msg[96];
        snprintf(msg, sizeof(msg), "%zu users: more than the limit of %zu", n, max);
        return fail(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, msg);
    }
    size_t cap = FIRST_GUESS, i;
    segd_entry_t *buf = malloc(cap * sizeof(*buf));
    segd_buf_t out = {0};
    json_t *v;
    segd_err_t err = buf ? segd_buf_append(&out, "{\"results\":[", 12) : SEGD_ERR_NOMEM;
    json_array_foreach(users, i, v) {
        int known = 0;
        if (!err && i)
            err = segd_buf_append(&out, ",", 1);
        if (!err)
            err = user_text(h, json_string_value(v), json_string_length(v), &f, &buf, &cap,
                            &known, &out);
        if (err)
            break;
    }
    if (!err)
        err = segd_buf_append(&out, "]}", 2);
    free(buf);
    json_decref(doc);
    if (err) {
        segd_buf_free(&out);
        return fail(c, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, segd_err_str(err));
    }
    rq->status = MHD_HTTP_OK;
    return reply_text(c, rq->status, &out);
}

/* Request handling is microseconds to a millisecond (a batch): finer
 * buckets than the latencies elsewhere. */
static const double lookup_bounds[] = {0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                       0.0005,   0.001,   0.0025,   0.01,    0.1};
static const double batch_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};

static enum MHD_Result readyz(segd_http_t *h, struct MHD_Connection *c, request_t *rq)
{
    rq->status = MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!atomic_load(&h->ready))
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                     json_pack("{s:b,s:s}", "ready", 0, "reason", "loading"));
    segd_buf_t b = {0};
    int ready = h->ready_cb ? h->ready_cb(h->ctx, &b) : 1;
    json_t *o = b.len ? json_loadb((const char *)b.data, b.len, 0, NULL) : NULL;
    segd_buf_free(&b);
    if (!o)
        o = json_pack("{s:b}", "ready", ready);
    rq->status = ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
    return reply(c, rq->status, o);
}

static enum MHD_Result healthz(segd_http_t *h, struct MHD_Connection *c, request_t *rq)
{
    rq->status = MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!atomic_load(&h->ready))
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, message("status", "loading"));
    json_t *o = message("status", "ok");
    if (h->health)
        h->health(h->ctx, o);
    rq->status = MHD_HTTP_OK;
    return reply(c, MHD_HTTP_OK, o);
}

/* Collects a POST body up to the cap; past it the rest is read and dropped
 * so that the 413 goes out on a connection that stays usable. */
static void take_body(segd_http_t *h, request_t *rq, const char *upload, size_t *size)
{
    size_t cap = BODY_BYTES(atomic_load(&h->batch_max));
    if (!rq->authorized) /* answered 401: nothing of it is kept */
        rq->too_big = 1;
    else if (rq->too_big || rq->body.len + *size > cap)
        rq->too_big = 1;
    else if (segd_buf_append(&rq->body, upload, *size))
        rq->too_big = 1; /* out of memory: refused as too large */
    *size = 0;
}

/* The headers' bearer token against h's; sets rq->authorized and
 * rq->credentials. The scheme's name is case-insensitive (RFC 7235). */
static void check_token(const segd_http_t *h, struct MHD_Connection *c, request_t *rq)
{
    rq->authorized = !h->token;
    if (!h->token)
        return;
    const char *v =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    rq->credentials = v != NULL;
    if (!v || strncasecmp(v, "Bearer ", 7))
        return;
    for (v += 7; *v == ' '; v++)
        ;
    size_t n = strlen(v);
    while (n && v[n - 1] == ' ')
        n--;
    rq->authorized = segd_secret_equal(h->token, h->token_len, v, n);
}

/* 401 with the challenge of RFC 6750: error="invalid_token" when a token
 * came and was wrong, none when no credentials came at all. */
static enum MHD_Result unauthorized(struct MHD_Connection *c, request_t *rq)
{
    rq->route = "unauthorized";
    rq->status = MHD_HTTP_UNAUTHORIZED;
    const char *msg = rq->credentials ? "invalid bearer token" : "bearer token required";
    char *text = json_dumps(message("error", msg), JSON_COMPACT);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            rq->credentials ? "Bearer realm=\"segd\", error=\"invalid_token\""
                                            : "Bearer realm=\"segd\"");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_UNAUTHORIZED, r);
    MHD_destroy_response(r);
    return ret;
}

/* Load balancers probe these without credentials: they say whether the
 * cache serves, never a user's data. */
static int open_route(const char *url)
{
    return !strcmp(url, "/healthz") || !strcmp(url, "/readyz");
}

static enum MHD_Result route(segd_http_t *h, struct MHD_Connection *c, request_t *rq,
                             const char *url, const char *method)
{
    if (!rq->authorized && !open_route(url))
        return unauthorized(c, rq);
    int post = !strcmp(method, "POST");
    if (!strcmp(url, BATCH_PATH)) {
        rq->route = "batch";
        if (!post)
            return fail(c, rq, MHD_HTTP_METHOD_NOT_ALLOWED, "POST only");
        if (!atomic_load(&h->ready))
            return fail(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "loading");
        return batch(h, c, rq);
    }
    if (post || (strcmp(method, "GET") && strcmp(method, "HEAD")))
        return fail(c, rq, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only");
    if (!strcmp(url, "/healthz"))
        return rq->route = "healthz", healthz(h, c, rq);
    if (!strcmp(url, "/readyz"))
        return rq->route = "readyz", readyz(h, c, rq);
    if (!strcmp(url, "/metrics") && h->metrics) {
        rq->route = "metrics";
        rq->status = MHD_HTTP_OK;
        return (enum MHD_Result)segd_metrics_reply(c, h->metrics);
    }
    if (!strncmp(url, USERS_PREFIX, strlen(USERS_PREFIX))) {
        rq->route = "user";
        if (!atomic_load(&h->ready)) {
            rq->status = MHD_HTTP_SERVICE_UNAVAILABLE;
            return reply(c, rq->status, message("status", "loading"));
        }
        return get_user(h, c, rq, url + strlen(USERS_PREFIX));
    }
    return fail(c, rq, MHD_HTTP_NOT_FOUND, "no such endpoint");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls)
{
    (void)version;
    segd_http_t *h = cls;
    request_t *rq = *req_cls;
    if (!rq) { /* the headers: the body, if any, comes in the next calls */
        if (!(rq = calloc(1, sizeof(*rq))))
            return MHD_NO;
        rq->t0 = segd_mono_s();
        rq->route = "other";
        check_token(h, c, rq);
        *req_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        take_body(h, rq, upload, upload_size);
        return MHD_YES;
    }
    return route(h, c, rq, url, method);
}

/* Counts and times every request by route and status, then frees its state. */
static void completed(void *cls, struct MHD_Connection *c, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)c;
    segd_http_t *h = cls;
    request_t *rq = *req_cls;
    if (!rq)
        return;
    char code[16];
    snprintf(code, sizeof(code), "%u", toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && rq->status
                                            ? rq->status : 0);
    segd_metric_add(h->requests, (const char *[]){rq->route, code}, 1);
    segd_metric_observe(h->request_seconds, (const char *[]){rq->route}, segd_mono_s() - rq->t0);
    segd_buf_free(&rq->body);
    free(rq);
    *req_cls = NULL;
}

segd_err_t segd_http_start(segd_http_t **out, const char *listen, segd_edge_t *edge,
                           segd_health_cb health, segd_metrics_t *metrics, segd_ready_cb ready,
                           void *ctx, char *errstr, size_t n)
{
    return segd_http_start_auth(out, listen, edge, health, metrics, ready, ctx, NULL, errstr, n);
}

segd_err_t segd_http_start_auth(segd_http_t **out, const char *listen, segd_edge_t *edge,
                                segd_health_cb health, segd_metrics_t *metrics,
                                segd_ready_cb ready, void *ctx, const char *bearer_token,
                                char *errstr, size_t n)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    segd_err_t err = segd_listen_parse("--listen", listen, &sa, &salen, errstr, n);
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
    if (bearer_token && !(h->token = strdup(bearer_token))) {
        free(h);
        return SEGD_ERR_NOMEM;
    }
    h->token_len = bearer_token ? strlen(bearer_token) : 0;
    h->lookups = segd_metrics_counter(metrics, "segd_cache_lookups_total",
                                      "User lookups over HTTP, by result (hit: live segments).",
                                      "result");
    h->lookup_seconds = segd_metrics_histogram(
        metrics, "segd_cache_lookup_seconds", "Time of a lookup and its JSON, network aside.",
        NULL, lookup_bounds, sizeof(lookup_bounds) / sizeof(lookup_bounds[0]));
    h->requests = segd_metrics_counter(metrics, "segd_cache_http_requests_total",
                                       "HTTP requests by route and status code.", "route,code");
    h->request_seconds = segd_metrics_histogram(
        metrics, "segd_cache_http_request_seconds",
        "Time from a request's headers to its response queued, by route.", "route",
        lookup_bounds, sizeof(lookup_bounds) / sizeof(lookup_bounds[0]));
    h->batch_users = segd_metrics_histogram(
        metrics, "segd_cache_http_batch_users", "Users asked for per POST /v1/users:batch.",
        NULL, batch_bounds, sizeof(batch_bounds) / sizeof(batch_bounds[0]));
    atomic_store(&h->batch_max, SEGD_HTTP_BATCH_MAX_DEFAULT);
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
                     (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, 0, NULL, NULL,
                            handle, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)2,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_END);
    if (!h->d) {
        segd_secret_free(h->token);
        free(h);
        return segd_errf(SEGD_ERR_IO, errstr, n, "cannot listen on %s", listen);
    }
    *out = h;
    return SEGD_OK;
}

void segd_http_set_ready(segd_http_t *h, int ready) { atomic_store(&h->ready, ready); }

void segd_http_set_batch_max(segd_http_t *h, size_t users) { atomic_store(&h->batch_max, users); }

void segd_http_stop(segd_http_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    segd_secret_free(h->token);
    free(h);
}
