/* The flags of the commands that take a configuration; see cmd_args.h. Not a command:
 * named cmd_ so that the CLI library's source list takes it. */
#include "cli/cmd_args.h"
#include "base/args.h"

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

/* The first pass: 0 with *file the last --config (or NULL), 1 after the
 * usage for --help, 2 after naming a flag the command does not take. */
static int find_config(const segd_args_spec_t *spec, int argc, char **argv, const char **file)
{
    const int config = option_val(spec->opts, "config"), help = option_val(spec->opts, "help");
    int c;
    optind = 1;
    while ((c = segd_args_next(spec->cmd, argc, argv, spec->shortopts, spec->opts)) != -1)
        if (c == '?')
            return 2;
        else if (c == help)
            return spec->usage(stdout), 1;
        else if (c == config)
            *file = optarg;
    return 0;
}

int segd_args_parse_config(const segd_args_spec_t *spec, int argc, char **argv,
                           segd_config_t *cfg, void *ctx)
{
    const int config = option_val(spec->opts, "config");
    const char *file = NULL;
    char err[512];
    int c = find_config(spec, argc, argv, &file);
    if (c)
        return c;
    if ((file && segd_config_load_file(cfg, file, err, sizeof(err))) ||
        ((spec->what & SEGD_ARGS_ENV) && segd_config_load_env(cfg, environ, err, sizeof(err))) ||
        (spec->loaded && spec->loaded(ctx, cfg, err, sizeof(err))))
        goto bad;
    optind = 1;
    while ((c = segd_args_next(spec->cmd, argc, argv, spec->shortopts, spec->opts)) != -1) {
        int rc = c == config ? 0 : spec->apply(ctx, cfg, c, optarg, err, sizeof(err));
        if (rc == -2)
            return 2;
        if (rc)
            goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "segd %s: %s\n", spec->cmd, err);
    return 2;
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
