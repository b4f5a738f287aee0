/* The first pass over a command's flags; see cmd_args.h. Not a command:
 * named cmd_ so that the CLI library's source list takes it. */
#include "cli/cmd_args.h"

#include <string.h>

extern char **environ;

/* The value getopt_long returns for the long option name; -1 when none. */
static int option_val(const struct option *opts, const char *name)
{
    for (; opts->name; opts++)
        if (!strcmp(opts->name, name))
            return opts->flag ? -1 : opts->val;
    return -1;
}

int segd_args_load_config(const char *cmd, int argc, char **argv, const struct option *opts,
                          const char *shortopts, void (*usage)(FILE *), int what,
                          segd_config_t *cfg)
{
    const int config = option_val(opts, "config"), help = option_val(opts, "help");
    const char *file = NULL;
    char err[512];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, shortopts, opts, NULL)) != -1)
        if (c == config)
            file = optarg;
        else if (c == help)
            return usage(stdout), 1;
        else if (c == '?')
            return usage(stderr), 2;
    optind = 1;
    if ((file && segd_config_load_file(cfg, file, err, sizeof(err))) ||
        ((what & SEGD_ARGS_ENV) && segd_config_load_env(cfg, environ, err, sizeof(err)))) {
        fprintf(stderr, "segd %s: %s\n", cmd, err);
        return 2;
    }
    return 0;
}

int segd_args_kafka_props(const char *cmd, const char *config, segd_config_t *cfg,
                          const char *const *xprops, const char **out, size_t cap)
{
    char err[512];
    /* the environment only with a file: these commands ran without either,
     * and a SEGD_* variable meant for segd run would now refuse them */
    if (config && (segd_config_load_file(cfg, config, err, sizeof(err)) ||
                   segd_config_load_env(cfg, environ, err, sizeof(err)))) {
        fprintf(stderr, "segd %s: %s\n", cmd, err);
        return -1;
    }
    const char *conn[2 * SEGD_MAX_KAFKA_PROPS + 1];
    segd_config_connection_props(cfg, conn);
    size_t n = 0;
    for (size_t i = 0; conn[i] && n + 2 < cap; i += 2, n += 2)
        out[n] = conn[i], out[n + 1] = conn[i + 1];
    for (size_t i = 0; xprops && xprops[i] && n + 2 < cap; i += 2, n += 2)
        out[n] = xprops[i], out[n + 1] = xprops[i + 1];
    out[n] = NULL;
    return 0;
}
