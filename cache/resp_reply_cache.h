/* The RESP front's cache of formatted replies, one per worker thread (no
 * locks): a range command's reply bytes, keyed by the bytes its caller
 * makes of (user, normalized arguments), kept with the edge stamp
 * (cache/edge.h) of the lookup it was computed from and the second until
 * which the clock cannot change it. A stored reply is served again only
 * while the user's stamp equals the stored one and the clock second is in
 * [the fill's second, valid until): outside that a change or an expiry may
 * have changed the answer.
 *
 * Memory: at most `budget` bytes of replies, keys and headers, plus a slot
 * array of about budget / 2 KiB pointers. Direct-mapped by the key's hash
 * (a colliding fill replaces the slot's reply) and a CLOCK hand that evicts
 * replies not served since it last passed while a fill would exceed the
 * budget. A reply above a quarter of the budget is not kept. */
#ifndef SEGD_RESP_REPLY_CACHE_H
#define SEGD_RESP_REPLY_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cache/edge.h"

typedef struct segd_reply_cache segd_reply_cache_t;

typedef struct segd_reply_cache_stats {
    uint64_t hits, misses, stale, fills, evictions;
    size_t bytes, replies;
} segd_reply_cache_stats_t;

/* A cache of budget bytes; budget 0 gives *out = NULL, which every other
 * function takes as an empty cache that keeps nothing. */
segd_err_t segd_reply_cache_new(segd_reply_cache_t **out, size_t budget);
void segd_reply_cache_free(segd_reply_cache_t *c);

/* The key's hash, for get and put. */
uint64_t segd_reply_cache_hash(const void *key, size_t klen);

/* The reply stored for key when it is still valid (a hit), else NULL (a
 * miss). Only when key is stored is the user's stamp taken from edge
 * (segd_edge_stamp, a shard probe) and compared; a stale reply is dropped.
 * The bytes stay valid until the next put or free. */
const uint8_t *segd_reply_cache_get(segd_reply_cache_t *c, const void *key, size_t klen,
                                    uint64_t hash, segd_edge_t *edge, const char *user,
                                    size_t ulen, size_t *len);

/* Keeps reply[0..len) for key, computed from a lookup stamped st and
 * unchanged by the clock while its second is below until_s. Best effort:
 * without memory or room it keeps nothing. */
void segd_reply_cache_put(segd_reply_cache_t *c, const void *key, size_t klen, uint64_t hash,
                          const segd_edge_stamp_t *st, int64_t until_s, const void *reply,
                          size_t len);

void segd_reply_cache_get_stats(const segd_reply_cache_t *c, segd_reply_cache_stats_t *st);

#endif
