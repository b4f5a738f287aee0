/* `segd owner`: which input partition each user belongs to under
 * input.partitioner (the partition count from the brokers' metadata), and
 * which member of the consumer group holds that partition now, as the
 * group's description says (DESIGN §7: reads in a fleet). */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "config/config.h"
#include "core/partition.h"
#include "transport/kconf.h"
#include "transport/kmeta.h"

#define OWNER_TIMEOUT_MS 10000

static void usage(FILE *f)
{
    fprintf(f, "usage: segd owner --brokers B --topic T [--group G] [--config FILE]\n"
               "                  [-X kafka.prop=value ...] USER...\n"
               "  prints `USER partition=P owner=CLIENT host=H` per user: P under\n"
               "  input.partitioner (default murmur2_random) among the topic's partitions;\n"
               "  the owner from the group's description (group from --group or the\n"
               "  config): the member's client id (a segd run's is its store's instance id\n"
               "  unless kafka.client.id is set) and host, `owner=none` when no member\n"
               "  holds P, `owner=unknown` when the brokers cannot describe the group\n"
               "  (said on stderr)\n");
}

static int apply_flag(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n)
{
    (void)ctx;
    switch (c) {
    case 'b': return segd_config_set(cfg, "brokers", arg, err, n) ? -1 : 0;
    case 't': return segd_config_set(cfg, "topics", arg, err, n) ? -1 : 0;
    case 'g': return segd_config_set(cfg, "group", arg, err, n) ? -1 : 0;
    case 'X': return segd_config_set_x(cfg, arg, err, n) ? -1 : 0;
    }
    return 0;
}

/* 0 ok, 1 --help, 2 usage error (said). Flags win over the file. */
static int parse_args(int argc, char **argv, segd_config_t *cfg)
{
    static const struct option opts[] = {{"brokers", required_argument, 0, 'b'},
                                         {"topic", required_argument, 0, 't'},
                                         {"group", required_argument, 0, 'g'},
                                         {"config", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    static const segd_args_spec_t spec = {"owner", opts, "hX:", usage, SEGD_ARGS_FILE_ONLY,
                                          NULL, apply_flag};
    char err[512];
    int c = segd_args_parse_config(&spec, argc, argv, cfg, NULL);
    if (c)
        return c;
    if (!cfg->brokers || !cfg->n_topics || optind >= argc) {
        snprintf(err, sizeof(err), "--brokers, --topic and at least one USER are required");
        goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "segd owner: %s\n", err);
    return 2;
}

/* A client for metadata and the admin API only: a consumer with no group
 * never joins one, and its metadata requests create no topic. */
static rd_kafka_t *make_client(const segd_config_t *cfg, char *errstr, size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", cfg->brokers,
                                    "allow.auto.create.topics", "false", NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "owner", defaults, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].key, "group.id") && strcmp(cfg->kafka[i].key, "group.instance.id"))
            err = segd_kconf_set(conf, "owner", cfg->kafka[i].key, cfg->kafka[i].value, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, n);
    if (!rk)
        rd_kafka_conf_destroy(conf);
    return rk;
}

/* owners[p] per partition, or NULL (said on stderr) when the group cannot
 * be described; freed by the caller. */
static char (*group_owners(rd_kafka_t *rk, const segd_config_t *cfg,
                           int32_t partitions))[SEGD_KMETA_OWNER_LEN]
{
    char (*owners)[SEGD_KMETA_OWNER_LEN] = calloc((size_t)partitions, sizeof(*owners));
    char err[512];
    if (owners && segd_kmeta_group_owners(rk, cfg->group, cfg->topics[0], partitions, owners,
                                          OWNER_TIMEOUT_MS, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd owner: owner=unknown: cannot describe the group: %s\n", err);
        free(owners);
        return NULL;
    }
    return owners;
}

static void print_owner(const char *user, const segd_config_t *cfg, int32_t partitions,
                        char (*owners)[SEGD_KMETA_OWNER_LEN])
{
    int32_t p = segd_partition_of(cfg->partitioner, user, strlen(user), partitions);
    if (!cfg->group)
        printf("%s partition=%" PRId32 "\n", user, p);
    else if (!owners)
        printf("%s partition=%" PRId32 " owner=unknown\n", user, p);
    else
        printf("%s partition=%" PRId32 " owner=%s\n", user, p, owners[p][0] ? owners[p] : "none");
}

int segd_cmd_owner(int argc, char **argv)
{
    segd_config_t cfg;
    segd_config_init(&cfg);
    int rc = parse_args(argc, argv, &cfg);
    if (rc) {
        segd_config_free(&cfg);
        return rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    }
    char err[512];
    int32_t partitions = 0;
    rc = SEGD_EXIT_FAIL;
    rd_kafka_t *rk = make_client(&cfg, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "segd owner: %s\n", err);
        goto out_config;
    }
    if (segd_kmeta_partitions(rk, cfg.topics[0], OWNER_TIMEOUT_MS, &partitions, err,
                              sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd owner: %s\n", err);
        goto out_client;
    }
    char (*owners)[SEGD_KMETA_OWNER_LEN] = cfg.group ? group_owners(rk, &cfg, partitions) : NULL;
    for (int i = optind; i < argc; i++)
        print_owner(argv[i], &cfg, partitions, owners);
    free(owners);
    rc = SEGD_EXIT_OK;
out_client:
    rd_kafka_destroy(rk);
out_config:
    segd_config_free(&cfg);
    return rc;
}
