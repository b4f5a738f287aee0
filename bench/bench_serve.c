/* `segd bench serve`: the cache's HTTP API (cache/http.h) over loopback,
 * driven by Debian's wrk with keep-alive: single GET /v1/users/{id} of
 * random users, and POST /v1/users:batch of 100 random users; next to it,
 * in the same run, the in-process lookup of the same table (what a bidder
 * embedding libsegd-cache pays). Per run: requests/s, p50/p99 from wrk's
 * latency distribution, and this process's CPU seconds (the server runs in
 * it; wrk in its own process). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/buf.h"
#include "base/clock.h"
#include "bench/bench.h"
#include "bench/fixture.h"
#include "cache/http.h"

#define BATCH_USERS 100

typedef struct serve_args {
    int64_t users, segments, duration, connections, wrk_threads;
} serve_args_t;

typedef struct wrk_result {
    double rps, p50_ms, p99_ms, cpu_s;
    long bad; /* non-2xx answers: the run measured errors, not reads */
} wrk_result_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: segd bench serve [--users U] [--segments S] [--duration S]\n"
               "                        [--connections C] [--wrk-threads T]\n");
}

/* 0 parsed, 1 --help (said), -1 usage error. */
static int parse(int argc, char **argv, serve_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"segments", required_argument, 0, 's'},
                                         {"duration", required_argument, 0, 'd'},
                                         {"connections", required_argument, 0, 'c'},
                                         {"wrk-threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    *a = (serve_args_t){.users = 2000, .segments = 1000, .duration = 5, .connections = 16,
                        .wrk_threads = 1};
    int c;
    optind = 1;
    while ((c = segd_args_next("bench serve", argc, argv, "h", opts)) != -1) {
        int bad = c == '?';
        if (c == 'h')
            return usage(stdout), 1;
        if (c == 'u') bad = segd_arg_int("bench serve", "--users", optarg, 1, 10000000, &a->users);
        if (c == 's') bad = segd_arg_int("bench serve", "--segments", optarg, 1, 100000, &a->segments);
        if (c == 'd') bad = segd_arg_int("bench serve", "--duration", optarg, 1, 3600, &a->duration);
        if (c == 'c')
            bad = segd_arg_int("bench serve", "--connections", optarg, 1, 10000, &a->connections);
        if (c == 't')
            bad = segd_arg_int("bench serve", "--wrk-threads", optarg, 1, 64, &a->wrk_threads);
        if (bad)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "segd bench serve: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* wrk's Lua: a random user per request, or a body of BATCH_USERS of them. */
static int write_script(const char *path, int batch, int64_t users)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "math.randomseed(7)\nlocal users = %" PRId64 "\n", users);
    if (batch)
        fprintf(f, "request = function()\n"
                   "  local t = {}\n"
                   "  for i = 1, %d do t[i] = string.format('\"user:%%012d\"', "
                   "math.random(0, users - 1)) end\n"
                   "  return wrk.format('POST', '/v1/users:batch', "
                   "{['Content-Type'] = 'application/json'}, "
                   "'{\"users\":[' .. table.concat(t, ',') .. ']}')\n"
                   "end\n",
                BATCH_USERS);
    else
        fprintf(f, "request = function()\n"
                   "  return wrk.format('GET', string.format('/v1/users/user:%%012d', "
                   "math.random(0, users - 1)))\n"
                   "end\n");
    return fclose(f) ? -1 : 0;
}

/* "  99%   12.34ms" -> milliseconds (wrk prints us, ms or s). */
static double wrk_ms(const char *v)
{
    char unit[8] = "";
    double x = 0;
    if (sscanf(v, "%lf%7s", &x, unit) < 1)
        return -1;
    return !strcmp(unit, "us") ? x / 1000 : !strcmp(unit, "s") ? x * 1000 : x;
}

static int run_wrk(int port, const serve_args_t *a, const char *script, wrk_result_t *r)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "wrk -t%" PRId64 " -c%" PRId64 " -d%" PRId64 "s --latency -s %s "
             "http://127.0.0.1:%d/ 2>&1",
             a->wrk_threads, a->connections, a->duration, script, port);
    memset(r, 0, sizeof(*r));
    r->p50_ms = r->p99_ms = -1;
    double cpu0 = segd_bench_cpu_s(0);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[512], v[64], last[512] = "";
    while (fgets(line, sizeof(line), f)) {
        snprintf(last, sizeof(last), "%s", line);
        if (sscanf(line, " 50%% %63s", v) == 1)
            r->p50_ms = wrk_ms(v);
        else if (sscanf(line, " 99%% %63s", v) == 1)
            r->p99_ms = wrk_ms(v);
        else if (sscanf(line, "Requests/sec: %lf", &r->rps) == 1)
            continue;
        else if (sscanf(line, " Non-2xx or 3xx responses: %ld", &r->bad) == 1)
            continue;
    }
    int st = pclose(f);
    r->cpu_s = segd_bench_cpu_s(0) - cpu0;
    if (st == 0 && r->rps > 0 && r->p50_ms >= 0 && r->p99_ms >= 0)
        return 0;
    fprintf(stderr, "segd bench serve: %s: exit %d, last line: %s", cmd, st, last);
    return -1;
}

/* One request over a fresh connection: status and the count of segments
 * in the body, so the benchmark is known to measure real answers. */
static int probe(int port, const char *req, int *status, long *segments)
{
    int fd = segd_bench_dial(port);
    if (fd < 0)
        return -1;
    segd_buf_t b = {0};
    int rc = send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req) ? 0 : -1;
    char buf[65536];
    ssize_t n;
    while (!rc && (n = read(fd, buf, sizeof(buf))) > 0)
        rc = segd_buf_append(&b, buf, (size_t)n) ? -1 : 0;
    close(fd);
    if (!rc && segd_buf_append(&b, "", 1))
        rc = -1;
    *segments = 0;
    if (!rc && sscanf((char *)b.data, "HTTP/1.1 %d", status) != 1)
        rc = -1;
    for (const char *p = rc ? NULL : (char *)b.data; p && (p = strstr(p, "\"expires_at\""));
         p++)
        (*segments)++;
    segd_buf_free(&b);
    return rc;
}

static long live_of(int64_t i, int64_t segments, int64_t now_s)
{
    segd_profile_t p;
    segd_profile_init(&p);
    segd_bench_make_profile(&p, i, segments, now_s);
    long live = 0;
    for (size_t k = 0; k < p.n; k++)
        live += p.entries[k].expiry_s > now_s;
    segd_profile_free(&p);
    return live;
}

static int check_answers(int port, const serve_args_t *a, int64_t now_s)
{
    char req[4096], key[32];
    int status = 0;
    long got = 0, want = live_of(1, a->segments, now_s);
    segd_bench_user_key(key, sizeof(key), 1);
    snprintf(req, sizeof(req), "GET /v1/users/%s HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
             key);
    if (probe(port, req, &status, &got) || status != 200 || got != want) {
        fprintf(stderr, "segd bench serve: GET %s: status %d, %ld segments, want 200, %ld\n",
                key, status, got, want);
        return -1;
    }
    const char *body = "{\"users\":[\"user:000000000001\",\"user:000000000001\"]}";
    snprintf(req, sizeof(req),
             "POST /v1/users:batch HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    if (probe(port, req, &status, &got) || status != 200 || got != 2 * want) {
        fprintf(stderr, "segd bench serve: batch: status %d, %ld segments, want 200, %ld\n",
                status, got, 2 * want);
        return -1;
    }
    return 0;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* ns per segd_edge_find of a random user, p50 and p99 over n lookups. */
static int in_process(segd_edge_t *e, const serve_args_t *a, int64_t *p50, int64_t *p99)
{
    enum { N = 20000 };
    int64_t *ns = malloc(N * sizeof(*ns));
    segd_entry_t *out = malloc((size_t)a->segments * sizeof(*out));
    uint64_t s = 88172645463325252ULL;
    int rc = ns && out ? 0 : -1;
    for (int i = 0; !rc && i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        char key[32];
        segd_bench_user_key(key, sizeof(key), (int64_t)(s % (uint64_t)a->users));
        size_t n = 0;
        int known = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = segd_edge_find(e, key, strlen(key), out, (size_t)a->segments, &n, &known) ? -1 : 0;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[i] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    }
    if (!rc) {
        qsort(ns, N, sizeof(*ns), cmp_i64);
        *p50 = ns[N / 2];
        *p99 = ns[N * 99 / 100];
    }
    free(ns);
    free(out);
    return rc;
}

static void print_row(const char *what, const wrk_result_t *r, int users_per_request,
                      int64_t duration)
{
    double total = r->rps * (double)duration;
    printf("| %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.0f |\n", what, r->rps,
           r->rps * users_per_request, r->p50_ms, r->p99_ms, r->cpu_s,
           r->cpu_s > 0 ? total * users_per_request / r->cpu_s : 0);
}

int segd_bench_serve(int argc, char **argv)
{
    serve_args_t a;
    int pa = parse(argc, argv, &a);
    if (pa > 0)
        return SEGD_EXIT_OK;
    if (pa)
        return SEGD_EXIT_USAGE; /* said */
    int64_t now_s = segd_wall_ms() / 1000;
    int rc = SEGD_EXIT_FAIL, port = segd_bench_free_port();
    char listen[64], err[256], single[] = "/tmp/segd-bench-serve-XXXXXX";
    char batch[sizeof(single) + 8];
    segd_http_t *h = NULL;
    int fd = mkstemp(single);
    if (fd >= 0)
        close(fd);
    snprintf(batch, sizeof(batch), "%s.batch", single);
    segd_edge_t *edge = segd_bench_build_edge(a.users, a.segments, now_s);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    if (!edge || fd < 0 || port < 0 || write_script(single, 0, a.users) ||
        write_script(batch, 1, a.users)) {
        fprintf(stderr, "segd bench serve: cannot build the cache or the wrk scripts\n");
        goto out;
    }
    if (segd_http_start(&h, listen, edge, NULL, NULL, NULL, NULL, err, sizeof(err))) {
        fprintf(stderr, "segd bench serve: %s\n", err);
        goto out;
    }
    segd_http_set_ready(h, 1);
    if (check_answers(port, &a, now_s))
        goto out;
    wrk_result_t one, many;
    int64_t p50 = 0, p99 = 0;
    if (run_wrk(port, &a, single, &one) || run_wrk(port, &a, batch, &many)) {
        fprintf(stderr, "segd bench serve: wrk failed (is Debian's wrk installed?)\n");
        goto out;
    }
    if (in_process(edge, &a, &p50, &p99)) {
        fprintf(stderr, "segd bench serve: in-process lookups failed\n");
        goto out;
    }
    if (one.bad || many.bad) {
        fprintf(stderr, "segd bench serve: %ld and %ld non-2xx answers\n", one.bad, many.bad);
        goto out;
    }
    printf("## segd bench serve: %" PRId64 " users x %" PRId64 " segments (90%% live), "
           "wrk %" PRId64 " thread(s), %" PRId64 " keep-alive connections, %" PRId64
           " s a run\n\n",
           a.users, a.segments, a.wrk_threads, a.connections, a.duration);
    printf("| request | requests/s | users/s | p50 ms | p99 ms | server CPU s | users per "
           "CPU-s |\n|---|---|---|---|---|---|---|\n");
    print_row("GET /v1/users/{id}", &one, 1, a.duration);
    print_row("POST /v1/users:batch (100)", &many, BATCH_USERS, a.duration);
    printf("| in process: segd_edge_find | | | %.4f | %.4f | | |\n\n", (double)p50 / 1e6,
           (double)p99 / 1e6);
    printf("- one user over HTTP p50 is %.0fx the in-process lookup; a batch of %d costs "
           "%.1fx one GET at p50\n",
           p50 > 0 ? one.p50_ms * 1e6 / (double)p50 : 0, BATCH_USERS,
           one.p50_ms > 0 ? many.p50_ms / one.p50_ms : 0);
    rc = SEGD_EXIT_OK;
out:
    segd_http_stop(h);
    unlink(single);
    unlink(batch);
    segd_edge_destroy(edge);
    return rc;
}
