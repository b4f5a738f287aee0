/* What libsegd-cache's facade (lib/api.c) and libsegd-tail's (lib/tail_api.c)
 * share: the table behind a segd_cache_t and the status mapping. Internal:
 * both libraries are built with hidden visibility, so none of this is
 * exported. */
#ifndef SEGD_LIB_CACHE_INT_H
#define SEGD_LIB_CACHE_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/err.h"
#include "cache/edge.h"
#include "wire/manifest.h"

struct segd_cache {
    segd_edge_t *edge;
    _Atomic uint64_t changes;
    /* the last loaded snapshot's manifest (for a snapshot of units, their
     * fold): where a tail starts each change partition; loaded = 0 before */
    segd_manifest_t manifest;
    int loaded;
};

/* segd's internal error code as a segd_cache_status_t. */
int segd_cache_status_of(segd_err_t err);

#endif
