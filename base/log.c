/* Structured log lines; see log.h. A line is composed in a growable buffer
 * (ts, level, component, msg, then the fields split out of one formatted
 * string) and written with one fwrite, which stdio locks per call. */
#include "base/log.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/utf8.h"

struct segd_log {
    FILE *out;
    segd_log_level_t min;
    segd_log_format_t format;
};

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const format_names[] = {"logfmt", "json"};

segd_err_t segd_log_new(segd_log_t **out_log, FILE *out, segd_log_level_t min,
                        segd_log_format_t format)
{
    segd_log_t *l = calloc(1, sizeof(*l));
    if (!l)
        return SEGD_ERR_NOMEM;
    l->out = out;
    l->min = min;
    l->format = format;
    *out_log = l;
    return SEGD_OK;
}

void segd_log_destroy(segd_log_t *l) { free(l); }

int segd_log_level_parse(const char *s, segd_log_level_t *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, level_names[i])) {
            *out = (segd_log_level_t)i;
            return 0;
        }
    return -1;
}

const char *segd_log_level_name(segd_log_level_t lv)
{
    return lv >= SEGD_LOG_DEBUG && lv <= SEGD_LOG_ERROR ? level_names[lv] : "error";
}

int segd_log_format_parse(const char *s, segd_log_format_t *out)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(s, format_names[i])) {
            *out = (segd_log_format_t)i;
            return 0;
        }
    return -1;
}

const char *segd_log_format_name(segd_log_format_t f)
{
    return f == SEGD_LOG_JSON ? "json" : "logfmt";
}

segd_log_level_t segd_log_min(const segd_log_t *l) { return l ? l->min : SEGD_LOG_INFO; }

int segd_log_enabled(const segd_log_t *l, segd_log_level_t lv) { return lv >= segd_log_min(l); }

/* Appends; a failed allocation only shortens the line (the buffer keeps
 * what it had), which is the best a logger can do. */
static void put(segd_buf_t *b, const char *s, size_t n) { (void)segd_buf_append(b, s, n); }
static void puts_(segd_buf_t *b, const char *s) { put(b, s, strlen(s)); }

/* A logfmt value needs quotes when empty or holding a space, '"', '=' or a
 * control character; inside quotes '"' and '\' are escaped, controls as \n,
 * \t or \xHH. */
static int logfmt_bare(const char *s, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == '"' || s[i] == '=' || s[i] == 0x7f)
            return 0;
    return 1;
}

/* The length of the valid UTF-8 sequence at s (lead byte >= 0x80), or 0. */
static size_t utf8_seq(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    return len && len <= n && segd_utf8_valid(s, len) ? len : 0;
}

/* JSON must be UTF-8: a byte that starts no valid sequence (a path or an
 * error text from outside) is written as U+FFFD. */
static void put_escaped(segd_buf_t *b, const char *s, size_t n, int json)
{
    char hex[8];
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (json && c >= 0x80) {
            size_t len = utf8_seq(s + i, n - i);
            if (len)
                put(b, s + i, len), i += len - 1;
            else
                puts_(b, "\\ufffd");
        } else if (c == '"' || c == '\\') {
            put(b, "\\", 1);
            put(b, (const char *)&c, 1);
        } else if (c == '\n') {
            puts_(b, "\\n");
        } else if (c == '\t') {
            puts_(b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof(hex), json ? "\\u%04x" : "\\x%02x", c);
            puts_(b, hex);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
}

static void put_logfmt_value(segd_buf_t *b, const char *s, size_t n)
{
    if (logfmt_bare(s, n)) {
        put(b, s, n);
        return;
    }
    put(b, "\"", 1);
    put_escaped(b, s, n, 0);
    put(b, "\"", 1);
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i == n || !isdigit((unsigned char)s[i]))
        return 0;
    if (s[i] == '0')
        i++;
    else
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    if (i < n && s[i] == '.') {
        if (++i == n || !isdigit((unsigned char)s[i]))
            return 0;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i == n || !isdigit((unsigned char)s[i]))
            return 0;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    }
    return i == n;
}

static void put_field(segd_buf_t *b, segd_log_format_t f, const char *key, size_t klen,
                      const char *v, size_t vlen)
{
    if (f == SEGD_LOG_LOGFMT) {
        put(b, " ", 1);
        put(b, key, klen);
        put(b, "=", 1);
        put_logfmt_value(b, v, vlen);
        return;
    }
    put(b, ",\"", 2);
    put_escaped(b, key, klen, 1);
    put(b, "\":", 2);
    if (json_number(v, vlen)) {
        put(b, v, vlen);
        return;
    }
    put(b, "\"", 1);
    put_escaped(b, v, vlen, 1);
    put(b, "\"", 1);
}

/* The length of a key starting at s followed by '=', or 0. */
static size_t key_len(const char *s)
{
    size_t i = 0;
    if (!isalpha((unsigned char)s[0]) && s[0] != '_')
        return 0;
    while (isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.')
        i++;
    return s[i] == '=' ? i : 0;
}

/* Splits "k=v k2=v2 ..." at every " key=" and writes each field. Text that
 * does not start with a key becomes a field named "fields". */
static void put_fields(segd_buf_t *b, segd_log_format_t f, const char *s)
{
    while (*s == ' ')
        s++;
    while (*s) {
        size_t kl = key_len(s);
        const char *key = kl ? s : "fields";
        size_t klen = kl ? kl : 6;
        const char *v = kl ? s + kl + 1 : s, *e = v;
        while (*e && !(*e == ' ' && key_len(e + 1)))
            e++;
        put_field(b, f, key, klen, v, (size_t)(e - v));
        s = *e ? e + 1 : e;
    }
}

static void put_ts(segd_buf_t *b)
{
    struct timespec ts;
    struct tm tm;
    char out[40], ms[8];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ms, sizeof(ms), ".%03dZ", (int)(ts.tv_nsec / 1000000) % 1000);
    puts_(b, out);
    puts_(b, ms);
}

static void emit(const segd_log_t *l, segd_log_level_t lv, const char *component,
                 const char *msg, const char *fields)
{
    segd_log_format_t f = l ? l->format : SEGD_LOG_LOGFMT;
    segd_buf_t b = {0};
    const char *lvname = segd_log_level_name(lv);
    if (f == SEGD_LOG_LOGFMT) {
        puts_(&b, "ts=");
        put_ts(&b);
        puts_(&b, " level=");
        puts_(&b, lvname);
        puts_(&b, " component=");
        put_logfmt_value(&b, component, strlen(component));
        puts_(&b, " msg=");
        put_logfmt_value(&b, msg, strlen(msg));
    } else {
        puts_(&b, "{\"ts\":\"");
        put_ts(&b);
        puts_(&b, "\",\"level\":\"");
        puts_(&b, lvname);
        puts_(&b, "\",\"component\":\"");
        put_escaped(&b, component, strlen(component), 1);
        puts_(&b, "\",\"msg\":\"");
        put_escaped(&b, msg, strlen(msg), 1);
        puts_(&b, "\"");
    }
    if (fields)
        put_fields(&b, f, fields);
    puts_(&b, f == SEGD_LOG_JSON ? "}\n" : "\n");
    FILE *out = l ? l->out : stderr;
    if (b.data)
        fwrite(b.data, 1, b.len, out);
    else /* no memory for the line: its message at least */
        fprintf(out, "%s %s %s\n", lvname, component, msg);
    fflush(out);
    segd_buf_free(&b);
}

/* printf into a malloc'd string; NULL when out of memory. */
static char *vformat(const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

void segd_log(const segd_log_t *l, segd_log_level_t lv, const char *component,
              const char *fmt, ...)
{
    if (!segd_log_enabled(l, lv))
        return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = vformat(fmt, ap);
    va_end(ap);
    emit(l, lv, component, msg ? msg : fmt, NULL);
    free(msg);
}

void segd_log_vkv(const segd_log_t *l, segd_log_level_t lv, const char *component,
                  const char *msg, const char *fields_fmt, va_list ap)
{
    if (!segd_log_enabled(l, lv))
        return;
    char *fields = vformat(fields_fmt, ap);
    emit(l, lv, component, msg, fields);
    free(fields);
}

void segd_log_kv(const segd_log_t *l, segd_log_level_t lv, const char *component,
                 const char *msg, const char *fields_fmt, ...)
{
    va_list ap;
    va_start(ap, fields_fmt);
    segd_log_vkv(l, lv, component, msg, fields_fmt, ap);
    va_end(ap);
}
