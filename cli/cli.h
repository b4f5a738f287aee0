/* Shared pieces of the `segd` subcommands: the command table, exit codes and
 * argv parsing helpers. argv is untrusted: every number is range-checked. */
#ifndef SEGD_CLI_H
#define SEGD_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "store/store.h"

enum {
    SEGD_EXIT_OK = 0,
    SEGD_EXIT_FAIL = 1,    /* runtime failure */
    SEGD_EXIT_USAGE = 2,   /* bad flags or config */
    SEGD_EXIT_PARTIAL = 3, /* done, but some input was skipped */
};

typedef struct segd_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} segd_cmd_t;

int segd_cmd_backfill(int argc, char **argv);
int segd_cmd_get(int argc, char **argv);
int segd_cmd_compact(int argc, char **argv);
int segd_cmd_stats(int argc, char **argv);
int segd_cmd_generate(int argc, char **argv);
int segd_cmd_segments(int argc, char **argv);
int segd_cmd_demo(int argc, char **argv);
int segd_cmd_bench(int argc, char **argv);
int segd_cmd_run(int argc, char **argv);
int segd_cmd_dev_broker(int argc, char **argv);
int segd_cmd_produce(int argc, char **argv);
int segd_cmd_snapshot(int argc, char **argv);
int segd_cmd_cache(int argc, char **argv);

/* Parses a decimal integer in [lo, hi]; prints "segd CMD: bad --flag" on error. */
int segd_cli_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                 int64_t *out);
/* Opens the store at dir with defaults, now_s (0 = wall clock), read-only or not;
 * prints the error. */
segd_store_t *segd_cli_open_store(const char *cmd, const char *dir, int64_t now_s,
                                  int read_only);
double segd_cli_seconds(void);
/* Makes SIGINT/SIGTERM set the returned flag (finish and exit cleanly); a
 * second signal exits at once with status 130. */
volatile sig_atomic_t *segd_cli_stop_on_signals(void);

#endif
