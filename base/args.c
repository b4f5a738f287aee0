/* Command-line helpers; see args.h. */
#include "base/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int segd_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
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

/* The flag as the user wrote it, without "=value": the current argv
 * element once getopt has stepped past it. */
static void flag_text(char **argv, int at, char *out, size_t n)
{
    const char *s = argv[at];
    size_t len = strcspn(s, "=");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), s);
}

/* Says why getopt refused the element at argv[at] (c is '?' or ':'). */
static void say_refused(const char *cmd, char **argv, int at, int c)
{
    char flag[128];
    if (optopt && !(argv[at][0] == '-' && argv[at][1] == '-'))
        snprintf(flag, sizeof(flag), "-%c", optopt);
    else
        flag_text(argv, at, flag, sizeof(flag));
    if (c == ':')
        fprintf(stderr, "segd %s: option %s requires a value (see segd %s --help)\n", cmd, flag,
                cmd);
    else if (optopt && strchr(argv[at], '='))
        fprintf(stderr, "segd %s: option %s takes no value (see segd %s --help)\n", cmd, flag,
                cmd);
    else
        fprintf(stderr, "segd %s: unknown option %s (see segd %s --help)\n", cmd, flag, cmd);
}

int segd_args_next(const char *cmd, int argc, char **argv, const char *shortopts,
                   const struct option *opts)
{
    char spec[64];
    /* a leading ':' makes a missing value ':' rather than '?' */
    snprintf(spec, sizeof(spec), ":%s", shortopts[0] == ':' ? shortopts + 1 : shortopts);
    opterr = 0;
    optopt = 0;
    int index = -1;
    int c = getopt_long(argc, argv, spec, opts, &index);
    /* getopt has stepped past the element it refused, and past a long
     * flag it took (and its value, when that was the next element) */
    if (c == '?' || c == ':') {
        say_refused(cmd, argv, optind - 1, c);
        return '?';
    }
    if (c != -1 && index >= 0) {
        int at = optind - 1;
        if (opts[index].has_arg == required_argument && optarg == argv[at] && at > 1)
            at--;
        char flag[128];
        flag_text(argv, at, flag, sizeof(flag));
        if (strncmp(flag, "--", 2) || strcmp(flag + 2, opts[index].name)) {
            fprintf(stderr, "segd %s: unknown option %s (see segd %s --help)\n", cmd, flag, cmd);
            return '?';
        }
    }
    return c;
}

const struct option *segd_args_pick(const struct option *all, const char *vals,
                                    struct option *out, size_t cap)
{
    size_t n = 0;
    for (; all->name; all++)
        if (!all->flag && all->val && strchr(vals, all->val)) {
            if (n + 1 >= cap)
                return NULL;
            out[n++] = *all;
        }
    memset(&out[n], 0, sizeof(out[n]));
    return out;
}
