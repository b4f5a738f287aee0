/* The Redis-protocol front: the RESP2 parser (cache/resp_parse.h) fed whole,
 * byte by byte and pipelined, inline and multibulk, with every protocol
 * error and limit; each command's replies (cache/resp_cmd.h) over a small
 * edge cache, byte for byte as redis-server 7.0 answers them (order by
 * score then member bytes, exclusive bounds, LIMIT, REV, WITHSCORES,
 * expired entries and unknown keys, Redis's error texts, -LOADING before
 * serving); and the server (cache/resp.h) over loopback: split and
 * pipelined writes, QUIT, an oversize request answered and closed, no
 * descriptors left for a new connection. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/secret.h"
#include "cache/resp.h"
#include "cache/resp_cmd.h"
#include "cache/resp_parse.h"

#define NOW 1800000000LL

/* ---- parser ---------------------------------------------------------- */

static segd_resp_cmd_t cmd; /* 24 KiB: not on the test's stack */

static segd_resp_parse_rc_t parse(const char *s, size_t n, size_t *used, char *err)
{
    return segd_resp_parse(s, n, 0, &cmd, used, err, 128);
}

static void assert_arg(size_t i, const char *want)
{
    assert_int_equal(cmd.argl[i], strlen(want));
    assert_memory_equal(cmd.argv[i], want, strlen(want));
}

/* Before AUTH, Redis 7.0's tighter limits: more than 10 arguments or a
 * bulk string over 16384 bytes is a protocol error in Redis's words; the same
 * request of an authenticated connection (or one that needs none) parses. */
static void test_parse_unauthenticated_limits(void **state)
{
    (void)state;
    char err[128];
    size_t used = 0;
    const char *eleven = "*11\r\n";
    assert_int_equal(segd_resp_parse(eleven, strlen(eleven), 1, &cmd, &used, err, sizeof(err)),
                     SEGD_RESP_PROTO);
    assert_string_equal(err, "Protocol error: unauthenticated multibulk length");
    assert_int_equal(segd_resp_parse(eleven, strlen(eleven), 0, &cmd, &used, err, sizeof(err)),
                     SEGD_RESP_MORE);
    const char *ten = "*10\r\n";
    assert_int_equal(segd_resp_parse(ten, strlen(ten), 1, &cmd, &used, err, sizeof(err)),
                     SEGD_RESP_MORE);
    static char big[16500];
    for (int l = 16384; l <= 16385; l++) {
        int n = snprintf(big, sizeof(big), "*2\r\n$4\r\nAUTH\r\n$%d\r\n", l);
        memset(big + n, 'x', (size_t)l);
        memcpy(big + n + l, "\r\n", 2);
        size_t len = (size_t)n + (size_t)l + 2;
        assert_int_equal(segd_resp_parse(big, len, 1, &cmd, &used, err, sizeof(err)),
                         l == 16384 ? SEGD_RESP_PARSED : SEGD_RESP_PROTO);
        if (l > 16384)
            assert_string_equal(err, "Protocol error: unauthenticated bulk length");
        assert_int_equal(segd_resp_parse(big, len, 0, &cmd, &used, err, sizeof(err)),
                         SEGD_RESP_PARSED);
        assert_int_equal(used, len);
    }
}

static void test_parse_multibulk(void **state)
{
    (void)state;
    const char *s = "*3\r\n$5\r\nZCARD\r\n$0\r\n\r\n$3\r\na\0b\r\n*1\r\n$4\r\nPING\r\n";
    size_t len = 44, used = 0;
    char err[128];
    assert_int_equal(parse(s, len, &used, err), SEGD_RESP_PARSED);
    assert_int_equal(cmd.argc, 3);
    assert_arg(0, "ZCARD");
    assert_int_equal(cmd.argl[1], 0);
    assert_int_equal(cmd.argl[2], 3);
    assert_memory_equal(cmd.argv[2], "a\0b", 3);
    assert_int_equal(used, 30);
    /* pipelined: the next command follows */
    size_t used2 = 0;
    assert_int_equal(parse(s + used, len - used, &used2, err), SEGD_RESP_PARSED);
    assert_int_equal(cmd.argc, 1);
    assert_arg(0, "PING");
    assert_int_equal(used + used2, len);
    /* every prefix of the first command needs more bytes */
    for (size_t k = 0; k < 30; k++)
        assert_int_equal(parse(s, k, &used2, err), SEGD_RESP_MORE);
    /* *0 and *-1 are empty commands, consumed */
    assert_int_equal(parse("*0\r\nPING", 8, &used, err), SEGD_RESP_PARSED);
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(used, 4);
}

static void test_parse_inline(void **state)
{
    (void)state;
    size_t used;
    char err[128];
    assert_int_equal(parse("PING\r\n", 6, &used, err), SEGD_RESP_PARSED);
    assert_int_equal(cmd.argc, 1);
    assert_arg(0, "PING");
    assert_int_equal(parse("  ZRANGEBYSCORE\tu1  -inf +inf \nX", 32, &used, err),
                     SEGD_RESP_PARSED);
    assert_int_equal(used, 31);
    assert_int_equal(cmd.argc, 4);
    assert_arg(1, "u1");
    assert_arg(3, "+inf");
    assert_int_equal(parse("\r\n", 2, &used, err), SEGD_RESP_PARSED);
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(parse("PING", 4, &used, err), SEGD_RESP_MORE);
}

static void expect_proto(const char *s, size_t n, const char *msg)
{
    size_t used;
    char err[128] = "";
    assert_int_equal(parse(s, n, &used, err), SEGD_RESP_PROTO);
    assert_string_equal(err, msg);
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_proto("*x\r\n", 4, "Protocol error: invalid multibulk length");
    expect_proto("*01\r\n", 5, "Protocol error: invalid multibulk length");
    expect_proto("*1025\r\n", 7, "Protocol error: invalid multibulk length");
    expect_proto("*1\r\n:5\r\n", 8, "Protocol error: expected '$', got ':'");
    expect_proto("*1\r\n$-1\r\n", 9, "Protocol error: invalid bulk length");
    expect_proto("*1\r\n$65537\r\n", 12, "Protocol error: invalid bulk length");
    expect_proto("*2\r\n$4\r\nECHO\r\n$1073741824\r\n", 28, "Protocol error: invalid bulk length");
    expect_proto("*1\r\n$99999999999999999999999999999999999", 40,
                 "Protocol error: too big bulk count string");
    expect_proto("*99999999999999999999999999999999999999", 39,
                 "Protocol error: too big mbulk count string");
    /* the largest argument is fine; a 64 KiB inline line without its end is not */
    char *big = malloc(SEGD_RESP_MAX_REQUEST + 64);
    assert_non_null(big);
    memset(big, 'a', SEGD_RESP_MAX_INLINE);
    expect_proto(big, SEGD_RESP_MAX_INLINE, "Protocol error: too big inline request");
    size_t used;
    char err[128];
    assert_int_equal(parse(big, SEGD_RESP_MAX_INLINE - 1, &used, err), SEGD_RESP_MORE);
    /* 17 arguments of 64 KiB: over the 1 MiB a command may take, refused at
     * the header that crosses it, before its bytes arrive */
    size_t n = (size_t)sprintf(big, "*17\r\n");
    for (int i = 0; i < 15; i++) {
        n += (size_t)sprintf(big + n, "$65536\r\n");
        memset(big + n, 'x', 65536);
        n += 65536;
        memcpy(big + n, "\r\n", 2);
        n += 2;
    }
    assert_int_equal(parse(big, n, &used, err), SEGD_RESP_MORE);
    n += (size_t)sprintf(big + n, "$65536\r\n");
    expect_proto(big, n, "Protocol error: request too big");
    free(big);
}

/* ---- commands ------------------------------------------------------------ */

typedef struct fixture {
    segd_resp_shared_t shared;
    segd_resp_worker_t w;
    segd_resp_client_t client;
    segd_buf_t out;
    char text[131072];
} fixture_t;

/* u: 9 (NOW+50), 10 and 5 (NOW+100), 100 (NOW+200), 7 expired;
 * v: 3 (NOW+1) only; x: all expired. */
static segd_edge_t *make_edge(void)
{
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW * 1000;
    segd_edge_t *e;
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    struct { const char *user; int64_t id, exp; } rows[] = {
        {"u", 9, NOW + 50}, {"u", 10, NOW + 100}, {"u", 5, NOW + 100}, {"u", 100, NOW + 200},
        {"u", 7, NOW - 10}, {"v", 3, NOW + 1}, {"x", 4, NOW - 1}};
    for (const char *user = "uvx"; *user; user++) {
        segd_profile_t p;
        segd_profile_init(&p);
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            if (rows[i].user[0] != *user)
                continue;
            segd_entry_t en = {.segment_id = rows[i].id, .ts_ms = NOW * 1000 - 1000,
                               .expiry_s = rows[i].exp};
            assert_int_equal(segd_profile_push(&p, &en), SEGD_OK);
        }
        segd_profile_normalize(&p);
        assert_int_equal(segd_edge_put(e, user, 1, &p), SEGD_OK);
        segd_profile_free(&p);
    }
    return e;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->shared.edge = make_edge();
    atomic_store(&f->shared.serving, 1);
    /* every command test runs with the reply cache, as the server does */
    f->shared.reply_cache_bytes = (size_t)SEGD_RESP_REPLY_CACHE_DEFAULT_MB << 20;
    assert_int_equal(segd_resp_worker_init(&f->w, &f->shared), SEGD_OK);
    f->client.id = 7;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    segd_resp_worker_free(&f->w);
    segd_edge_destroy(f->shared.edge);
    segd_buf_free(&f->out);
    free(f);
    return 0;
}

/* Runs an inline command line and returns its reply as text; *rc the exec's. */
static const char *run_rc(fixture_t *f, const char *line, int *rc)
{
    size_t used;
    char err[128];
    assert_int_equal(segd_resp_parse(line, strlen(line), 0, &cmd, &used, err, sizeof(err)),
                     SEGD_RESP_PARSED);
    f->out.len = 0;
    *rc = segd_resp_exec(&f->w, &f->client, &cmd, &f->out);
    assert_true(f->out.len < sizeof(f->text));
    memcpy(f->text, f->out.data, f->out.len);
    f->text[f->out.len] = 0;
    return f->text;
}

static const char *run(fixture_t *f, const char *line)
{
    int rc;
    const char *r = run_rc(f, line, &rc);
    assert_int_equal(rc, 0);
    return r;
}

#define S(x) #x
#define SCORE(d) S(d)

static void test_zrangebyscore(void **state)
{
    fixture_t *f = *state;
    /* by score, then member bytes: "10" before "5"; 7 expired */
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"),
                        "*8\r\n$1\r\n9\r\n$10\r\n1800000050\r\n$2\r\n10\r\n$10\r\n1800000100\r\n"
                        "$1\r\n5\r\n$10\r\n1800000100\r\n$3\r\n100\r\n$10\r\n1800000200\r\n");
    assert_string_equal(run(f, "zrangebyscore u -inf +inf\r\n"),
                        "*4\r\n$1\r\n9\r\n$2\r\n10\r\n$1\r\n5\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u (1800000050 1800000100\r\n"),
                        "*2\r\n$2\r\n10\r\n$1\r\n5\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 1800000050 (1800000100\r\n"),
                        "*1\r\n$1\r\n9\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u (1800000100 (1800000100\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 1800000200 1800000050\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 1.8e9 +inf LIMIT 1 2\r\n"),
                        "*2\r\n$2\r\n10\r\n$1\r\n5\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf LIMIT 3 -1\r\n"),
                        "*1\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf LIMIT -1 2\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf LIMIT 0 0\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf LIMIT 4 1\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZREVRANGEBYSCORE u +inf 1800000100 WITHSCORES LIMIT 1 1\r\n"),
                        "*2\r\n$1\r\n5\r\n$10\r\n1800000100\r\n");
    /* unknown and all-expired users are missing keys */
    assert_string_equal(run(f, "ZRANGEBYSCORE nobody -inf +inf\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE x -inf +inf\r\n"), "*0\r\n");
    /* Redis's errors, checked before the key */
    assert_string_equal(run(f, "ZRANGEBYSCORE nobody a +inf\r\n"),
                        "-ERR min or max is not a float\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u nan +inf\r\n"),
                        "-ERR min or max is not a float\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 0 1 LIMIT 0\r\n"), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 0 1 REV\r\n"), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 0 1 LIMIT 01 2\r\n"),
                        "-ERR value is not an integer or out of range\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 0\r\n"),
                        "-ERR wrong number of arguments for 'zrangebyscore' command\r\n");
}

static void test_zrange(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "ZRANGE u 1800000100 +inf BYSCORE WITHSCORES\r\n"),
                        "*6\r\n$2\r\n10\r\n$10\r\n1800000100\r\n$1\r\n5\r\n$10\r\n1800000100\r\n"
                        "$3\r\n100\r\n$10\r\n1800000200\r\n");
    /* REV: given max then min, from the top */
    assert_string_equal(run(f, "ZRANGE u +inf -inf BYSCORE REV LIMIT 1 2\r\n"),
                        "*2\r\n$1\r\n5\r\n$2\r\n10\r\n");
    assert_string_equal(run(f, "ZRANGE u -inf +inf BYSCORE REV\r\n"), "*0\r\n");
    /* by rank */
    assert_string_equal(run(f, "ZRANGE u 0 -1\r\n"),
                        "*4\r\n$1\r\n9\r\n$2\r\n10\r\n$1\r\n5\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZRANGE u -2 10 WITHSCORES\r\n"),
                        "*4\r\n$1\r\n5\r\n$10\r\n1800000100\r\n$3\r\n100\r\n$10\r\n1800000200\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 0 REV\r\n"), "*1\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZREVRANGE u 1 2\r\n"), "*2\r\n$1\r\n5\r\n$2\r\n10\r\n");
    assert_string_equal(run(f, "ZRANGE u 3 1\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 1 LIMIT 0 1\r\n"),
                        "-ERR syntax error, LIMIT is only supported in combination with either "
                        "BYSCORE or BYLEX\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 1 BYSCORE BYSCORE\r\n"), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "ZRANGE u a 1\r\n"),
                        "-ERR value is not an integer or out of range\r\n");
}

static void test_point_reads(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "ZCOUNT u (1800000050 +inf\r\n"), ":3\r\n");
    assert_string_equal(run(f, "ZCOUNT u -inf +inf\r\n"), ":4\r\n");
    assert_string_equal(run(f, "ZCOUNT nobody -inf +inf\r\n"), ":0\r\n");
    assert_string_equal(run(f, "ZCOUNT u x 1\r\n"), "-ERR min or max is not a float\r\n");
    assert_string_equal(run(f, "ZSCORE u 10\r\n"), "$10\r\n1800000100\r\n");
    assert_string_equal(run(f, "ZSCORE u 010\r\n"), "$-1\r\n");
    assert_string_equal(run(f, "ZSCORE v -0\r\n"), "$-1\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u 0 1 LIMIT -0 1\r\n"),
                        "-ERR value is not an integer or out of range\r\n");
    assert_string_equal(run(f, "ZSCORE u 7\r\n"), "$-1\r\n"); /* expired */
    assert_string_equal(run(f, "ZSCORE nobody 7\r\n"), "$-1\r\n");
    assert_string_equal(run(f, "ZCARD u\r\n"), ":4\r\n");
    assert_string_equal(run(f, "ZCARD x\r\n"), ":0\r\n");
    assert_string_equal(run(f, "EXISTS u v x nobody u\r\n"), ":3\r\n");
    assert_string_equal(run(f, "ZCARD\r\n"),
                        "-ERR wrong number of arguments for 'zcard' command\r\n");
}

static void test_connection_commands(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "PING\r\n"), "+PONG\r\n");
    assert_string_equal(run(f, "ping hello\r\n"), "$5\r\nhello\r\n");
    assert_string_equal(run(f, "PING a b\r\n"),
                        "-ERR wrong number of arguments for 'ping' command\r\n");
    assert_string_equal(run(f, "ECHO x\r\n"), "$1\r\nx\r\n");
    assert_string_equal(run(f, "SELECT 0\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "SELECT 1\r\n"), "-ERR DB index is out of range\r\n");
    assert_string_equal(run(f, "CLIENT SETNAME bidder\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "CLIENT SETINFO LIB-NAME redis-py\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "CLIENT ID\r\n"), ":7\r\n");
    assert_string_equal(run(f, "HELLO 2\r\n"),
                        "*14\r\n$6\r\nserver\r\n$4\r\nsegd\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"
                        "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
                        "$4\r\nrole\r\n$7\r\nreplica\r\n$7\r\nmodules\r\n*0\r\n");
    assert_string_equal(run(f, "HELLO 3\r\n"), "-NOPROTO unsupported protocol version\r\n");
    assert_string_equal(run(f, "HELLO 2 FOO\r\n"), "-ERR Syntax error in HELLO option 'FOO'\r\n");
    assert_string_equal(run(f, "COMMAND COUNT\r\n"), ":17\r\n");
    assert_string_equal(run(f, "COMMAND DOCS\r\n"), "*0\r\n");
    const char *info = "*2\r\n*10\r\n$5\r\nzcard\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n"
                       ":1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n";
    assert_memory_equal(run(f, "COMMAND INFO zcard nope\r\n"), info, strlen(info));
    assert_non_null(strstr(f->text, "*-1\r\n"));
    assert_non_null(strstr(run(f, "INFO\r\n"), "redis_version:7.0.15\r\n"));
    assert_non_null(strstr(f->text, "db0:keys=3,"));
    int rc;
    assert_string_equal(run_rc(f, "QUIT\r\n", &rc), "+OK\r\n");
    assert_int_equal(rc, 1);
}


#define NOAUTH "-NOAUTH Authentication required.\r\n"
#define WRONGPASS "-WRONGPASS invalid username-password pair or user is disabled.\r\n"

/* requirepass: before AUTH only AUTH, HELLO and QUIT run (unknown commands
 * and bad arities answered first, as Redis 7.0); each AUTH form, a wrong
 * password, another user, HELLO AUTH; all per connection. */
static void test_auth_required(void **state)
{
    fixture_t *f = *state;
    f->shared.password = "s3cretpw";
    f->shared.password_len = strlen(f->shared.password);
    assert_string_equal(run(f, "PING\r\n"), NOAUTH);
    assert_string_equal(run(f, "ZCARD u\r\n"), NOAUTH);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf\r\n"), NOAUTH);
    assert_string_equal(run(f, "INFO\r\n"), NOAUTH);
    assert_string_equal(run(f, "CLIENT ID\r\n"), NOAUTH);
    assert_string_equal(run(f, "ZADD u 1 2\r\n"), NOAUTH); /* not "read-only replica" */
    assert_string_equal(run(f, "FOO\r\n"),
                        "-ERR unknown command 'FOO', with args beginning with: \r\n");
    assert_string_equal(run(f, "ZCARD\r\n"),
                        "-ERR wrong number of arguments for 'zcard' command\r\n");
    assert_string_equal(run(f, "HELLO 2\r\n"),
                        "-NOAUTH HELLO must be called with the client already authenticated, "
                        "otherwise the HELLO AUTH <user> <pass> option can be used to "
                        "authenticate the client and select the RESP protocol version at the "
                        "same time\r\n");
    assert_string_equal(run(f, "AUTH wrong\r\n"), WRONGPASS);
    assert_string_equal(run(f, "AUTH s3cret\r\n"), WRONGPASS); /* a prefix */
    assert_string_equal(run(f, "AUTH s3cretpwx\r\n"), WRONGPASS);
    assert_string_equal(run(f, "AUTH alice s3cretpw\r\n"), WRONGPASS);
    assert_string_equal(run(f, "AUTH a b c\r\n"), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "HELLO 2 AUTH default nope\r\n"), WRONGPASS);
    assert_string_equal(run(f, "HELLO 3 AUTH default s3cretpw\r\n"),
                        "-NOPROTO unsupported protocol version\r\n");
    assert_string_equal(run(f, "ZCARD u\r\n"), NOAUTH); /* still not in */
    assert_string_equal(run(f, "AUTH s3cretpw\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "ZCARD u\r\n"), ":4\r\n");
    assert_string_equal(run(f, "AUTH wrong\r\n"), WRONGPASS);
    assert_string_equal(run(f, "ZCARD u\r\n"), ":4\r\n"); /* a failed AUTH keeps it in */
    assert_string_equal(run(f, "ZADD u 1 2\r\n"), "-ERR read-only replica\r\n");
    /* another connection: its own state; the ACL form and HELLO AUTH */
    f->client.authenticated = 0;
    assert_string_equal(run(f, "AUTH default s3cretpw\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "PING\r\n"), "+PONG\r\n");
    f->client.authenticated = 0;
    assert_non_null(strstr(run(f, "HELLO 2 AUTH default s3cretpw SETNAME b\r\n"),
                           "$5\r\nproto\r\n:2\r\n"));
    assert_string_equal(run(f, "PING\r\n"), "+PONG\r\n");
    f->client.authenticated = 0;
    int rc;
    assert_string_equal(run_rc(f, "QUIT\r\n", &rc), "+OK\r\n");
    assert_int_equal(rc, 1);
}

/* Without a password: Redis's nopass default user. */
static void test_auth_none(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "AUTH x\r\n"),
                        "-ERR AUTH <password> called without any password configured for the "
                        "default user. Are you sure your configuration is correct?\r\n");
    assert_string_equal(run(f, "AUTH default anything\r\n"), "+OK\r\n");
    assert_string_equal(run(f, "AUTH bob anything\r\n"), WRONGPASS);
    assert_string_equal(run(f, "HELLO 2 AUTH bob x\r\n"), WRONGPASS);
    assert_non_null(strstr(run(f, "HELLO 2 AUTH default x\r\n"), "$6\r\nserver\r\n"));
    assert_string_equal(run(f, "ZCARD u\r\n"), ":4\r\n");
}

static void test_secret_equal(void **state)
{
    (void)state;
    assert_true(segd_secret_equal("abc", 3, "abc", 3));
    assert_false(segd_secret_equal("abc", 3, "abd", 3));
    assert_false(segd_secret_equal("abc", 3, "ab", 2));
    assert_false(segd_secret_equal("abc", 3, "abcabc", 6)); /* wraps, still unequal */
    assert_false(segd_secret_equal("", 0, "", 0));
    assert_false(segd_secret_equal("a\0b", 3, "a\0c", 3));
}

static void test_refused(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "ZADD u 1 2\r\n"), "-ERR read-only replica\r\n");
    assert_string_equal(run(f, "flushall\r\n"), "-ERR read-only replica\r\n");
    assert_string_equal(run(f, "FOO a b\r\n"),
                        "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
    assert_string_equal(run(f, "BYE\r\n"),
                        "-ERR unknown command 'BYE', with args beginning with: \r\n");
    assert_string_equal(run(f, "ZRANGE u a b BYLEX\r\n"), "-ERR BYLEX is not supported by segd\r\n");
    /* before the snapshot is in: data commands wait, connecting works */
    atomic_store(&f->shared.serving, 0);
    assert_string_equal(run(f, "ZCARD u\r\n"),
                        "-LOADING segd is loading the snapshot in memory\r\n");
    assert_string_equal(run(f, "PING\r\n"),
                        "-LOADING segd is loading the snapshot in memory\r\n");
    assert_string_equal(run(f, "SELECT 0\r\n"), "+OK\r\n");
    /* counted by command and result */
    size_t zadd = segd_resp_command_count() - 2, zcard = 0;
    while (strcmp(segd_resp_command_name(zcard), "zcard"))
        zcard++;
    assert_string_equal(segd_resp_command_name(zadd), "write");
    assert_int_equal(atomic_load(&f->w.counts[zadd][1]), 2);
    assert_int_equal(atomic_load(&f->w.counts[zcard][1]), 1);
}

/* A user of 3000 segments: the answer is sorted as Redis sorts (the merge
 * sort past its small cases), and lookups past the first scratch size. */
static void test_large_user(void **state)
{
    fixture_t *f = *state;
    segd_profile_t p;
    segd_profile_init(&p);
    for (int64_t i = 0; i < 3000; i++) {
        segd_entry_t en = {.segment_id = i, .ts_ms = 1, .expiry_s = NOW + 1 + (i * 7919) % 13};
        segd_profile_push(&p, &en);
    }
    assert_int_equal(segd_edge_put(f->shared.edge, "big", 3, &p), SEGD_OK);
    segd_profile_free(&p);
    size_t used;
    char err[128];
    const char *line = "ZRANGEBYSCORE big -inf +inf WITHSCORES\r\n";
    segd_resp_parse(line, strlen(line), 0, &cmd, &used, err, sizeof(err));
    f->out.len = 0;
    assert_int_equal(segd_resp_exec(&f->w, &f->client, &cmd, &f->out), 0);
    char *s = (char *)f->out.data;
    assert_memory_equal(s, "*6000\r\n", 7);
    s += 7;
    char prev_m[32] = "", m[32];
    long long prev_sc = 0, sc;
    for (int i = 0; i < 3000; i++) {
        int ml, sl;
        assert_int_equal(sscanf(s, "$%d\r\n%31[0-9]\r\n$%d\r\n%lld\r\n", &ml, m, &sl, &sc), 4);
        s = strstr(s + 1, "$");
        s = strstr(s + 1, "\r\n") + 2;
        s = strstr(s, "\r\n") + 2;
        assert_true(sc > prev_sc || (sc == prev_sc && strcmp(m, prev_m) > 0));
        prev_sc = sc;
        strcpy(prev_m, m);
    }
    assert_ptr_equal(s, (char *)f->out.data + f->out.len);
}

/* Ids of 19 digits and scores past 2^53 take the general sort and print
 * scores as Redis's "%.17g" does. */
static void test_general_sort(void **state)
{
    fixture_t *f = *state;
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t e[3] = {{.segment_id = 2, .ts_ms = 1, .expiry_s = NOW + 5},
                         {.segment_id = 30, .ts_ms = 1, .expiry_s = 1LL << 60},
                         {.segment_id = 1000000000000000001LL, .ts_ms = 1, .expiry_s = NOW + 5}};
    for (int i = 0; i < 3; i++)
        segd_profile_push(&p, &e[i]);
    assert_int_equal(segd_edge_put(f->shared.edge, "g", 1, &p), SEGD_OK);
    segd_profile_free(&p);
    assert_string_equal(run(f, "ZRANGEBYSCORE g -inf +inf WITHSCORES\r\n"),
                        "*6\r\n$19\r\n1000000000000000001\r\n$10\r\n1800000005\r\n"
                        "$1\r\n2\r\n$10\r\n1800000005\r\n"
                        "$2\r\n30\r\n$21\r\n1.152921504606847e+18\r\n");
    assert_string_equal(run(f, "ZSCORE g 30\r\n"), "$21\r\n1.152921504606847e+18\r\n");
}

/* ---- the reply cache --------------------------------------------------- */

static segd_reply_cache_stats_t cache_stats(fixture_t *f)
{
    segd_reply_cache_stats_t st;
    segd_reply_cache_get_stats(f->w.replies, &st);
    return st;
}

/* A new worker with a reply cache of budget bytes. */
static void rebudget(fixture_t *f, size_t budget)
{
    segd_resp_worker_free(&f->w);
    f->shared.reply_cache_bytes = budget;
    assert_int_equal(segd_resp_worker_init(&f->w, &f->shared), SEGD_OK);
}

#define U_ALL "*8\r\n$1\r\n9\r\n$10\r\n1800000050\r\n$2\r\n10\r\n$10\r\n1800000100\r\n" \
              "$1\r\n5\r\n$10\r\n1800000100\r\n$3\r\n100\r\n$10\r\n1800000200\r\n"
#define U_NO9 "*6\r\n$2\r\n10\r\n$10\r\n1800000100\r\n" \
              "$1\r\n5\r\n$10\r\n1800000100\r\n$3\r\n100\r\n$10\r\n1800000200\r\n"

/* The same request twice, or spelled another way Redis reads alike, is
 * answered from the cache, byte for byte as computed. */
static void test_reply_cache_hit(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    assert_int_equal(cache_stats(f).fills, 1);
    assert_int_equal(cache_stats(f).hits, 0);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    assert_string_equal(run(f, "zrangebyscore u -INF inf withscores\r\n"), U_ALL);
    assert_string_equal(run(f, "ZRANGE u -inf +inf BYSCORE WITHSCORES\r\n"), U_ALL);
    assert_int_equal(cache_stats(f).hits, 3);
    /* other arguments, another user: other replies */
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf\r\n"),
                        "*4\r\n$1\r\n9\r\n$2\r\n10\r\n$1\r\n5\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE v -inf +inf WITHSCORES\r\n"),
                        "*2\r\n$1\r\n3\r\n$10\r\n1800000001\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 0\r\n"), "*1\r\n$1\r\n9\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 0 REV\r\n"), "*1\r\n$3\r\n100\r\n");
    assert_int_equal(cache_stats(f).hits, 3);
    assert_string_equal(run(f, "ZRANGE u 0 0 REV\r\n"), "*1\r\n$3\r\n100\r\n");
    assert_int_equal(cache_stats(f).hits, 4);
}

/* A delta joined into the user, a retirement and a user dropped change
 * the answer: none is served from the cache. */
static void test_reply_cache_changes(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    segd_change_t c;
    segd_change_init(&c);
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = "u";
    c.user_id_len = 1;
    segd_entry_t en = {.segment_id = 11, .ts_ms = NOW * 1000, .expiry_s = NOW + 300};
    assert_int_equal(segd_profile_push(&c.profile, &en), SEGD_OK);
    assert_int_equal(segd_edge_apply(f->shared.edge, &c), SEGD_OK);
    segd_change_free(&c);
    const char *with11 = "*10\r\n$1\r\n9\r\n$10\r\n1800000050\r\n$2\r\n10\r\n$10\r\n1800000100\r\n"
                         "$1\r\n5\r\n$10\r\n1800000100\r\n$3\r\n100\r\n$10\r\n1800000200\r\n"
                         "$2\r\n11\r\n$10\r\n1800000300\r\n";
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), with11);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), with11);
    assert_int_equal(cache_stats(f).hits, 1);
    /* segment 9's entries up to now retired: another user's cached reply
     * (v) and u's both go */
    assert_string_equal(run(f, "ZRANGEBYSCORE v -inf +inf\r\n"), "*1\r\n$1\r\n3\r\n");
    assert_int_equal(segd_edge_retire(f->shared.edge, 9, NOW * 1000), SEGD_OK);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES LIMIT 0 1\r\n"),
                        "*2\r\n$2\r\n10\r\n$10\r\n1800000100\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"),
                        "*8\r\n$2\r\n10\r\n$10\r\n1800000100\r\n$1\r\n5\r\n$10\r\n1800000100\r\n"
                        "$3\r\n100\r\n$10\r\n1800000200\r\n$2\r\n11\r\n$10\r\n1800000300\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE v -inf +inf\r\n"), "*1\r\n$1\r\n3\r\n");
    assert_int_equal(cache_stats(f).stale, 3);
    /* a snapshot record erasing v's past: v is a missing key */
    assert_string_equal(run(f, "ZRANGE v 0 -1\r\n"), "*1\r\n$1\r\n3\r\n");
    segd_profile_t p;
    segd_profile_init(&p);
    p.erased_before_ms = NOW * 1000;
    assert_int_equal(segd_edge_put(f->shared.edge, "v", 1, &p), SEGD_OK);
    segd_profile_free(&p);
    assert_string_equal(run(f, "ZRANGE v 0 -1\r\n"), "*0\r\n");
}

/* A reload: the server reads another edge, whose first record is u's,
 * with other entries. A version counter per edge would give it the stamp
 * of the first edge's u. */
static void test_reply_cache_reload(void **state)
{
    fixture_t *f = *state;
    segd_edge_t *old = f->shared.edge;
    assert_string_equal(run(f, "ZRANGE u 0 0\r\n"), "*1\r\n$1\r\n9\r\n");
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW * 1000;
    assert_int_equal(segd_edge_new(&f->shared.edge, &o), SEGD_OK);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t five = {.segment_id = 5, .ts_ms = 1, .expiry_s = NOW + 7};
    assert_int_equal(segd_profile_push(&p, &five), SEGD_OK);
    assert_int_equal(segd_edge_put(f->shared.edge, "u", 1, &p), SEGD_OK);
    segd_profile_free(&p);
    segd_edge_destroy(old);
    assert_string_equal(run(f, "ZRANGE u 0 0\r\n"), "*1\r\n$1\r\n5\r\n");
}

/* The clock: a reply holds until the first of its entries expires, not a
 * second longer; entries outside a score range do not cut it short; a
 * clock set back (an expired entry live again) is not served the reply
 * of a later second. */
static void test_reply_cache_clock(void **state)
{
    fixture_t *f = *state;
    segd_edge_t *e = f->shared.edge;
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    assert_string_equal(run(f, "ZRANGEBYSCORE u 1800000100 +inf\r\n"),
                        "*3\r\n$2\r\n10\r\n$1\r\n5\r\n$3\r\n100\r\n");
    segd_edge_set_now(e, (NOW + 49) * 1000 + 999); /* 9 (NOW+50) still live */
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    assert_int_equal(cache_stats(f).hits, 1);
    segd_edge_set_now(e, (NOW + 50) * 1000); /* 9 expires */
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_NO9);
    assert_int_equal(cache_stats(f).stale, 1);
    /* 9 was outside this range: still the cached reply */
    assert_string_equal(run(f, "ZRANGEBYSCORE u 1800000100 +inf\r\n"),
                        "*3\r\n$2\r\n10\r\n$1\r\n5\r\n$3\r\n100\r\n");
    assert_int_equal(cache_stats(f).hits, 2);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_NO9);
    assert_int_equal(cache_stats(f).hits, 3);
    /* back before 9's expiry: 9 is live again */
    segd_edge_set_now(e, (NOW + 49) * 1000);
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), U_ALL);
    /* by rank: every live entry counts */
    segd_edge_set_now(e, NOW * 1000);
    assert_string_equal(run(f, "ZRANGE u -1 -1\r\n"), "*1\r\n$3\r\n100\r\n");
    segd_edge_set_now(e, (NOW + 100) * 1000);
    assert_string_equal(run(f, "ZRANGE u -1 -1\r\n"), "*1\r\n$3\r\n100\r\n");
    assert_string_equal(run(f, "ZRANGE u 0 0\r\n"), "*1\r\n$3\r\n100\r\n");
    segd_edge_set_now(e, (NOW + 200) * 1000);
    assert_string_equal(run(f, "ZRANGE u -1 -1\r\n"), "*0\r\n");
    assert_string_equal(run(f, "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n"), "*0\r\n");
}

/* Requests over u, v and a 3000-segment user. */
static const char *const mix[] = {
    "ZRANGEBYSCORE u -inf +inf WITHSCORES\r\n", "ZRANGEBYSCORE u (1800000050 1800000100\r\n",
    "ZREVRANGEBYSCORE u +inf 1800000100 WITHSCORES LIMIT 1 1\r\n", "ZRANGE u 0 -1\r\n",
    "ZRANGE u -2 10 WITHSCORES\r\n", "ZREVRANGE u 1 2\r\n", "ZRANGEBYSCORE v -inf +inf\r\n",
    "ZRANGEBYSCORE big -inf +inf\r\n", "ZRANGE big 0 99\r\n",
    "ZRANGE big 100 599 WITHSCORES\r\n", "ZRANGEBYSCORE big (1800000005 +inf LIMIT 5 50\r\n",
};

static void new_edge(fixture_t *f)
{
    segd_edge_destroy(f->shared.edge);
    f->shared.edge = make_edge();
    segd_profile_t p;
    segd_profile_init(&p);
    for (int64_t i = 0; i < 3000; i++) {
        segd_entry_t en = {.segment_id = i, .ts_ms = 1, .expiry_s = NOW + 1 + (i * 7919) % 13};
        segd_profile_push(&p, &en);
    }
    assert_int_equal(segd_edge_put(f->shared.edge, "big", 3, &p), SEGD_OK);
    segd_profile_free(&p);
}

/* Rounds of the mix requests on a fresh edge, first without a cache, then
 * with budget: the replies must be equal, while the clock moves and users
 * change between rounds. */
static void compare_mix(fixture_t *f, size_t budget, segd_reply_cache_stats_t *st)
{
    enum { N = sizeof(mix) / sizeof(mix[0]), ROUNDS = 6 };
    char *want[ROUNDS][N];
    for (int pass = 0; pass < 2; pass++) {
        new_edge(f);
        rebudget(f, pass ? budget : 0);
        segd_edge_t *e = f->shared.edge;
        for (int r = 0; r < ROUNDS; r++) {
            if (r == 2) { /* big's entries expiring at NOW+1..NOW+3 go */
                segd_edge_set_now(e, (NOW + 3) * 1000);
            } else if (r == 3) { /* u gains a segment */
                segd_profile_t p;
                segd_profile_init(&p);
                segd_entry_t en = {.segment_id = 8, .ts_ms = NOW * 1000, .expiry_s = NOW + 100};
                segd_profile_push(&p, &en);
                assert_int_equal(segd_edge_put(e, "u", 1, &p), SEGD_OK);
                segd_profile_free(&p);
            } else if (r == 4) { /* big loses one */
                assert_int_equal(segd_edge_retire(e, 1000, NOW * 1000), SEGD_OK);
            }
            for (size_t i = 0; i < N; i++) {
                run(f, mix[(i * 7 + (size_t)r) % N]);
                if (!pass) {
                    want[r][i] = strdup(f->text);
                } else {
                    assert_string_equal(f->text, want[r][i]);
                    free(want[r][i]);
                }
            }
        }
    }
    segd_reply_cache_get_stats(f->w.replies, st);
}

static void test_reply_cache_budget(void **state)
{
    fixture_t *f = *state;
    segd_reply_cache_stats_t st;
    /* no cache: nothing kept, nothing counted */
    compare_mix(f, 0, &st);
    assert_null(f->w.replies);
    assert_int_equal(st.fills + st.hits, 0);
    /* room for all: hits */
    compare_mix(f, 16 << 20, &st);
    assert_true(st.hits > 0);
    /* a tiny budget: evictions, and replies too big to keep, answers right */
    compare_mix(f, 1024, &st);
    assert_true(st.fills > 0);
    assert_true(st.evictions > 0);
    assert_true(st.bytes <= 1024);
}

/* ---- server over loopback ---------------------------------------------- */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Reads until want bytes or the end; returns the count. */
static size_t read_n(int fd, char *buf, size_t want)
{
    size_t got = 0;
    while (got < want) {
        ssize_t n = read(fd, buf + got, want - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void test_server(void **state)
{
    fixture_t *f = *state;
    segd_resp_t *r;
    char err[256];
    assert_int_equal(segd_resp_start(&r, "127.0.0.1:nope", 2, f->shared.edge, NULL, err,
                                     sizeof(err)), SEGD_ERR_CONFIG);
    segd_metrics_t *m = segd_metrics_new();
    assert_int_equal(segd_resp_start(&r, "127.0.0.1:0", 2, f->shared.edge, m, err,
                                     sizeof(err)), SEGD_OK);
    int fd = connect_to(segd_resp_port(r));
    const char *loading = "-LOADING segd is loading the snapshot in memory\r\n";
    assert_int_equal(write(fd, "ZCARD u\r\n", 9), 9);
    char buf[512];
    assert_int_equal(read_n(fd, buf, strlen(loading)), strlen(loading));
    assert_memory_equal(buf, loading, strlen(loading));
    segd_resp_set_ready(r, 1);
    /* pipelined and split mid-command: answered in order */
    const char *req = "*2\r\n$5\r\nZCARD\r\n$1\r\nu\r\nPING\r\n*3\r\n$6\r\nZSCORE\r\n$1\r\nu\r\n$2\r\n10\r\nQUIT\r\n";
    size_t half = 20;
    assert_int_equal(write(fd, req, half), (ssize_t)half);
    usleep(20000);
    assert_int_equal(write(fd, req + half, strlen(req) - half), (ssize_t)(strlen(req) - half));
    const char *want = ":4\r\n+PONG\r\n$10\r\n1800000100\r\n+OK\r\n";
    assert_int_equal(read_n(fd, buf, sizeof(buf)), strlen(want)); /* then closed by QUIT */
    assert_memory_equal(buf, want, strlen(want));
    close(fd);
    /* a 1 GiB bulk string: the error, then the connection closes */
    fd = connect_to(segd_resp_port(r));
    const char *huge = "*2\r\n$4\r\nECHO\r\n$1073741824\r\nxxxxxxxx";
    assert_int_equal(write(fd, huge, strlen(huge)), (ssize_t)strlen(huge));
    shutdown(fd, SHUT_WR);
    const char *perr = "-ERR Protocol error: invalid bulk length\r\n";
    assert_int_equal(read_n(fd, buf, sizeof(buf)), strlen(perr));
    assert_memory_equal(buf, perr, strlen(perr));
    close(fd);
    segd_buf_t text = {0};
    assert_int_equal(segd_metrics_render(m, &text), SEGD_OK);
    assert_int_equal(segd_buf_append(&text, "", 1), SEGD_OK);
    assert_non_null(strstr((char *)text.data,
                           "segd_resp_commands_total{command=\"zcard\",result=\"ok\"} 1\n"));
    assert_non_null(strstr((char *)text.data, "segd_resp_protocol_errors_total 1\n"));
    assert_non_null(strstr((char *)text.data, "segd_resp_connections_total 2\n"));
    segd_buf_free(&text);
    segd_resp_stop(r);
    segd_metrics_destroy(m);
}

/* Whether fd answers PING within 3 s (a connection the server accepted). */
static int pong(int fd)
{
    if (write(fd, "PING\r\n", 6) != 6)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char buf[16];
    return poll(&p, 1, 3000) == 1 && read(fd, buf, sizeof(buf)) == 7 && !memcmp(buf, "+PONG", 5);
}

static int max_open_fd(void)
{
    int max = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        max = atoi(e->d_name) > max ? atoi(e->d_name) : max;
    if (d)
        closedir(d);
    return max;
}

/* Out of descriptors, the server keeps its connections and accepts the
 * waiting one once one of them closes. (That it does not spin meanwhile,
 * the reason for pausing, is not asserted: it would take a timing.) */
static void test_server_out_of_fds(void **state)
{
    fixture_t *f = *state;
    segd_resp_t *r;
    char err[256];
    assert_int_equal(segd_resp_start(&r, "127.0.0.1:0", 1, f->shared.edge, NULL, err,
                                     sizeof(err)), SEGD_OK);
    segd_resp_set_ready(r, 1);
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    /* the free numbers below the highest open descriptor are filled, so
     * that exactly 7 remain under the limit */
    int top = max_open_fd(), fill[1024], nfill = 0;
    for (int fd; nfill < 1024 && (fd = open("/dev/null", O_RDONLY)) >= 0;) {
        fill[nfill++] = fd;
        if (fd > top)
            break;
    }
    low.rlim_cur = (rlim_t)fill[--nfill] + 7;
    close(fill[nfill]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fds[16], n = 0, waiting = -1;
    while (n < 16) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            break; /* the test's own side ran out first */
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)segd_resp_port(r))};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        fds[n++] = fd;
        if (!pong(fd)) {
            waiting = fd; /* in the backlog: the server has no descriptor for it */
            break;
        }
    }
    assert_true(waiting >= 0 && n >= 2);
    close(fds[0]); /* the server's side of it closes: a descriptor for the waiting one */
    struct pollfd p = {.fd = waiting, .events = POLLIN};
    char buf[16];
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(read(waiting, buf, sizeof(buf)), 7);
    assert_memory_equal(buf, "+PONG\r\n", 7);
    for (int i = 1; i < n; i++)
        close(fds[i]);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    segd_resp_stop(r);
}

/* Past max_clients (here 3, over 2 workers) a client gets Redis's error
 * and is closed; the others keep working and a slot freed is taken again.
 * Without the limit every client was served until descriptors ran out. */
static void test_server_max_clients(void **state)
{
    fixture_t *f = *state;
    segd_resp_t *r;
    char err[256];
    segd_resp_opts_t o;
    segd_resp_opts_default(&o);
    o.max_clients = 3;
    segd_metrics_t *m = segd_metrics_new();
    assert_int_equal(segd_resp_start_opts(&r, "127.0.0.1:0", 2, &o, f->shared.edge, m, err,
                                          sizeof(err)), SEGD_OK);
    segd_resp_set_ready(r, 1);
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_to(segd_resp_port(r));
        assert_true(pong(fds[i]));
    }
    int extra = connect_to(segd_resp_port(r));
    struct timeval tv = {.tv_sec = 10}; /* fail, not hang, if it is served */
    assert_int_equal(setsockopt(extra, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    const char *full = "-ERR max number of clients reached\r\n";
    char buf[128];
    assert_int_equal(read_n(extra, buf, sizeof(buf)), strlen(full)); /* then closed */
    assert_memory_equal(buf, full, strlen(full));
    close(extra);
    for (int i = 0; i < 3; i++)
        assert_true(pong(fds[i]));
    close(fds[0]);
    int again = -1;
    for (int i = 0; i < 50 && again < 0; i++) { /* the server sees the close soon */
        int fd = connect_to(segd_resp_port(r));
        if (pong(fd))
            again = fd;
        else
            close(fd), usleep(100 * 1000);
    }
    assert_true(again >= 0);
    segd_buf_t text = {0};
    assert_int_equal(segd_metrics_render(m, &text), SEGD_OK);
    assert_int_equal(segd_buf_append(&text, "", 1), SEGD_OK);
    const char *refused = strstr((char *)text.data, "\nsegd_resp_connections_refused_total ");
    assert_non_null(refused);
    assert_true(atoi(refused + strlen("\nsegd_resp_connections_refused_total ")) >= 1);
    assert_non_null(strstr((char *)text.data, "segd_resp_connections 3\n"));
    segd_buf_free(&text);
    close(again);
    close(fds[1]);
    close(fds[2]);
    segd_resp_t *none = NULL;
    o.max_clients = 0;
    assert_int_equal(segd_resp_start_opts(&none, "127.0.0.1:0", 1, &o, f->shared.edge, NULL, err,
                                          sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_null(none);
    segd_resp_stop(r);
    segd_metrics_destroy(m);
}

/* A connection silent for the idle timeout is closed (Redis's timeout);
 * one that keeps talking is not. Without it an idle client held its slot
 * and buffers for ever. */
static void test_server_idle_timeout(void **state)
{
    fixture_t *f = *state;
    segd_resp_t *r;
    char err[256];
    segd_resp_opts_t o;
    segd_resp_opts_default(&o);
    o.idle_timeout_ms = 600;
    assert_int_equal(segd_resp_start_opts(&r, "127.0.0.1:0", 1, &o, f->shared.edge, NULL, err,
                                          sizeof(err)), SEGD_OK);
    segd_resp_set_ready(r, 1);
    int idle = connect_to(segd_resp_port(r)), busy = connect_to(segd_resp_port(r));
    assert_true(pong(idle));
    for (int i = 0; i < 10; i++) { /* 2 s: over three timeouts */
        usleep(200 * 1000);
        assert_true(pong(busy));
    }
    char buf[16];
    struct pollfd p = {.fd = idle, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_int_equal(read(idle, buf, sizeof(buf)), 0); /* closed by the server */
    close(idle);
    close(busy);
    segd_resp_stop(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_multibulk),
        cmocka_unit_test(test_parse_unauthenticated_limits),
        cmocka_unit_test(test_parse_inline),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test_setup_teardown(test_zrangebyscore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zrange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_point_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_required, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_none, setup, teardown),
        cmocka_unit_test(test_secret_equal),
        cmocka_unit_test_setup_teardown(test_large_user, setup, teardown),
        cmocka_unit_test_setup_teardown(test_general_sort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cache_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cache_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cache_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cache_clock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_cache_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_out_of_fds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_max_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_idle_timeout, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
