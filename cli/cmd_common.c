/* argv helpers shared by the subcommands; see cli.h. */
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"

int segd_cli_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                 int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "segd %s: bad %s '%s' (want an integer in [%lld, %lld])\n", cmd, flag,
                s ? s : "", (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

segd_store_t *segd_cli_open_store(const char *cmd, const char *dir, int64_t now_s,
                                  int read_only)
{
    segd_store_opts_t o;
    char err[512];
    segd_store_t *s = NULL;
    segd_store_opts_default(&o);
    o.path = dir;
    o.read_only = read_only;
    o.now_ms = now_s * 1000;
    if (segd_store_open(&s, &o, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd %s: cannot open store: %s\n", cmd, err);
        return NULL;
    }
    return s;
}

double segd_cli_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The one piece of global state: a signal handler can reach nothing else. */
static volatile sig_atomic_t stop_flag;

static void on_stop_signal(int sig)
{
    (void)sig;
    if (stop_flag)
        _exit(130);
    stop_flag = 1;
}

volatile sig_atomic_t *segd_cli_stop_on_signals(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return &stop_flag;
}
