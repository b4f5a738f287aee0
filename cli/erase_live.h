/* `segd erase --brokers ...`: erasure through the log while `segd run` serves
 * the store (DESIGN 3.2): ERASE_USER events produced to the input topic, then
 * a bounded wait until a store shows them applied. The events are framed as
 * segd run reads its input (its config's input.format, or --framing): a
 * guess would be dead-lettered, so without either nothing is sent. */
#ifndef SEGD_ERASE_LIVE_H
#define SEGD_ERASE_LIVE_H

#include <stdint.h>

typedef struct segd_erase_live {
    const char *brokers;  /* over the config's */
    const char *topic;    /* default: the config's first topic */
    const char *config;   /* segd run's configuration file, or NULL */
    const char *framing;  /* over the config's input.format, or NULL */
    const char *db;       /* the store to watch (read-only), or NULL: no wait */
    int64_t at_ms;        /* 0: now */
    int64_t wait_s;       /* how long to wait for the store */
} segd_erase_live_t;

/* Produces one ERASE_USER per user (users[0..n)), keyed and partitioned as
 * segd's input.partitioner places the user, in input.format's framing, and
 * waits for every delivery; then, with a db, until the store holds each
 * erasure (erased_before_ms >= at_ms) or wait_s passes. The framing comes
 * from framing, else input.format of config or SEGD_INPUT_FORMAT; with none
 * of them it refuses (exit 2) and sends nothing. Without a db the effect is
 * not checked: it says so and returns SEGD_EXIT_UNCHECKED. Returns a CLI
 * exit code after saying what happened on stdout/stderr. */
int segd_erase_live(const segd_erase_live_t *a, char *const *users, int n);

/* `segd segments retire --brokers`: the same rules for its framing and
 * exit code, and one control event
 * (SEGD_CONTROL_RETIRE_USER, apply.h) retiring ids[0..n) before at_ms,
 * produced to every partition of the topic so that each store applies it
 * with the offsets of the partitions it owns. With a db it then waits until
 * the store lists every retirement. ids are marker keys (core/record.h):
 * all segment ids, or all partners' keys (SEGD_CONTROL_RETIRE_PARTNER_USER).
 * Returns a CLI exit code. */
int segd_retire_live(const segd_erase_live_t *a, const int64_t *ids, int n);

#endif
