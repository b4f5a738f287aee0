/* Shared pieces of the serving benchmarks; see fixture.h. */
#include "bench/fixture.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void segd_bench_make_profile(segd_profile_t *p, int64_t i, int64_t segments, int64_t now_s)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(i + 1) * 0xBF58476D1CE4E5B9ULL;
    segd_profile_clear(p);
    for (int64_t k = 0; k < segments; k++) {
        int64_t exp = rng_next(&s) % 10 == 0 ? now_s - 1 - (int64_t)(rng_next(&s) % 86400)
                                             : now_s + 1 + (int64_t)(rng_next(&s) % (30 * 86400));
        segd_entry_t e = {.segment_id = k * 100 + (int64_t)(rng_next(&s) % 100),
                          .ts_ms = now_s * 1000 - 60000, .expiry_s = exp};
        segd_profile_push(p, &e);
    }
}

int segd_bench_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(sa.sin_port);
}

int segd_bench_dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

double segd_bench_cpu_s(pid_t pid)
{
    if (pid == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    }
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = 0;
    char *p = strrchr(line, ')'); /* fields after the command name */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

void segd_bench_user_key(char *out, size_t size, int64_t i)
{
    snprintf(out, size, "user:%012" PRId64, i);
}

segd_edge_t *segd_bench_build_edge(int64_t users, int64_t segments, int64_t now_s)
{
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = now_s * 1000;
    segd_edge_t *e = NULL;
    if (segd_edge_new(&e, &o))
        return NULL;
    segd_profile_t p;
    segd_profile_init(&p);
    for (int64_t i = 0; i < users; i++) {
        char key[32];
        segd_bench_make_profile(&p, i, segments, now_s);
        segd_bench_user_key(key, sizeof(key), i);
        if (segd_edge_put(e, key, strlen(key), &p)) {
            segd_edge_destroy(e);
            e = NULL;
            break;
        }
    }
    segd_profile_free(&p);
    return e;
}
