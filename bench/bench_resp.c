/* `segd bench resp`: the Redis-protocol front (cache/resp.h) beside a real
 * redis-server holding the same data, read by the same client
 * (redis-benchmark, Debian redis-tools) in the same run: U users of S
 * segments (ids spread, expiries over 30 days, a tenth already expired:
 * segd holds them, Redis only the live ones), then
 * `ZRANGEBYSCORE user:<random> NOW +inf WITHSCORES` with 1 connection and
 * with C (segd's reply cache: --reply-cache-mb a worker). Per server:
 * reads/s, p50/p99, and the server's CPU seconds over the run, so reads
 * per CPU-second compare a multi-threaded server with a single-threaded
 * one. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/buf.h"
#include "base/clock.h"
#include "bench/bench.h"
#include "bench/fixture.h"
#include "cache/edge.h"
#include "cache/resp.h"
#include "cache/resp_cmd.h"

typedef struct resp_args {
    int64_t users, segments, requests, clients, threads, client_threads, reply_cache_mb;
} resp_args_t;

typedef struct run_result {
    double rps, p50_ms, p99_ms, cpu_s;
} run_result_t;

static pid_t start_redis(int port, const char *dir)
{
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", dir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; pid > 0 && i < 100; i++) {
        int fd = segd_bench_dial(port);
        if (fd >= 0) {
            close(fd);
            return pid;
        }
        usleep(50000);
    }
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

static void add_bulk(segd_buf_t *b, const char *s)
{
    char h[32];
    int n = snprintf(h, sizeof(h), "$%zu\r\n", strlen(s));
    segd_buf_append(b, h, (size_t)n);
    segd_buf_append(b, s, strlen(s));
    segd_buf_append(b, "\r\n", 2);
}

/* Sends everything in b, then reads until n replies' worth of lines came
 * (each ZADD answers one ":N\r\n"); -1 on a socket error. */
static int send_and_count(int fd, segd_buf_t *b, int64_t n)
{
    for (size_t off = 0; off < b->len;) {
        ssize_t w = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    b->len = 0;
    char buf[4096];
    for (int64_t got = 0; got < n;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r <= 0)
            return -1;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] == '-')
                return -1;
            got += buf[i] == '\n';
        }
    }
    return 0;
}

/* Each user's live entries as one ZADD, 50 users a round trip. */
static int load_redis(int port, const resp_args_t *a, int64_t now_s)
{
    int fd = segd_bench_dial(port);
    if (fd < 0)
        return -1;
    segd_buf_t b = {0};
    segd_profile_t p;
    segd_profile_init(&p);
    int rc = 0;
    int64_t pending = 0;
    for (int64_t i = 0; i < a->users && !rc; i++) {
        segd_bench_make_profile(&p, i, a->segments, now_s);
        size_t live = 0;
        for (size_t k = 0; k < p.n; k++)
            live += p.entries[k].expiry_s > now_s;
        char h[32], key[32], num[32];
        snprintf(h, sizeof(h), "*%zu\r\n", 2 + 2 * live);
        segd_buf_append(&b, h, strlen(h));
        add_bulk(&b, "ZADD");
        segd_bench_user_key(key, sizeof(key), i);
        add_bulk(&b, key);
        for (size_t k = 0; k < p.n; k++) {
            if (p.entries[k].expiry_s <= now_s)
                continue;
            snprintf(num, sizeof(num), "%" PRId64, p.entries[k].expiry_s);
            add_bulk(&b, num);
            snprintf(num, sizeof(num), "%" PRId64, p.entries[k].segment_id);
            add_bulk(&b, num);
        }
        if (++pending == 50 || i == a->users - 1) {
            rc = send_and_count(fd, &b, pending);
            pending = 0;
        }
    }
    segd_profile_free(&p);
    segd_buf_free(&b);
    close(fd);
    return rc;
}

/* The raw reply bytes of one command then QUIT: the two servers must agree
 * byte for byte before their speed means anything. */
static int raw_reply(int port, const char *cmd, segd_buf_t *out)
{
    int fd = segd_bench_dial(port);
    if (fd < 0)
        return -1;
    char req[256];
    int n = snprintf(req, sizeof(req), "%s\r\nQUIT\r\n", cmd);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    char buf[65536];
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        segd_buf_append(out, buf, (size_t)r);
    close(fd);
    return 0;
}

/* redis-benchmark --csv: "test","rps","avg","min","p50","p95","p99","max". */
static int bench_run(int port, pid_t server, const resp_args_t *a, int64_t clients,
                     int64_t now_s, run_result_t *r)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "redis-benchmark -h 127.0.0.1 -p %d -n %" PRId64 " -c %" PRId64 " -r %" PRId64
             " --threads %" PRId64 " --csv ZRANGEBYSCORE user:__rand_int__ %" PRId64
             " +inf WITHSCORES 2>&1",
             port, a->requests, clients, a->users, a->client_threads, now_s);
    double cpu0 = segd_bench_cpu_s(server);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[1024];
    int ok = 0;
    while (fgets(line, sizeof(line), f)) {
        char *p = strstr(line, "\",\"");
        if (p && strncmp(line, "\"test\"", 6) &&
            sscanf(p, "\",\"%lf\",\"%*f\",\"%*f\",\"%lf\",\"%*f\",\"%lf\"", &r->rps, &r->p50_ms,
                   &r->p99_ms) == 3)
            ok = 1;
    }
    int st = pclose(f);
    r->cpu_s = segd_bench_cpu_s(server) - cpu0;
    return ok && st == 0 ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: segd bench resp [--users U] [--segments S] [--requests N] [--clients C]\n"
               "                       [--threads T] [--client-threads K] [--reply-cache-mb M]\n");
}

/* 0 parsed, 1 --help (said), -1 usage error. */
static int parse(int argc, char **argv, resp_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"segments", required_argument, 0, 's'},
                                         {"requests", required_argument, 0, 'n'},
                                         {"clients", required_argument, 0, 'c'},
                                         {"threads", required_argument, 0, 't'},
                                         {"client-threads", required_argument, 0, 'k'},
                                         {"reply-cache-mb", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    *a = (resp_args_t){.users = 2000, .segments = 1000, .requests = 20000, .clients = 50,
                       .threads = 2, .client_threads = 1,
                       .reply_cache_mb = SEGD_RESP_REPLY_CACHE_DEFAULT_MB};
    int c;
    optind = 1;
    while ((c = segd_args_next("bench resp", argc, argv, "h", opts)) != -1) {
        int bad = c == '?';
        if (c == 'h')
            return usage(stdout), 1;
        if (c == 'u') bad = segd_arg_int("bench resp", "--users", optarg, 1, 10000000, &a->users);
        if (c == 's') bad = segd_arg_int("bench resp", "--segments", optarg, 1, 100000, &a->segments);
        if (c == 'n') bad = segd_arg_int("bench resp", "--requests", optarg, 1, 100000000, &a->requests);
        if (c == 'c') bad = segd_arg_int("bench resp", "--clients", optarg, 1, 10000, &a->clients);
        if (c == 't') bad = segd_arg_int("bench resp", "--threads", optarg, 1, 256, &a->threads);
        if (c == 'k')
            bad = segd_arg_int("bench resp", "--client-threads", optarg, 1, 64, &a->client_threads);
        if (c == 'm')
            bad = segd_arg_int("bench resp", "--reply-cache-mb", optarg, 0, 1 << 20, &a->reply_cache_mb);
        if (bad)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "segd bench resp: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* Asks segd and redis-server the same range query and fails unless both
 * answer the same bytes, and a full answer: a benchmark of different or
 * empty replies would compare nothing. */
static int same_answer(int sport, int rport, int64_t now_s, segd_buf_t *ra, segd_buf_t *rb)
{
    char q[128];
    snprintf(q, sizeof(q), "ZRANGEBYSCORE user:%012d %" PRId64 " +inf WITHSCORES", 1, now_s);
    if (raw_reply(sport, q, ra) || raw_reply(rport, q, rb) ||
        ra->len != rb->len || memcmp(ra->data, rb->data, ra->len) || ra->len < 1000) {
        fprintf(stderr, "segd bench resp: segd and redis-server answer '%s' differently\n", q);
        return -1;
    }
    return 0;
}

/* Runs redis-benchmark against both servers, with one client and with
 * a->clients, and prints the table and the ratios. */
static int run_both(int sport, int rport, pid_t redis, const resp_args_t *a, int64_t now_s,
                    size_t reply_len)
{
    printf("## segd bench resp: %" PRId64 " users x %" PRId64 " segments (%.0f%% live), "
           "%" PRId64 " requests a run, reply %zu bytes, segd reply cache %" PRId64
           " MiB a worker\n\n",
           a->users, a->segments, 90.0, a->requests, reply_len, a->reply_cache_mb);
    printf("`ZRANGEBYSCORE user:<random> NOW +inf WITHSCORES` by redis-benchmark (%" PRId64
           " client thread(s)); CPU = the server's CPU seconds over the run\n\n",
           a->client_threads);
    printf("| server | threads | clients | reads/s | p50 ms | p99 ms | CPU s | reads per CPU-s |\n"
           "|---|---|---|---|---|---|---|---|\n");
    int64_t cl[2] = {1, a->clients};
    run_result_t res[2][2];
    for (int k = 0; k < 2; k++) {
        if (bench_run(sport, 0, a, cl[k], now_s, &res[0][k]) ||
            bench_run(rport, redis, a, cl[k], now_s, &res[1][k])) {
            fprintf(stderr, "segd bench resp: redis-benchmark failed\n");
            return -1;
        }
        for (int s = 0; s < 2; s++) {
            run_result_t *r = &res[s][k];
            printf("| %s | %d | %" PRId64 " | %.0f | %.3f | %.3f | %.2f | %.0f |\n",
                   s ? "redis-server 7.0" : "segd cache --resp", s ? 1 : (int)a->threads, cl[k],
                   r->rps, r->p50_ms, r->p99_ms, r->cpu_s,
                   r->cpu_s > 0 ? (double)a->requests / r->cpu_s : 0);
        }
    }
    printf("\n");
    for (int k = 0; k < 2; k++) {
        double sp = res[0][k].cpu_s > 0 ? a->requests / res[0][k].cpu_s : 0;
        double rp = res[1][k].cpu_s > 0 ? a->requests / res[1][k].cpu_s : 0;
        printf("- %" PRId64 " client(s): segd/redis reads/s %.1fx; per CPU-second %.1fx\n", cl[k],
               res[0][k].rps / res[1][k].rps, rp > 0 ? sp / rp : 0);
    }
    return 0;
}

int segd_bench_resp(int argc, char **argv)
{
    resp_args_t a;
    int pa = parse(argc, argv, &a);
    if (pa > 0)
        return SEGD_EXIT_OK;
    if (pa)
        return SEGD_EXIT_USAGE; /* said */
    int64_t now_s = segd_wall_ms() / 1000;
    char dir[] = "/tmp/segd-bench-resp-XXXXXX", err[256];
    int rc = SEGD_EXIT_FAIL, rport = segd_bench_free_port();
    segd_resp_t *srv = NULL;
    pid_t redis = -1;
    segd_buf_t ra = {0}, rb = {0};
    segd_edge_t *edge = segd_bench_build_edge(a.users, a.segments, now_s);
    if (!edge || !mkdtemp(dir) || (redis = start_redis(rport, dir)) < 0) {
        fprintf(stderr, "segd bench resp: cannot build the cache or start redis-server\n");
        goto out;
    }
    if (segd_resp_start_cached(&srv, "127.0.0.1:0", (int)a.threads,
                               (size_t)a.reply_cache_mb << 20, edge, NULL, err, sizeof(err))) {
        fprintf(stderr, "segd bench resp: %s\n", err);
        goto out;
    }
    segd_resp_set_ready(srv, 1);
    if (load_redis(rport, &a, now_s)) {
        fprintf(stderr, "segd bench resp: loading redis-server failed\n");
        goto out;
    }
    if (same_answer(segd_resp_port(srv), rport, now_s, &ra, &rb))
        goto out;
    if (run_both(segd_resp_port(srv), rport, redis, &a, now_s, ra.len))
        goto out;
    rc = SEGD_EXIT_OK;
out:
    segd_resp_stop(srv);
    if (redis > 0) {
        kill(redis, SIGTERM);
        waitpid(redis, NULL, 0);
        char cmdline[128];
        snprintf(cmdline, sizeof(cmdline), "%s/dump.rdb", dir);
        unlink(cmdline);
    }
    if (dir[sizeof(dir) - 2] != 'X')
        rmdir(dir);
    segd_buf_free(&ra);
    segd_buf_free(&rb);
    segd_edge_destroy(edge);
    return rc;
}
