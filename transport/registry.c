/* Schema-registry client; see registry.h. Retries transient transport
 * failures and 5xx (curl_retry.h); any other status is an answer, not a fault. */
#include "transport/registry.h"

#include "base/buf.h"
#include "transport/curl_retry.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cached_schema {
    int32_t id;
    char *json;
} cached_schema_t;

struct segd_registry {
    char *base;
    segd_registry_opts_t o;
    char *userpass, *ca_file;
    CURL *curl;
    cached_schema_t *cache;
    size_t ncache, capcache;
};

typedef struct body {
    char *data;
    size_t len;
    char reason[64]; /* the final status line's reason phrase ("Unauthorized") */
} body_t;

void segd_registry_opts_default(segd_registry_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 5000;
    o->max_retries = 5;
    o->backoff_ms = 100;
}

segd_err_t segd_registry_new(segd_registry_t **out, const char *base_url,
                             const segd_registry_opts_t *opts, char *errstr, size_t n)
{
    segd_registry_t *r = calloc(1, sizeof(*r));
    if (!r)
        return SEGD_ERR_NOMEM;
    if (opts)
        r->o = *opts;
    else
        segd_registry_opts_default(&r->o);
    size_t len = strlen(base_url);
    while (len && base_url[len - 1] == '/')
        len--;
    r->base = strndup(base_url, len);
    r->userpass = r->o.userpass ? strdup(r->o.userpass) : NULL;
    r->ca_file = r->o.ca_file ? strdup(r->o.ca_file) : NULL;
    r->curl = curl_easy_init();
    if (!r->base || !r->curl || strncmp(r->base, "http", 4) != 0) {
        segd_registry_destroy(r);
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "bad schema registry URL '%s'", base_url);
    }
    *out = r;
    return SEGD_OK;
}

void segd_registry_destroy(segd_registry_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ncache; i++)
        free(r->cache[i].json);
    free(r->cache);
    if (r->curl)
        curl_easy_cleanup(r->curl);
    free(r->base);
    free(r->userpass);
    free(r->ca_file);
    free(r);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ctx)
{
    body_t *b = ctx;
    size_t add = size * nmemb;
    if (b->len + add > (8u << 20))
        return 0; /* a registry answer is never this large */
    char *d = realloc(b->data, b->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, ptr, add);
    b->len += add;
    d[b->len] = 0;
    b->data = d;
    return add;
}

/* Keeps the reason phrase of each status line; the last one is the final
 * answer's (after a 100 Continue). An error message then says what the
 * server (a registry, or a proxy in front of it) answered in words. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ctx)
{
    body_t *b = ctx;
    size_t n = size * nmemb;
    if (n > 5 && !memcmp(ptr, "HTTP/", 5)) {
        const char *sp = memchr(ptr, ' ', n);
        const char *sp2 = sp ? memchr(sp + 1, ' ', n - (size_t)(sp + 1 - ptr)) : NULL;
        size_t k = 0;
        for (const char *p = sp2 ? sp2 + 1 : ptr + n; p < ptr + n && k + 1 < sizeof(b->reason);
             p++)
            if (*p != '\r' && *p != '\n')
                b->reason[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
        b->reason[k] = 0;
    }
    return n;
}

/* url without its user information ("https://u:p@h/" -> "https://h/"),
 * for messages: a URL may carry the registry's credentials, and those
 * must not reach a log. The user information ends at the authority's last
 * '@': a password typed with a raw '@' in it ("u:p@ss@h") is cut whole. */
static void redact_url(const char *url, char *out, size_t n)
{
    const char *scheme = strstr(url, "://");
    const char *host = scheme ? scheme + 3 : url;
    size_t authority = strcspn(host, "/?#");
    const char *at = NULL;
    for (const char *c = host; c < host + authority; c++)
        if (*c == '@')
            at = c;
    if (at)
        snprintf(out, n, "%.*s%s", (int)(host - url), url, at + 1);
    else
        snprintf(out, n, "%s", url);
}

typedef struct attempt_ctx {
    segd_registry_t *r;
    const char *url, *post;
    struct curl_slist *hdr;
    body_t *resp;
} attempt_ctx_t;

static segd_curl_result_t attempt(void *ctx)
{
    attempt_ctx_t *ac = ctx;
    segd_registry_t *r = ac->r;
    CURL *c = r->curl;
    segd_curl_result_t res = {CURLE_OK, 0, 0};
    curl_easy_reset(c);
    free(ac->resp->data);
    ac->resp->data = NULL;
    ac->resp->len = 0;
    ac->resp->reason[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, ac->url);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, ac->resp);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, ac->hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, ac->resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, r->o.timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (ac->post)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, ac->post);
    if (r->userpass) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->userpass);
    }
    if (r->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, r->ca_file);
    if (r->o.insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    res.rc = curl_easy_perform(c);
    if (res.rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res.status);
    return res;
}

/* One request, retried by the rules of curl_retry.h; *status is the final
 * HTTP status. A 5xx or transport failure that outlasts the retries is
 * SEGD_ERR_HTTP; any other status is an answer for the caller to judge. */
static segd_err_t request(segd_registry_t *r, const char *path, const char *post,
                          body_t *resp, long *status, char *errstr, size_t n)
{
    char url[2048];
    snprintf(url, sizeof(url), "%s%s", r->base, path);
    struct curl_slist *hdr = curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");
    if (post)
        hdr = curl_slist_append(hdr, "Content-Type: application/vnd.schemaregistry.v1+json");
    attempt_ctx_t ac = {r, url, post, hdr, resp};
    segd_curl_backoff_t b = {r->o.max_retries, r->o.backoff_ms, 30000L};
    segd_curl_result_t res = segd_curl_retry(&b, attempt, &ac, NULL);
    curl_slist_free_all(hdr);
    *status = res.status;
    if (res.rc == CURLE_OK && res.status < 500)
        return SEGD_OK;
    char shown[2048];
    redact_url(url, shown, sizeof(shown));
    if (res.rc != CURLE_OK)
        return segd_errf(SEGD_ERR_HTTP, errstr, n, "schema registry %s: %s", shown,
                         curl_easy_strerror(res.rc));
    return segd_errf(SEGD_ERR_HTTP, errstr, n, "schema registry %s: server error (HTTP %ld %s)",
                     shown, res.status, resp->reason);
}

static const char *cache_find(const segd_registry_t *r, int32_t id)
{
    for (size_t i = 0; i < r->ncache; i++)
        if (r->cache[i].id == id)
            return r->cache[i].json;
    return NULL;
}

static segd_err_t cache_add(segd_registry_t *r, int32_t id, const char *json)
{
    cached_schema_t *c = segd_array_grow(r->cache, &r->capcache, r->ncache + 1, sizeof(*c));
    if (!c)
        return SEGD_ERR_NOMEM;
    r->cache = c;
    r->cache[r->ncache].id = id;
    r->cache[r->ncache].json = strdup(json);
    return r->cache[r->ncache++].json ? SEGD_OK : SEGD_ERR_NOMEM;
}

/* The registry's own reason: "message" of its JSON error body. */
static const char *json_message(const body_t *resp, json_t **root)
{
    *root = json_loadb(resp->data ? resp->data : "", resp->len, 0, NULL);
    return json_string_value(json_object_get(*root, "message"));
}

/* A schema fetch answered with neither 200 nor 404, in words an operator can
 * act on: the status and its reason phrase, what 401/403 mean here, and
 * the registry's own message when its body has one. A bare "HTTP 401"
 * did not say that the credentials were the problem. */
static segd_err_t answered(int32_t id, long status, const body_t *resp, char *errstr, size_t n)
{
    json_t *root;
    const char *msg = json_message(resp, &root);
    const char *why = status == 401   ? " (not authorized: check input.schema.registry.auth)"
                      : status == 403 ? " (forbidden: the user may not read schemas)"
                                      : "";
    segd_err_t err = segd_errf(SEGD_ERR_HTTP, errstr, n,
                               "schema registry: HTTP %ld %s for id %d%s%s%.300s", status,
                               resp->reason, id, why, msg ? ": " : "", msg ? msg : "");
    json_decref(root);
    return err;
}

segd_err_t segd_registry_get_schema(segd_registry_t *r, int32_t id, const char **json,
                                    char *errstr, size_t n)
{
    if ((*json = cache_find(r, id)))
        return SEGD_OK;
    char path[64];
    body_t resp = {0};
    long status;
    snprintf(path, sizeof(path), "/schemas/ids/%d", id);
    segd_err_t err = request(r, path, NULL, &resp, &status, errstr, n);
    if (!err && status == 404)
        err = segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "unknown schema id %d", id);
    else if (!err && status != 200)
        err = answered(id, status, &resp, errstr, n);
    json_t *root = NULL;
    if (!err) {
        root = json_loadb(resp.data ? resp.data : "", resp.len, 0, NULL);
        json_t *s = json_object_get(root, "schema");
        if (!json_is_string(s))
            err = segd_errf(SEGD_ERR_HTTP, errstr, n, "schema registry: bad answer for id %d", id);
        else if ((err = cache_add(r, id, json_string_value(s))) == SEGD_OK)
            *json = cache_find(r, id);
    }
    json_decref(root);
    free(resp.data);
    return err;
}

/* A refused registration, in words an operator can act on: what the status
 * means for a schema registry and the registry's own reason ("message" of
 * its JSON error body, e.g. which field breaks compatibility). A bare "HTTP
 * 409" said neither. */
static segd_err_t refused(const char *subject, long status, const body_t *resp, char *errstr,
                          size_t n)
{
    const char *why = status == 409   ? "schema incompatible with the subject's earlier "
                                        "versions under its compatibility level"
                      : status == 422 ? "schema invalid"
                      : status == 401 ? "not authorized (check input.schema.registry.auth)"
                      : status == 403 ? "forbidden"
                                      : "refused";
    json_t *root = json_loadb(resp->data ? resp->data : "", resp->len, 0, NULL);
    const char *msg = json_string_value(json_object_get(root, "message"));
    segd_err_t err = segd_errf(SEGD_ERR_HTTP, errstr, n, "register %s: HTTP %ld %s, %s%s%.300s",
                               subject, status, resp->reason, why, msg ? ": " : "",
                               msg ? msg : "");
    json_decref(root);
    return err;
}

segd_err_t segd_registry_register(segd_registry_t *r, const char *subject,
                                  const char *schema_json, int32_t *id, char *errstr,
                                  size_t n)
{
    char path[512];
    body_t resp = {0};
    long status;
    char *esc = curl_easy_escape(r->curl, subject, 0); /* subjects may hold '/' or ' ' */
    if (!esc)
        return SEGD_ERR_NOMEM;
    snprintf(path, sizeof(path), "/subjects/%s/versions", esc);
    curl_free(esc);
    json_t *req = json_pack("{s:s}", "schema", schema_json);
    char *post = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!post)
        return SEGD_ERR_NOMEM;
    segd_err_t err = request(r, path, post, &resp, &status, errstr, n);
    free(post);
    json_t *root = NULL;
    if (!err && status / 100 != 2)
        err = refused(subject, status, &resp, errstr, n);
    if (!err) {
        root = json_loadb(resp.data ? resp.data : "", resp.len, 0, NULL);
        json_t *v = json_object_get(root, "id");
        if (json_is_integer(v))
            *id = (int32_t)json_integer_value(v);
        else
            err = segd_errf(SEGD_ERR_HTTP, errstr, n, "register %s: no id in answer", subject);
    }
    json_decref(root);
    free(resp.data);
    return err;
}

segd_err_t segd_registry_lookup(void *registry, int32_t id, const char **json, char *errstr,
                                size_t n)
{
    return segd_registry_get_schema(registry, id, json, errstr, n);
}
