/* Object names and URLs for snapshot destinations: a name is one printable
 * path component (callers pass names read from manifests, i.e. from
 * outside, so a name must neither leave the base nor break a URL or a
 * header line), escaped into a URL for the remote kinds. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "transport/dest_int.h"

/* ---------- names and URLs ---------- */

/* One path component of printable bytes: a name can neither leave the base
 * (a manifest could say "../x") nor break a URL or a header line. */
segd_err_t segd_dest_check_name(const char *name, char *errstr, size_t n)
{
    size_t len = name ? strlen(name) : 0;
    int ok = len > 0 && len <= NAME_MAX_LEN && strcmp(name, ".") && strcmp(name, "..");
    for (size_t i = 0; ok && i < len; i++)
        ok = name[i] != '/' && (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
    if (!ok)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "bad object name \"%.64s\"",
                         name ? name : "(null)");
    return SEGD_OK;
}

static int unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/* Percent-encodes all but RFC 3986 unreserved bytes (and '/' when
 * keep_slash): the form SigV4 signs as S3's canonical URI. libcurl 7.88
 * signs the path exactly as sent and 8.9+ canonicalises it while leaving
 * %XX alone, so an encoded path signs right on both. Freed by the caller. */
char *segd_dest_escape(const char *s, size_t len, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(3 * len + 1), *p = out;
    for (size_t i = 0; out && i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            *p++ = (char)c;
        } else {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        }
    }
    if (out)
        *p = 0;
    return out;
}

/* An object is a name at the base or, for reads, a name in a folder dir
 * under it: both are checked as one path component each. */
segd_err_t segd_dest_check_object(const char *dir, const char *name, char *errstr, size_t n)
{
    segd_err_t err = dir ? segd_dest_check_name(dir, errstr, n) : SEGD_OK;
    return err ? err : segd_dest_check_name(name, errstr, n);
}

/* One path component as a path or URL carries it. Freed by the caller. */
static char *component(const segd_dest_t *d, const char *s)
{
    return d->kind == DEST_DIR ? strdup(s) : segd_dest_escape(s, strlen(s), 0);
}

/* The object's path or URL: base/name, or base/dir/name (both already
 * checked). Freed by the caller. */
char *segd_dest_object_path(const segd_dest_t *d, const char *dir, const char *name)
{
    char *ed = dir ? component(d, dir) : NULL, *en = component(d, name), *s = NULL;
    if (en && !dir)
        s = segd_dest_printf("%s/%s", d->base, en);
    else if (en && ed)
        s = segd_dest_printf("%s/%s/%s", d->base, ed, en);
    free(ed);
    free(en);
    return s;
}

/* An http(s) URL with a host and no query or fragment (names are appended). */
segd_err_t segd_dest_check_base_url(const char *url, char *errstr, size_t n)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *query = NULL, *frag = NULL;
    if (!u)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
    segd_err_t err = SEGD_OK;
    if (rc)
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: %s", url, curl_url_strerror(rc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
             (strcmp(scheme, "http") && strcmp(scheme, "https")))
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: not an http(s) URL", url);
    else if (!curl_url_get(u, CURLUPART_QUERY, &query, 0) ||
             !curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0))
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: a base URL takes no query or fragment",
                        url);
    curl_free(scheme);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    return err;
}

/* A copy of s without trailing slashes (but keeping "/" itself). */
char *segd_dest_strip_slashes(const char *s)
{
    char *c = strdup(s);
    size_t l = c ? strlen(c) : 0;
    while (l > 1 && c[l - 1] == '/')
        c[--l] = 0;
    return c;
}
