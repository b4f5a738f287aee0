/* RESP2 request parsing (cache/resp_parse.h): multibulk and inline forms,
 * with redis-server's error messages where it has one for the same fault. */
#include "cache/resp_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A count line ("*3", "$11") longer than this is no number we accept. */
#define COUNT_LINE_MAX 32

static segd_resp_parse_rc_t proto(char *err, size_t err_size, const char *msg)
{
    snprintf(err, err_size, "Protocol error: %s", msg);
    return SEGD_RESP_PROTO;
}

/* Redis's string2ll: optional '-', no leading zeros, no blanks, no overflow. */
static int parse_ll(const char *s, size_t n, long long *out)
{
    int neg = n > 0 && s[0] == '-';
    size_t i = neg ? 1 : 0;
    if (i == n || (s[i] == '0' && (neg || n - i > 1))) /* "-0" too */
        return -1;
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > (neg ? (unsigned long long)INT64_MAX + 1 : (unsigned long long)INT64_MAX))
        return -1;
    *out = neg ? (long long)(0 - v) : (long long)v;
    return 0;
}

/* The line at buf[pos..) up to "\r\n": its end in *eol. 1 = need more,
 * -1 = longer than max without an end. */
static int find_line(const char *buf, size_t len, size_t pos, size_t max, size_t *eol)
{
    size_t avail = len - pos;
    const char *cr = memchr(buf + pos, '\r', avail < max ? avail : max);
    if (!cr)
        return avail < max ? 1 : -1;
    if ((size_t)(cr - buf) + 1 >= len)
        return 1; /* the '\n' is not here yet */
    *eol = (size_t)(cr - buf);
    return 0;
}

static segd_resp_parse_rc_t parse_inline(const char *buf, size_t len, segd_resp_cmd_t *cmd,
                                         size_t *used, char *err, size_t err_size)
{
    size_t scan = len < SEGD_RESP_MAX_INLINE ? len : SEGD_RESP_MAX_INLINE;
    const char *nl = memchr(buf, '\n', scan);
    if (!nl)
        return len < SEGD_RESP_MAX_INLINE ? SEGD_RESP_MORE
                                          : proto(err, err_size, "too big inline request");
    size_t end = (size_t)(nl - buf);
    *used = end + 1;
    if (end > 0 && buf[end - 1] == '\r')
        end--;
    cmd->argc = 0;
    for (size_t i = 0; i < end;) {
        while (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        if (i == end)
            break;
        size_t start = i;
        while (i < end && buf[i] != ' ' && buf[i] != '\t')
            i++;
        if (cmd->argc == SEGD_RESP_MAX_ARGS)
            return proto(err, err_size, "too many arguments in inline request");
        cmd->argv[cmd->argc] = buf + start;
        cmd->argl[cmd->argc++] = i - start;
    }
    return SEGD_RESP_PARSED;
}

/* One "$L\r\n<L bytes>\r\n" at *pos. */
static segd_resp_parse_rc_t parse_bulk(const char *buf, size_t len, size_t *pos, int unauth,
                                       segd_resp_cmd_t *cmd, char *err, size_t err_size)
{
    if (*pos == len)
        return SEGD_RESP_MORE;
    if (buf[*pos] != '$') {
        char msg[64];
        snprintf(msg, sizeof(msg), "expected '$', got '%c'", buf[*pos]);
        return proto(err, err_size, msg);
    }
    size_t eol;
    int r = find_line(buf, len, *pos, COUNT_LINE_MAX, &eol);
    if (r)
        return r > 0 ? SEGD_RESP_MORE : proto(err, err_size, "too big bulk count string");
    long long l;
    if (parse_ll(buf + *pos + 1, eol - *pos - 1, &l) || l < 0 || l > SEGD_RESP_MAX_ARG)
        return proto(err, err_size, "invalid bulk length");
    if (unauth && l > SEGD_RESP_UNAUTH_MAX_ARG)
        return proto(err, err_size, "unauthenticated bulk length");
    size_t start = eol + 2;
    if (start + (size_t)l + 2 > SEGD_RESP_MAX_REQUEST)
        return proto(err, err_size, "request too big");
    if (len < start + (size_t)l + 2)
        return SEGD_RESP_MORE;
    cmd->argv[cmd->argc] = buf + start;
    cmd->argl[cmd->argc++] = (size_t)l;
    *pos = start + (size_t)l + 2; /* the CRLF is skipped unread, as Redis does */
    return SEGD_RESP_PARSED;
}

static segd_resp_parse_rc_t parse_multibulk(const char *buf, size_t len, int unauth,
                                            segd_resp_cmd_t *cmd, size_t *used, char *err,
                                            size_t err_size)
{
    size_t eol;
    int r = find_line(buf, len, 0, COUNT_LINE_MAX, &eol);
    if (r)
        return r > 0 ? SEGD_RESP_MORE : proto(err, err_size, "too big mbulk count string");
    long long n;
    if (parse_ll(buf + 1, eol - 1, &n) || n > SEGD_RESP_MAX_ARGS)
        return proto(err, err_size, "invalid multibulk length");
    if (unauth && n > SEGD_RESP_UNAUTH_MAX_ARGS)
        return proto(err, err_size, "unauthenticated multibulk length");
    size_t pos = eol + 2;
    cmd->argc = 0;
    for (long long i = 0; i < n; i++) {
        segd_resp_parse_rc_t rc = parse_bulk(buf, len, &pos, unauth, cmd, err, err_size);
        if (rc != SEGD_RESP_PARSED)
            return rc;
    }
    *used = pos; /* n <= 0: an empty command, skipped as Redis does */
    return SEGD_RESP_PARSED;
}

segd_resp_parse_rc_t segd_resp_parse(const char *buf, size_t len, int unauth,
                                     segd_resp_cmd_t *cmd, size_t *used, char *err,
                                     size_t err_size)
{
    cmd->argc = 0;
    if (len == 0)
        return SEGD_RESP_MORE;
    if (buf[0] == '*')
        return parse_multibulk(buf, len, unauth, cmd, used, err, err_size);
    return parse_inline(buf, len, cmd, used, err, err_size);
}
