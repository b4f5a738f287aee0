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
