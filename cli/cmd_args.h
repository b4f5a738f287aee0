/* The flags of the commands that take a segd run configuration (run,
 * replay, rebuild, owner, snapshot export): --config FILE is read, then the
 * SEGD_* environment, before the flags are applied in a second pass, so
 * flags win over both whatever their order. Unknown flags are refused as
 * everywhere else (base/args.h: segd_args_next). */
#ifndef SEGD_CMD_ARGS_H
#define SEGD_CMD_ARGS_H

#include <getopt.h>
#include <stdio.h>

#include "config/config.h"

/* What the first pass loads besides --config FILE. */
enum { SEGD_ARGS_FILE_ONLY = 0, SEGD_ARGS_ENV = 1 };

/* A command that takes a segd run configuration: its name after "segd ",
 * its flags (opts must have a "config" entry; "help" prints usage), and
 * what applies them. */
typedef struct segd_args_spec {
    const char *cmd;
    const struct option *opts;
    const char *shortopts; /* "hX:" and the like */
    void (*usage)(FILE *);
    int what; /* SEGD_ARGS_FILE_ONLY or SEGD_ARGS_ENV */
    /* After the file and environment, before the first flag (may be NULL):
     * 0, or -1 with err set. */
    int (*loaded)(void *ctx, segd_config_t *cfg, char *err, size_t n);
    /* One flag c (getopt's value; never --config or --help) with its value
     * arg: 0, -1 with err set, or -2 when it printed its own message. */
    int (*apply)(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n);
} segd_args_spec_t;

/* The one reading of such a command's flags, so a flag wins over the file
 * and the environment whatever the order: a first pass over argv finds
 * --help (usage on stdout, returns 1), refuses any flag the command does
 * not take (segd_args_next's message, returns 2) and loads the last
 * --config FILE into cfg, then with SEGD_ARGS_ENV the SEGD_* environment;
 * a second pass applies every other flag through spec->apply. Returns 0
 * with optind at the first operand, or 2 after printing "segd CMD: why". */
int segd_args_parse_config(const segd_args_spec_t *spec, int argc, char **argv,
                           segd_config_t *cfg, void *ctx);

/* For the commands that open a Kafka client beside their own -X k=v list
 * (produce, cache): when config is not NULL, loads that segd run
 * configuration file into cfg, then the SEGD_* environment (so a password
 * can stay out of the file too: SEGD_KAFKA_SASL_PASSWORD); fills out (room for cap entries)
 * with cfg's connection settings (segd_config_connection_props: security.*,
 * sasl.*, ssl.*, client.id) followed by xprops (key, value, ..., NULL; may be
 * NULL), which win. 0, or -1 after printing "segd CMD: why". The strings
 * are cfg's and xprops', borrowed. */
int segd_args_kafka_props(const char *cmd, const char *config, segd_config_t *cfg,
                          const char *const *xprops, const char **out, size_t cap);

#endif
