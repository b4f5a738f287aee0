/* Process figures from /proc/self; see process.h. */
#define _GNU_SOURCE
#include "metrics/process.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

uint64_t segd_process_rss_bytes(void)
{
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    int ok = fscanf(f, "%llu %llu", &size, &resident) == 2;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return ok && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static double open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    double n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* Seconds since the epoch at which the process started: boot time plus the
 * start tick of /proc/self/stat (field 22, after the parenthesised name). */
static double start_time(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long ticks = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                            "%*d %*d %*d %*d %llu", &ticks) != 1)
        return 0;
    struct timespec now, up;
    clock_gettime(CLOCK_REALTIME, &now);
    clock_gettime(CLOCK_BOOTTIME, &up);
    double boot = (double)(now.tv_sec - up.tv_sec) + (double)(now.tv_nsec - up.tv_nsec) / 1e9;
    return boot + (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

typedef struct families {
    segd_metric_t *rss, *cpu, *fds, *start;
} families_t;

static families_t get_families(segd_metrics_t *m)
{
    /* registering again returns the same family: no state to keep */
    return (families_t){
        segd_metrics_gauge(m, "segd_process_resident_memory_bytes",
                           "Resident set size of the process (/proc/self/statm).", NULL),
        segd_metrics_counter(m, "segd_process_cpu_seconds_total",
                             "User and system CPU time of the process.", NULL),
        segd_metrics_gauge(m, "segd_process_open_fds", "Open file descriptors.", NULL),
        segd_metrics_gauge(m, "segd_process_start_time_seconds",
                           "Start time of the process since the epoch.", NULL),
    };
}

static void collect(void *ctx)
{
    families_t f = get_families(ctx);
    segd_metric_set(f.rss, NULL, (double)segd_process_rss_bytes());
    segd_metric_set(f.cpu, NULL, cpu_seconds());
    segd_metric_set(f.fds, NULL, open_fds());
    segd_metric_set(f.start, NULL, start_time());
}

segd_err_t segd_process_metrics_register(segd_metrics_t *m)
{
    families_t f = get_families(m);
    if (!f.rss || !f.cpu || !f.fds || !f.start)
        return SEGD_ERR_NOMEM;
    return segd_metrics_add_collector(m, collect, m);
}
