/* The first pass over a command's flags, shared by the commands that take a
 * segd run configuration (run, replay, rebuild, owner, snapshot export):
 * --config FILE is read, then the SEGD_* environment, before the flags are
 * applied in a second pass, so flags win over both whatever their order. */
#ifndef SEGD_CMD_ARGS_H
#define SEGD_CMD_ARGS_H

#include <getopt.h>
#include <stdio.h>

#include "config/config.h"

/* What the first pass loads besides --config FILE. */
enum { SEGD_ARGS_FILE_ONLY = 0, SEGD_ARGS_ENV = 1 };

/* Scans argv with opts (its "config" and "help" entries are found by name)
 * and shortopts: --help prints usage(stdout) and returns 1; an unknown flag
 * prints usage(stderr) and returns 2; otherwise loads the last --config
 * FILE into cfg, then with SEGD_ARGS_ENV the SEGD_* environment, and returns
 * 0, or 2 after printing "segd CMD: why" when either is refused. Leaves
 * optind at 1 for the caller's second pass. */
int segd_args_load_config(const char *cmd, int argc, char **argv, const struct option *opts,
                          const char *shortopts, void (*usage)(FILE *), int what,
                          segd_config_t *cfg);

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
