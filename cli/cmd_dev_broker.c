/* `segd dev-broker [--partitions N] [--topics T,...] [--brokers N]`: serves an
 * in-process Kafka cluster on loopback until SIGINT/SIGTERM. The first line
 * of stdout is `bootstrap=HOST:PORT`. */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "workload/dev_broker.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig, stop_requested = 1; }

int segd_cmd_dev_broker(int argc, char **argv)
{
    static const struct option opts[] = {{"partitions", required_argument, 0, 'p'},
                                         {"topics", required_argument, 0, 't'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int64_t partitions = 4, brokers = 1;
    char topics_arg[4096] = "segments.events,segments.events.dlq,segments.changes";
    int c;
    optind = 1;
    while ((c = segd_args_next("dev-broker", argc, argv, "h", opts)) != -1) {
        if (c == 'p' && !segd_arg_int("dev-broker", "--partitions", optarg, 1, 1024, &partitions))
            continue;
        if (c == 'b' && !segd_arg_int("dev-broker", "--brokers", optarg, 1, 16, &brokers))
            continue;
        if (c == 't') {
            snprintf(topics_arg, sizeof(topics_arg), "%s", optarg);
            continue;
        }
        if (c != 'h') /* refused, said by segd_args_next or segd_arg_int */
            return SEGD_EXIT_USAGE;
        printf("usage: segd dev-broker [--partitions N] [--topics T,...] [--brokers N]\n"
               "  prints bootstrap=HOST:PORT first, serves until SIGINT/SIGTERM\n");
        return SEGD_EXIT_OK;
    }
    const char *topics[64];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(topics_arg, ",", &save); t && n < 64;
         t = strtok_r(NULL, ",", &save))
        topics[n++] = t;
    segd_dev_broker_t *b = NULL;
    char err[512];
    if (segd_dev_broker_new(&b, (int)brokers, (int)partitions, topics, n, err, sizeof(err))) {
        fprintf(stderr, "segd dev-broker: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("bootstrap=%s\n", segd_dev_broker_bootstraps(b));
    printf("partitions=%lld brokers=%lld topics=", (long long)partitions, (long long)brokers);
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? "," : "", topics[i]);
    printf("\n");
    fflush(stdout);
    while (!stop_requested)
        pause();
    segd_dev_broker_destroy(b);
    return SEGD_EXIT_OK;
}
