/* Seed workload generator; see seed.h. splitmix64 per user and per event keeps
 * every value a pure function of (seed, user, event). */
#include "workload/seed.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY_MS (86400LL * 1000)

struct segd_seed {
    segd_seed_opts_t o;
    uint64_t block_start;  /* first user of the current block */
    uint32_t block_n;      /* users in the current block */
    uint64_t cursor;       /* event index within the block */
    int64_t *ids;          /* block_n * per_user ids, shuffled per user */
    uint8_t *seen;         /* id_space bitmap scratch for sampling */
};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t *s, uint64_t n) { return splitmix(s) % n; }

void segd_seed_opts_default(segd_seed_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->seed = 42;
    o->users = 1000;
    o->events_per_user = 50;
    o->segments_per_event = 20;
    o->id_space = 82000;
    o->block_users = 1024;
}

void segd_seed_user_id(uint64_t u, char *buf, size_t cap)
{
    snprintf(buf, cap, "u%010" PRIu64, u);
}

static size_t per_user(const segd_seed_t *g)
{
    return (size_t)g->o.events_per_user * g->o.segments_per_event;
}

/* Draws per_user distinct ids for user u, in random order. */
static void sample_user(segd_seed_t *g, uint64_t u, int64_t *ids)
{
    uint64_t s = g->o.seed * 0x2545F4914F6CDD1Dull ^ (u + 1) * 0x9E3779B97F4A7C15ull;
    size_t k = per_user(g);
    for (size_t i = 0; i < k;) {
        int64_t id = (int64_t)below(&s, (uint64_t)g->o.id_space);
        if (g->seen[id >> 3] & (1u << (id & 7)))
            continue;
        g->seen[id >> 3] |= (uint8_t)(1u << (id & 7));
        ids[i++] = id;
    }
    for (size_t i = 0; i < k; i++)
        g->seen[ids[i] >> 3] &= (uint8_t)~(1u << (ids[i] & 7));
}

static void load_block(segd_seed_t *g)
{
    uint64_t left = g->o.users - g->block_start;
    g->block_n = (uint32_t)(left < g->o.block_users ? left : g->o.block_users);
    for (uint32_t i = 0; i < g->block_n; i++)
        sample_user(g, g->block_start + i, g->ids + i * per_user(g));
    g->cursor = 0;
}

segd_err_t segd_seed_new(segd_seed_t **out, const segd_seed_opts_t *o)
{
    if (o->id_space <= 0 || (uint64_t)o->events_per_user * o->segments_per_event >
                                (uint64_t)o->id_space || o->block_users == 0)
        return SEGD_ERR_INVALID;
    segd_seed_t *g = calloc(1, sizeof(*g));
    if (!g)
        return SEGD_ERR_NOMEM;
    g->o = *o;
    g->ids = malloc((size_t)o->block_users * per_user(g) * sizeof(*g->ids));
    g->seen = calloc((size_t)o->id_space / 8 + 1, 1);
    if (!g->ids || !g->seen) {
        segd_seed_destroy(g);
        return SEGD_ERR_NOMEM;
    }
    if (o->users)
        load_block(g);
    *out = g;
    return SEGD_OK;
}

void segd_seed_destroy(segd_seed_t *g)
{
    if (!g)
        return;
    free(g->ids);
    free(g->seen);
    free(g);
}

uint64_t segd_seed_total_events(const segd_seed_t *g)
{
    return g->o.users * g->o.events_per_user;
}

int segd_seed_next(segd_seed_t *g, segd_event_t *ev)
{
    if (g->block_start >= g->o.users)
        return 0;
    if (g->cursor == (uint64_t)g->block_n * g->o.events_per_user) {
        g->block_start += g->block_n;
        if (g->block_start >= g->o.users)
            return 0;
        load_block(g);
    }
    uint32_t ui = (uint32_t)(g->cursor % g->block_n);
    uint32_t ej = (uint32_t)(g->cursor / g->block_n);
    g->cursor++;
    uint64_t u = g->block_start + ui;
    uint64_t s = (g->o.seed ^ u * 0xD1B54A32D192ED03ull) + ej * 0x8CB92BA72F3D8DD7ull;
    static const int32_t ttl_days[] = {1, 7, 30, 60};
    char uid[32];
    segd_event_reset(ev);
    segd_seed_user_id(u, uid, sizeof(uid));
    segd_event_set_user(ev, uid, strlen(uid));
    ev->op = SEGD_OP_UPSERT;
    ev->ts_ms = g->o.now_ms - 1 - (int64_t)below(&s, 30 * DAY_MS);
    int32_t ttl = ttl_days[below(&s, 4)] * 86400;
    const int64_t *ids = g->ids + ui * per_user(g) + (size_t)ej * g->o.segments_per_event;
    for (uint32_t i = 0; i < g->o.segments_per_event; i++) {
        segd_seg_update_t up = {ids[i], ttl, 0, 0};
        if (segd_event_add_segment(ev, &up))
            return 0;
    }
    return 1;
}
