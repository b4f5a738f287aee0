/* Command-line times; see timeparse.h. Parsed field by field rather than
 * with strptime/sscanf, which accept signs, spaces and out-of-range fields;
 * the date is checked by a round trip through timegm and gmtime_r. */
#define _GNU_SOURCE
#include "base/timeparse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SECONDS_LIKE_MS 100000000000LL /* 10^11 ms: 1973-03-03 */

/* Exactly n decimal digits at *p, advanced past them; -1 if not. */
static int digits(const char **p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *p += n;
    return v;
}

/* "Z", "+hh:mm", "+hhmm" or "+hh" (or '-'), the whole rest of the string. */
static int parse_zone(const char *p, int64_t *off_s)
{
    if ((*p == 'Z' || *p == 'z') && !p[1]) {
        *off_s = 0;
        return 0;
    }
    if (*p != '+' && *p != '-')
        return -1;
    int sign = *p++ == '-' ? -1 : 1;
    int h = digits(&p, 2), m = 0;
    if (h < 0)
        return -1;
    if (*p == ':')
        p++, m = digits(&p, 2);
    else if (*p)
        m = digits(&p, 2);
    if (m < 0 || *p || h > 23 || m > 59)
        return -1;
    *off_s = sign * (int64_t)(h * 3600 + m * 60);
    return 0;
}

static int parse_iso(const char *p, int64_t *out)
{
    struct tm tm = {0};
    int f[6];
    static const char sep[] = "--T::";
    for (int i = 0; i < 6; i++) {
        f[i] = digits(&p, i ? 2 : 4);
        if (f[i] < 0)
            return -1;
        if (i < 5 && !(*p == sep[i] || (sep[i] == 'T' && *p == 't')))
            return -1;
        if (i < 5)
            p++;
    }
    int64_t ms = 0;
    if (*p == '.') {
        int n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3)
                ms = ms * 10 + (*p - '0');
        if (!n)
            return -1;
        for (; n < 3; n++)
            ms *= 10;
    }
    int64_t off_s;
    if (parse_zone(p, &off_s))
        return -1; /* a time without a zone is ambiguous */
    tm.tm_year = f[0] - 1900;
    tm.tm_mon = f[1] - 1;
    tm.tm_mday = f[2];
    tm.tm_hour = f[3];
    tm.tm_min = f[4];
    tm.tm_sec = f[5];
    /* timegm normalises impossible dates (February 31 becomes March 3, 24:00
     * the next day), so a date is valid only if its fields come back as
     * given */
    time_t t = timegm(&tm);
    struct tm back;
    if (!gmtime_r(&t, &back) || back.tm_year != f[0] - 1900 || back.tm_mon != f[1] - 1 ||
        back.tm_mday != f[2] || back.tm_hour != f[3] || back.tm_min != f[4] ||
        back.tm_sec != f[5])
        return -1;
    int64_t s = (int64_t)t - off_s;
    if (s < 0)
        return -1;
    *out = s * 1000 + ms;
    return 0;
}

int segd_time_parse_ms(const char *s, int64_t *out, int *looks_like_s)
{
    if (looks_like_s)
        *looks_like_s = 0;
    if (!*s)
        return -1;
    if (strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (errno == ERANGE || *end)
            return -1;
        if (looks_like_s)
            *looks_like_s = v < SECONDS_LIKE_MS;
        *out = v;
        return 0;
    }
    return parse_iso(s, out);
}
