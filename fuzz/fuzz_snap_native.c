/* libFuzzer target: native snapshot records (wire/snap_native.h) as a cache
 * or `segd snapshot verify` reads them. The first byte picks the input: an
 * Avro container file of SnapshotNativeRecord (even), or a bare sequence of
 * records (odd). A record that decodes must survive an encode/decode round
 * trip unchanged; nothing may crash or read outside the input. */
#include <stdlib.h>
#include <string.h>

#include "wire/avro_file.h"
#include "wire/snap_native.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const char *user, size_t ulen, const segd_profile_t *p)
{
    segd_buf_t tmp = {0}, out = {0};
    segd_profile_t q;
    segd_profile_init(&q);
    const uint8_t *pos;
    const char *u2;
    size_t ulen2;
    if (segd_snapnat_encode(user, ulen, p, &tmp, &out) != SEGD_OK)
        abort();
    pos = out.data;
    if (segd_snapnat_decode(&pos, out.data + out.len, &u2, &ulen2, &q) != SEGD_OK ||
        pos != out.data + out.len || ulen2 != ulen || memcmp(u2, user, ulen) ||
        q.n != p->n || q.erased_before_ms != p->erased_before_ms ||
        (p->n && memcmp(q.entries, p->entries, p->n * sizeof(*p->entries))))
        abort();
    segd_profile_free(&q);
    segd_buf_free(&tmp);
    segd_buf_free(&out);
}

static int records(void *ctx, const uint8_t *blk, size_t len, int64_t count)
{
    segd_profile_t *p = ctx;
    const uint8_t *pos = blk, *end = blk + len;
    for (int64_t i = 0; count < 0 || i < count; i++) {
        const char *user;
        size_t ulen;
        if (count < 0 && pos == end)
            return 0;
        if (segd_snapnat_decode(&pos, end, &user, &ulen, p) != SEGD_OK)
            return -1;
        round_trip(user, ulen, p);
    }
    return pos == end ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int bare = data[0] & 1;
    data++, size--;
    segd_profile_t p;
    segd_profile_init(&p);
    if (bare) {
        records(&p, data, size, -1);
    } else {
        char err[128], *schema = NULL;
        segd_ocf_read(data, size, records, &p, &schema, err, sizeof(err));
        free(schema);
    }
    segd_profile_free(&p);
    return 0;
}
