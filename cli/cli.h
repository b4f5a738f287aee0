/* Shared pieces of the `segd` subcommands, mainly the command table. Exit
 * codes and number parsing live in base/args.h, store opening and signals
 * in app/app.h. */
#ifndef SEGD_CLI_H
#define SEGD_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "app/app.h"
#include "base/args.h"

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
int segd_cmd_erase(int argc, char **argv);
int segd_cmd_demo(int argc, char **argv);
int segd_cmd_bench(int argc, char **argv);
int segd_cmd_run(int argc, char **argv);
int segd_cmd_dev_broker(int argc, char **argv);
int segd_cmd_produce(int argc, char **argv);
int segd_cmd_snapshot(int argc, char **argv);
int segd_cmd_cache(int argc, char **argv);
int segd_cmd_replay(int argc, char **argv);
int segd_cmd_offsets(int argc, char **argv);
int segd_cmd_owner(int argc, char **argv);
int segd_cmd_identity(int argc, char **argv);
int segd_cmd_rebuild(int argc, char **argv);
int segd_cmd_version(int argc, char **argv);
/* segd's and its libraries' versions on f (cmd_version.c); an exit code */
int segd_version_print(FILE *f);


#endif
