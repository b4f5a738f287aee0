/* The "seed" workload of DESIGN §8, deterministic from a seed: U users, each
 * receiving E UPSERT events of S segments (E*S distinct ids per user, uniform
 * in [0, id_space)); each event's ts uniform over the 30 days before now and
 * one ttl from {1, 7, 30, 60} days. Users are generated in blocks whose events
 * are interleaved, so consecutive events mostly hit different users as in a
 * real stream. Used by `segd generate`, `segd produce`, the demo and benches. */
#ifndef SEGD_SEED_H
#define SEGD_SEED_H

#include <stdint.h>

#include "core/event.h"

typedef struct segd_seed_opts {
    uint64_t seed;
    uint64_t users;          /* U */
    uint32_t events_per_user;   /* default 50 */
    uint32_t segments_per_event; /* default 20 */
    int64_t id_space;        /* default 82000 */
    int64_t now_ms;          /* events lie in [now - 30 days, now) */
    uint32_t block_users;    /* users interleaved together; default 1024 */
} segd_seed_opts_t;

typedef struct segd_seed segd_seed_t;

void segd_seed_opts_default(segd_seed_opts_t *o);
segd_err_t segd_seed_new(segd_seed_t **out, const segd_seed_opts_t *o);
void segd_seed_destroy(segd_seed_t *g);

/* Fills ev with the next event; returns 0 when the workload is exhausted. */
int segd_seed_next(segd_seed_t *g, segd_event_t *ev);
uint64_t segd_seed_total_events(const segd_seed_t *g);

/* The user id of user index u ("u" + 10 digits). */
void segd_seed_user_id(uint64_t u, char *buf, size_t cap);

#endif
