/* Test helper: a small store for unit tests (8 MiB block cache, no free
 * space reserve) at a fixed clock; fails the test if it cannot open. */
#ifndef SEGD_TEST_STORE_UTIL_H
#define SEGD_TEST_STORE_UTIL_H

#include "app/app.h"
#include "store/store.h"

static inline segd_store_t *test_store_open(const char *dir, int64_t now_ms)
{
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = now_ms;
    o.block_cache_mb = 8;
    o.min_free_mb = 0;
    segd_store_t *s = NULL;
    char err[256];
    if (segd_store_open(&s, &o, err, sizeof(err)) != SEGD_OK)
        fail_msg("open %s: %s", dir, err);
    return s;
}

#endif
