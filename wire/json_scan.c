/* The fast JSON parser's tokens: failures and the depth limit, strings
 * (escapes, UTF-8 checks), numbers and literals, each accepted or rejected
 * exactly as jansson (the reference parser) does. json_walk.c walks objects
 * and arrays over them. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wire/json_int.h"
#include "wire/json_scan.h"

int segd_jp_fail(jp_t *j, segd_err_t code, const char *fmt, const char *arg)
{
    if (j->code == SEGD_OK) {
        j->code = code;
        if (arg)
            segd_errf(code, j->err, j->n, fmt, arg);
        else
            segd_errf(code, j->err, j->n, "%s", fmt);
    }
    return -1;
}

int segd_jp_syntax(jp_t *j, const char *what)
{
    return segd_jp_fail(j, SEGD_ERR_DECODE, "invalid JSON: %s", what);
}


static void out_utf8(jp_out_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        jp_out_byte(o, (uint8_t)cp);
    } else if (cp < 0x800) {
        jp_out_byte(o, (uint8_t)(0xC0 | cp >> 6));
        jp_out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        jp_out_byte(o, (uint8_t)(0xE0 | cp >> 12));
        jp_out_byte(o, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        jp_out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    } else {
        jp_out_byte(o, (uint8_t)(0xF0 | cp >> 18));
        jp_out_byte(o, (uint8_t)(0x80 | (cp >> 12 & 0x3F)));
        jp_out_byte(o, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        jp_out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    }
}

static int hex4(const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* One \uXXXX escape (p after the 'u'), with its low surrogate if it is a
 * high one; jansson refuses \u0000 and unpaired surrogates. */
static int jp_unicode(jp_t *j, jp_out_t *o)
{
    uint32_t cp, lo;
    if (j->end - j->p < 4 || hex4(j->p, &cp))
        return segd_jp_syntax(j, "invalid escape");
    j->p += 4;
    if (cp == 0)
        return segd_jp_syntax(j, "\\u0000 is not allowed");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return segd_jp_syntax(j, "invalid Unicode (lone low surrogate)");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
            return segd_jp_syntax(j, "invalid Unicode (lone high surrogate)");
        if (j->end - j->p < 6 || hex4(j->p + 2, &lo))
            return segd_jp_syntax(j, "invalid escape");
        if (lo < 0xDC00 || lo > 0xDFFF)
            return segd_jp_syntax(j, "invalid Unicode (bad low surrogate)");
        j->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    out_utf8(o, cp);
    return 0;
}

/* A multi-byte UTF-8 sequence starting at p (first byte >= 0x80), as
 * jansson's stream checks it: no overlong forms, surrogates or > U+10FFFF. */
static int jp_utf8(jp_t *j, jp_out_t *o)
{
    uint8_t c = *j->p;
    size_t k;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, cp = c & 0x07;
    else
        return segd_jp_syntax(j, "invalid UTF-8");
    if ((size_t)(j->end - j->p) < k)
        return segd_jp_syntax(j, "invalid UTF-8");
    for (size_t i = 1; i < k; i++) {
        if ((j->p[i] & 0xC0) != 0x80)
            return segd_jp_syntax(j, "invalid UTF-8");
        cp = cp << 6 | (j->p[i] & 0x3F);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (k == 3 && cp < 0x800) ||
        (k == 4 && cp < 0x10000))
        return segd_jp_syntax(j, "invalid UTF-8");
    for (size_t i = 0; i < k; i++)
        jp_out_byte(o, j->p[i]);
    j->p += k;
    return 0;
}

/* A string; p on the opening quote. Decodes into o. */
int segd_jp_string(jp_t *j, jp_out_t *o)
{
    o->len = 0;
    j->p++;
    for (;;) {
        /* the common case: a run of plain ASCII, copied at once */
        const uint8_t *run = j->p;
        while (j->p < j->end && *j->p >= 0x20 && *j->p < 0x80 && *j->p != '"' &&
               *j->p != '\\')
            j->p++;
        if (j->p > run) {
            size_t k = (size_t)(j->p - run);
            if (o->len < o->cap)
                memcpy(o->buf + o->len, run, o->cap - o->len < k ? o->cap - o->len : k);
            o->len += k;
        }
        if (j->p >= j->end)
            return segd_jp_syntax(j, "premature end of input in string");
        uint8_t c = *j->p;
        if (c == '"') {
            j->p++;
            return 0;
        }
        if (c < 0x20)
            return segd_jp_syntax(j, "control character in string");
        if (c >= 0x80) {
            if (jp_utf8(j, o))
                return -1;
            continue;
        }
        j->p++;
        if (c != '\\') {
            jp_out_byte(o, c);
            continue;
        }
        if (j->p >= j->end)
            return segd_jp_syntax(j, "premature end of input in string");
        c = *j->p++;
        switch (c) {
        case '"': case '\\': case '/': jp_out_byte(o, c); break;
        case 'b': jp_out_byte(o, '\b'); break;
        case 'f': jp_out_byte(o, '\f'); break;
        case 'n': jp_out_byte(o, '\n'); break;
        case 'r': jp_out_byte(o, '\r'); break;
        case 't': jp_out_byte(o, '\t'); break;
        case 'u':
            if (jp_unicode(j, o))
                return -1;
            break;
        default: return segd_jp_syntax(j, "invalid escape");
        }
    }
}

/* jansson loses one NUL byte that directly follows a number or a literal
 * (its stream buffer reads an ungot NUL as "refill"), so {"a":1\0} is
 * accepted there; the reference decides, so the same byte is dropped here. */
static void jp_quirk_nul(jp_t *j)
{
    if (j->p < j->end && *j->p == 0)
        j->p++;
}

/* Parses a number, with p on '-' or a digit. Integers set *is_int and *v.
 * Reals are only checked for overflow, as jansson does: a value strtod
 * turns into +-HUGE_VAL is refused. */
int segd_jp_number(jp_t *j, int *is_int, long long *v)
{
    const uint8_t *s = j->p;
    int neg = 0;
    uint64_t mag = 0, limit;
    int big = 0;
    if (*j->p == '-')
        neg = 1, j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return segd_jp_syntax(j, "invalid number");
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (*j->p == '0') {
        j->p++;
        if (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            return segd_jp_syntax(j, "invalid number (leading zero)");
    } else {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
            uint64_t d = (uint64_t)(*j->p++ - '0');
            if (mag > (limit - d) / 10)
                big = 1;
            else
                mag = mag * 10 + d;
        }
    }
    *is_int = 1;
    if (j->p < j->end && *j->p == '.') {
        *is_int = 0;
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return segd_jp_syntax(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        *is_int = 0;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return segd_jp_syntax(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    size_t len = (size_t)(j->p - s);
    jp_quirk_nul(j);
    if (*is_int) {
        if (big)
            return segd_jp_syntax(j, "too big integer");
        *v = neg ? (long long)(0 - mag) : (long long)mag;
        return 0;
    }
    /* A real. Only its overflow is an error, and reals appear only in
     * unknown fields, so this path is rare. */
    char small[64], *copy = len < sizeof(small) ? small : malloc(len + 1);
    if (!copy)
        return segd_jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
    memcpy(copy, s, len);
    copy[len] = 0;
    errno = 0;
    double d = strtod(copy, NULL);
    int overflow = (d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE;
    if (copy != small)
        free(copy);
    return overflow ? segd_jp_syntax(j, "real number overflow") : 0;
}

int segd_jp_literal(jp_t *j)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= k && !memcmp(j->p, words[i], k)) {
            j->p += k;
            jp_quirk_nul(j);
            return 0;
        }
    }
    return segd_jp_syntax(j, "invalid token");
}
