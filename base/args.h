/* Command-line conventions shared by every program face (cli/, bench/):
 * exit codes and range-checked number parsing. argv is untrusted. */
#ifndef SEGD_ARGS_H
#define SEGD_ARGS_H

#include <stdint.h>

enum {
    SEGD_EXIT_OK = 0,
    SEGD_EXIT_FAIL = 1,    /* runtime failure */
    SEGD_EXIT_USAGE = 2,   /* bad flags or config */
    SEGD_EXIT_PARTIAL = 3, /* done, but some input was skipped */
    SEGD_EXIT_REFUSED = 4, /* nothing done: it would not be exact (--force goes on) */
    SEGD_EXIT_HISTORY = 5, /* done, but the input's history is incomplete: retention
                            * deleted part of it (segd rebuild; --accept-history-loss
                            * or --base goes on) */
    SEGD_EXIT_UNCHECKED = 6, /* sent, but its effect was not checked (nothing to wait on) */
};

/* Parses a decimal integer in [lo, hi]; prints "segd CMD: bad FLAG ..." to
 * stderr and returns -1 on error. */
int segd_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                 int64_t *out);

#endif
