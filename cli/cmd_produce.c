/* `segd produce`: a synthetic DMP producing the seed workload to Kafka. It
 * reports only what a broker acknowledged: an event not delivered within
 * --timeout-s, or cut short by SIGINT/SIGTERM, makes it fail (exit 1) and
 * say how many of how many were delivered, to which brokers, and why. */
#include <getopt.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "workload/seed_producer.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig, stop_requested = 1; }

static void usage(FILE *f)
{
    fprintf(f, "usage: segd produce --brokers B --topic T [--users N] [--events N]\n"
               "                    [--format confluent|single-object|raw] [--rate R]\n"
               "                    [--registry URL] [--seed S] [--now S] [--timeout-s N]\n"
               "                    [-X prop=value] [--config FILE]\n"
               "  --config: a segd run configuration file: its brokers (unless --brokers)\n"
               "  and kafka.* connection settings (security.*, sasl.*, ssl.*), then the\n"
               "  SEGD_* environment; -X wins over both\n"
               "  Prints \"produced N events ... delivered N of N\" and exits 0 only when a\n"
               "  broker acknowledged every event. An event not acknowledged within\n"
               "  --timeout-s (default 30; librdkafka's message.timeout.ms) is not\n"
               "  delivered: the command then says how many of how many were, to which\n"
               "  brokers, and the last broker error (\"no broker answered at B: ...\"),\n"
               "  and exits 1. SIGINT/SIGTERM stop it: what is still queued is dropped\n"
               "  and counted as not delivered (exit 1).\n");
}

static int parse_framing(const char *s, segd_framing_t *f)
{
    if (!strcmp(s, "confluent"))
        *f = SEGD_FRAMING_CONFLUENT;
    else if (!strcmp(s, "single-object"))
        *f = SEGD_FRAMING_SINGLE_OBJECT;
    else if (!strcmp(s, "raw"))
        *f = SEGD_FRAMING_RAW;
    else
        return -1;
    return 0;
}

static int produce(segd_seed_produce_opts_t *op, const char *config, segd_config_t *cfg,
                   const char **props, const char **all, int64_t now_s);

int segd_cmd_produce(int argc, char **argv)
{
    static const struct option opts[] = {
        {"brokers", required_argument, 0, 'b'}, {"topic", required_argument, 0, 't'},
        {"users", required_argument, 0, 'u'},   {"events", required_argument, 0, 'e'},
        {"format", required_argument, 0, 'f'},  {"rate", required_argument, 0, 'r'},
        {"registry", required_argument, 0, 'R'}, {"seed", required_argument, 0, 's'},
        {"now", required_argument, 0, 'n'},     {"timeout-s", required_argument, 0, 'T'},
        {"config", required_argument, 0, 'C'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    segd_seed_produce_opts_t o = {0};
    const char *props[2 * 32 + 1] = {0};
    const char *all[2 * (SEGD_MAX_KAFKA_PROPS + 32) + 1];
    const char *config = NULL;
    char xbuf[32][256];
    size_t nprops = 0;
    int64_t v, now_s = (int64_t)time(NULL);
    segd_seed_opts_default(&o.seed);
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    o.delivery_timeout_ms = 30000;
    o.progress = isatty(STDERR_FILENO);
    int c, bad = 0;
    optind = 1;
    while (!bad && (c = segd_args_next("produce", argc, argv, "hX:", opts)) != -1) {
        switch (c) {
        case 'b': o.brokers = optarg; break;
        case 't': o.topic = optarg; break;
        case 'u': bad = segd_arg_int("produce", "--users", optarg, 1, INT64_MAX, &v);
            o.seed.users = (uint64_t)v; break;
        case 'e': bad = segd_arg_int("produce", "--events", optarg, 1, INT64_MAX, &v);
            o.max_events = (uint64_t)v; break;
        case 'r': bad = segd_arg_int("produce", "--rate", optarg, 1, INT64_MAX, &v);
            o.rate = (double)v; break;
        case 's': bad = segd_arg_int("produce", "--seed", optarg, 0, INT64_MAX, &v);
            o.seed.seed = (uint64_t)v; break;
        case 'n': bad = segd_arg_int("produce", "--now", optarg, 1, INT64_MAX / 1000, &now_s); break;
        case 'T': bad = segd_arg_int("produce", "--timeout-s", optarg, 1, 86400, &v);
            o.delivery_timeout_ms = (int)v * 1000; break;
        case 'R': o.registry_url = optarg; break;
        case 'C': config = optarg; break;
        case 'f':
            if ((bad = parse_framing(optarg, &o.framing)))
                fprintf(stderr, "segd produce: bad --format '%s'\n", optarg);
            break;
        case 'X': {
            char *eq = strchr(optarg, '=');
            if (!eq || nprops == 32 || (size_t)(eq - optarg) >= sizeof(xbuf[0])) {
                fprintf(stderr, "segd produce: -X wants prop=value\n");
                bad = 1;
                break;
            }
            snprintf(xbuf[nprops], sizeof(xbuf[0]), "%.*s", (int)(eq - optarg), optarg);
            props[2 * nprops] = xbuf[nprops];
            props[2 * nprops + 1] = eq + 1;
            nprops++;
            break;
        }
        case 'h': usage(stdout); return SEGD_EXIT_OK;
        default: bad = 1; /* said by segd_args_next */
        }
    }
    segd_config_t cfg;
    segd_config_init(&cfg);
    int rc = bad ? SEGD_EXIT_USAGE : produce(&o, config, &cfg, props, all, now_s);
    segd_config_free(&cfg); /* after: o's strings may point into it */
    return rc;
}

/* The second half of segd_cmd_produce, with the options parsed: --config's
 * connection settings under -X's (props), then the producer. */
static int produce(segd_seed_produce_opts_t *op, const char *config, segd_config_t *cfg,
                   const char **props, const char **all, int64_t now_s)
{
    segd_seed_produce_opts_t o = *op;
    if (segd_args_kafka_props("produce", config, cfg, props, all,
                              2 * (SEGD_MAX_KAFKA_PROPS + 32) + 1))
        return SEGD_EXIT_USAGE;
    if (!o.brokers)
        o.brokers = cfg->brokers;
    if (!o.brokers || !o.topic) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    o.seed.now_ms = now_s * 1000;
    o.kafka_props = all;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    segd_seed_produce_result_t res;
    char err[512];
    if (segd_seed_produce(&o, &stop_requested, &res, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd produce: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    printf("produced %llu events (%llu segments, %llu bytes) to %s in %.2f s: delivered %llu "
           "of %llu\n", (unsigned long long)res.delivered, (unsigned long long)res.segments,
           (unsigned long long)res.bytes, o.topic, res.seconds,
           (unsigned long long)res.delivered, (unsigned long long)res.events);
    return SEGD_EXIT_OK;
}
