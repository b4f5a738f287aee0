/* The consumer group's static membership id (group.instance.id) kept in the
 * store's meta family. It is generated once per store, so a restarted
 * `segd run` on the same store takes its old place in the group. The
 * pipeline (consumer/pipeline.c) reads it at start-up. */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "store/store.h"
#include "store/store_impl.h"

#define INSTANCE_ID_KEY "instance_id"

segd_err_t segd_store_instance_id(segd_store_t *s, char *out, size_t out_size, char *errstr,
                                  size_t n)
{
    char *v = NULL;
    size_t vlen = 0;
    segd_err_t err =
        segd_store_meta_get(s, INSTANCE_ID_KEY, strlen(INSTANCE_ID_KEY), &v, &vlen, errstr, n);
    if (err == SEGD_OK) {
        int fits = vlen > 0 && vlen < out_size;
        if (fits)
            snprintf(out, out_size, "%.*s", (int)vlen, v);
        rocksdb_free(v);
        return fits ? SEGD_OK
                    : segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad %s in meta", INSTANCE_ID_KEY);
    }
    if (err != SEGD_ERR_NOTFOUND)
        return err;
    if (s->read_only)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "no %s in a read-only store",
                         INSTANCE_ID_KEY);
    uint8_t r[8];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return segd_errf(SEGD_ERR_IO, errstr, n, "getrandom failed");
    char id[32];
    int len = snprintf(id, sizeof(id), "segd-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1],
                       r[2], r[3], r[4], r[5], r[6], r[7]);
    if ((size_t)len >= out_size)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "instance id buffer too small");
    if ((err = segd_store_put_meta(s, s->wopts, INSTANCE_ID_KEY, id, (size_t)len, 0, errstr, n)))
        return err;
    memcpy(out, id, (size_t)len + 1);
    return SEGD_OK;
}
