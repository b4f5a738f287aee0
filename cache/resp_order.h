/* The order in which a redis-server lists a sorted set's members: by
 * score, then by the member's bytes. Here members are segment ids printed
 * in decimal ("10" sorts before "9") and scores are expires_at seconds as
 * Redis holds them (doubles). Used by the RESP front's range commands
 * (cache/resp_zset.c); no allocation while sorting: scratch is reserved
 * first, and kept for the next answer. One per thread. */
#ifndef SEGD_RESP_ORDER_H
#define SEGD_RESP_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/profile.h"

typedef struct segd_resp_order {
    uint32_t *order; /* in holds entry indices in id order; out receives them in Redis's order. */
    uint32_t *lex;   /* the rest is scratch */
    uint64_t *keys, *keys_tmp;
    void *items, *tmp;
    size_t cap;
} segd_resp_order_t; /* zeroed = empty */

/* Room for n entries (SEGD_ERR_NOMEM). */
segd_err_t segd_resp_order_reserve(segd_resp_order_t *o, size_t n);
/* Sorts o->order[0..n), indices into ents (which is sorted by segment id,
 * as segd_edge_lookup returns it), into Redis's order. n <= reserved. */
void segd_resp_order_sort(segd_resp_order_t *o, const segd_entry_t *ents, size_t n);
void segd_resp_order_free(segd_resp_order_t *o);

#endif
