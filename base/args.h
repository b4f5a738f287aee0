/* Command-line conventions shared by every program face (cli/, bench/):
 * exit codes and range-checked number parsing. argv is untrusted. */
#ifndef SEGD_ARGS_H
#define SEGD_ARGS_H

#include <getopt.h>
#include <stddef.h>
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

/* getopt_long for one segd (sub)command, cmd being its name after "segd "
 * ("identity check"). opts and shortopts are exactly the flags it takes:
 * anything else is refused here, never passed over and never left to
 * getopt's own message (opterr is cleared), with one line on stderr naming
 * it, e.g. "segd identity check: unknown option --framing (see segd identity
 * check --help)". A long flag must be spelled whole: getopt's unique-prefix
 * match would take another command's --topic for this one's --topics.
 * Returns getopt's value, -1 after the last flag (optind at the first
 * operand), or '?' after the message: the caller exits SEGD_EXIT_USAGE. */
int segd_args_next(const char *cmd, int argc, char **argv, const char *shortopts,
                   const struct option *opts);

/* Copies into out (room for cap entries, the terminator included) the
 * entries of all whose val is in vals, so each subcommand sharing its
 * siblings' table takes only its own flags. The strings stay all's. Returns
 * out, or NULL when cap is too small (a programming error). */
const struct option *segd_args_pick(const struct option *all, const char *vals,
                                    struct option *out, size_t cap);

#endif
