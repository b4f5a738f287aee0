/* What the serving benchmarks (bench_resp.c, bench_serve.c) share: an edge
 * table of synthetic 1000-segment users, loopback sockets, and the CPU
 * seconds of a server process. */
#ifndef SEGD_BENCH_FIXTURE_H
#define SEGD_BENCH_FIXTURE_H

#include <stdint.h>
#include <sys/types.h>

#include "cache/edge.h"
#include "core/profile.h"

/* User i's entries: S distinct ids in id order, expiries from now - 1 day
 * to now + 30 days (a tenth in the past). Deterministic in i. */
void segd_bench_make_profile(segd_profile_t *p, int64_t i, int64_t segments, int64_t now_s);
/* The key of user i: "user:%012d" (a Redis-style key, and URL-safe). */
void segd_bench_user_key(char *out, size_t size, int64_t i);
/* An edge table at now_s holding users 0..users-1; NULL when out of memory. */
segd_edge_t *segd_bench_build_edge(int64_t users, int64_t segments, int64_t now_s);
/* A free loopback TCP port, -1 on error. */
int segd_bench_free_port(void);
/* A connected socket to 127.0.0.1:port, -1 on error. */
int segd_bench_dial(int port);
/* The CPU seconds (user + system) of pid so far; pid 0 = this process. */
double segd_bench_cpu_s(pid_t pid);

#endif
