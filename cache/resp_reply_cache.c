/* The RESP front's per-worker reply cache; see resp_reply_cache.h. One
 * allocation per reply (header, key, reply bytes) in a direct-mapped slot
 * array; the CLOCK hand walks the slots. */
#include "cache/resp_reply_cache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct item {
    uint64_t hash;
    segd_edge_stamp_t st; /* of the lookup the reply came from */
    int64_t until_s;      /* the clock second from which it may be wrong */
    uint32_t klen, ref;   /* ref: served since the hand last passed */
    size_t len;
    /* key[klen], then reply[len] */
} item_t;

struct segd_reply_cache {
    item_t **slots;
    size_t mask, hand;
    size_t budget, bytes, replies;
    segd_reply_cache_stats_t st;
};

static uint8_t *item_key(item_t *it) { return (uint8_t *)(it + 1); }
static uint8_t *item_reply(item_t *it) { return item_key(it) + it->klen; }
static size_t item_bytes(const item_t *it) { return sizeof(*it) + it->klen + it->len; }

segd_err_t segd_reply_cache_new(segd_reply_cache_t **out, size_t budget)
{
    *out = NULL;
    if (!budget)
        return SEGD_OK;
    segd_reply_cache_t *c = calloc(1, sizeof(*c));
    if (!c)
        return SEGD_ERR_NOMEM;
    /* a slot per 2 KiB of budget: range replies of a few hundred segments
     * and up (the ones worth keeping) rarely collide */
    size_t n = 64;
    while (n < budget / 2048 && n < ((size_t)1 << 24))
        n *= 2;
    c->slots = calloc(n, sizeof(*c->slots));
    if (!c->slots) {
        free(c);
        return SEGD_ERR_NOMEM;
    }
    c->mask = n - 1;
    c->budget = budget;
    *out = c;
    return SEGD_OK;
}

static void drop(segd_reply_cache_t *c, size_t i)
{
    item_t *it = c->slots[i];
    c->bytes -= item_bytes(it);
    c->replies--;
    free(it);
    c->slots[i] = NULL;
}

void segd_reply_cache_free(segd_reply_cache_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i <= c->mask; i++)
        if (c->slots[i])
            drop(c, i);
    free(c->slots);
    free(c);
}

uint64_t segd_reply_cache_hash(const void *key, size_t klen) { return XXH3_64bits(key, klen); }

static int stamp_eq(const segd_edge_stamp_t *a, const segd_edge_stamp_t *b)
{
    return a->profile == b->profile && a->retirements == b->retirements;
}

const uint8_t *segd_reply_cache_get(segd_reply_cache_t *c, const void *key, size_t klen,
                                    uint64_t hash, segd_edge_t *edge, const char *user,
                                    size_t ulen, size_t *len)
{
    if (!c)
        return NULL;
    size_t i = hash & c->mask;
    item_t *it = c->slots[i];
    if (!it || it->hash != hash || it->klen != klen || memcmp(item_key(it), key, klen)) {
        c->st.misses++;
        return NULL;
    }
    segd_edge_stamp_t now;
    segd_edge_stamp(edge, user, ulen, &now);
    /* the live entries are those of the fill while the record and the
     * retirements are the same and the clock has neither gone back past
     * the fill's second (an expired entry would live again) nor reached
     * the first expiry among them */
    if (!stamp_eq(&now, &it->st) || now.now_s < it->st.now_s || now.now_s >= it->until_s) {
        drop(c, i);
        c->st.stale++;
        c->st.misses++;
        return NULL;
    }
    it->ref = 1;
    c->st.hits++;
    *len = it->len;
    return item_reply(it);
}

void segd_reply_cache_put(segd_reply_cache_t *c, const void *key, size_t klen, uint64_t hash,
                          const segd_edge_stamp_t *st, int64_t until_s, const void *reply,
                          size_t len)
{
    if (!c || until_s <= st->now_s || klen > UINT32_MAX)
        return;
    size_t need = sizeof(item_t) + klen + len;
    if (need > c->budget / 4)
        return;
    size_t i = hash & c->mask;
    if (c->slots[i])
        drop(c, i);
    /* CLOCK eviction: a reply served since the hand last passed it gets
     * another round. Two full turns free every slot, so the loop ends. */
    while (c->bytes + need > c->budget) {
        item_t *v = c->slots[c->hand];
        if (v && v->ref) {
            v->ref = 0;
        } else if (v) {
            drop(c, c->hand);
            c->st.evictions++;
        }
        c->hand = (c->hand + 1) & c->mask;
    }
    item_t *it = malloc(need);
    if (!it)
        return;
    *it = (item_t){.hash = hash, .st = *st, .until_s = until_s, .klen = (uint32_t)klen,
                   .len = len};
    memcpy(item_key(it), key, klen);
    memcpy(item_reply(it), reply, len);
    c->slots[i] = it;
    c->bytes += need;
    c->replies++;
    c->st.fills++;
}

void segd_reply_cache_get_stats(const segd_reply_cache_t *c, segd_reply_cache_stats_t *st)
{
    if (!c) {
        memset(st, 0, sizeof(*st));
        return;
    }
    *st = c->st;
    st->bytes = c->bytes;
    st->replies = c->replies;
}
