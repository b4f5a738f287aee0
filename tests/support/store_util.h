/* Test helpers: a small store for unit tests (8 MiB block cache, no free
 * space reserve) at a fixed clock, failing the test if it cannot open; and
 * a cmocka fixture of a fresh temporary directory, removed after the test. */
#ifndef SEGD_TEST_STORE_UTIL_H
#define SEGD_TEST_STORE_UTIL_H

#include <stdio.h>
#include <stdlib.h>

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

typedef struct test_dir {
    char dir[64];
} test_dir_t;

static inline int test_dir_setup(void **state)
{
    test_dir_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static inline int test_dir_teardown(void **state)
{
    test_dir_t *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

#endif
