/* SnapshotNativeRecord Avro binary; see snap_native.h. Both fields are
 * Avro length-prefixed (zigzag varint) byte strings, in schema order. */
#include "wire/snap_native.h"

#include <string.h>

#include "base/utf8.h"
#include "base/varint.h"
#include "core/record.h"

static void put_bytes(segd_buf_t *b, const void *p, size_t n)
{
    b->len += segd_zz_put(b->data + b->len, (int64_t)n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

segd_err_t segd_snapnat_append(const char *user, size_t user_len, const uint8_t *rec,
                               size_t rec_len, segd_buf_t *out)
{
    if (segd_buf_reserve(out, 2 * SEGD_ZZ_MAX + user_len + rec_len))
        return SEGD_ERR_NOMEM;
    put_bytes(out, user, user_len);
    put_bytes(out, rec, rec_len);
    return SEGD_OK;
}

segd_err_t segd_snapnat_encode(const char *user, size_t user_len, const segd_profile_t *p,
                               segd_buf_t *tmp, segd_buf_t *out)
{
    segd_err_t err = segd_record_encode(p, tmp);
    return err ? err : segd_snapnat_append(user, user_len, tmp->data, tmp->len, out);
}

void segd_snapnat_writer_init(segd_snapnat_writer_t *w, const segd_prune_t *rule, int copy)
{
    memset(w, 0, sizeof(*w));
    w->rule = *rule;
    w->copy = copy;
    segd_profile_init(&w->p);
}

void segd_snapnat_writer_free(segd_snapnat_writer_t *w)
{
    segd_profile_free(&w->p);
    segd_buf_free(&w->tmp);
}

/* The slow path: decode, prune, copy if pruning changed nothing. */
static segd_err_t export_decoded(segd_snapnat_writer_t *w, const char *user, size_t user_len,
                                 const uint8_t *value, size_t value_len, segd_buf_t *out,
                                 uint64_t *entries, int *written)
{
    segd_profile_t *p = &w->p;
    segd_err_t err = segd_record_decode(value, value_len, p);
    if (err)
        return err;
    size_t n = p->n;
    int64_t erased = p->erased_before_ms;
    segd_profile_prune(p, &w->rule);
    if (!p->n && !p->erased_before_ms)
        return SEGD_OK; /* nothing left: the avro format skips the user too */
    /* prune only removes, so equal counts and marker mean an unchanged profile */
    int copy = w->copy && p->n == n && p->erased_before_ms == erased;
    err = copy ? segd_snapnat_append(user, user_len, value, value_len, out)
               : segd_snapnat_encode(user, user_len, p, &w->tmp, out);
    if (err)
        return err;
    if (copy)
        w->copied++;
    else
        w->encoded++;
    *entries = p->n;
    *written = 1;
    return SEGD_OK;
}

segd_err_t segd_snapnat_export(segd_snapnat_writer_t *w, const char *user, size_t user_len,
                               const uint8_t *value, size_t value_len, segd_buf_t *out,
                               uint64_t *entries, int *written)
{
    *written = 0;
    *entries = 0;
    segd_record_head_t h;
    if (!w->copy || segd_record_head(value, value_len, &h) ||
        !segd_record_head_unpruned(&h, &w->rule))
        return export_decoded(w, user, user_len, value, value_len, out, entries, written);
    if (!h.n && !h.erased_before_ms)
        return SEGD_OK;
    segd_err_t err = segd_snapnat_append(user, user_len, value, value_len, out);
    if (err)
        return err;
    w->copied++;
    *entries = h.n;
    *written = 1;
    return SEGD_OK;
}

static int get_len(const uint8_t **pos, const uint8_t *end, size_t *len)
{
    int64_t n;
    if (segd_zz_get(pos, end, &n) || n < 0 || n > end - *pos)
        return -1;
    *len = (size_t)n;
    return 0;
}

segd_err_t segd_snapnat_decode_raw(const uint8_t **pos, const uint8_t *end, const char **user,
                                   size_t *user_len, const uint8_t **rec, size_t *rec_len)
{
    const uint8_t *p = *pos;
    *user = NULL;
    if (get_len(&p, end, user_len))
        return SEGD_ERR_CORRUPT;
    const char *u = (const char *)p;
    p += *user_len;
    /* Avro strings are UTF-8: stock readers refuse anything else */
    if (!segd_utf8_valid(u, *user_len))
        return SEGD_ERR_CORRUPT;
    *user = u;
    if (get_len(&p, end, rec_len))
        return SEGD_ERR_CORRUPT;
    *rec = p;
    *pos = p + *rec_len;
    return SEGD_OK;
}

segd_err_t segd_snapnat_decode(const uint8_t **pos, const uint8_t *end, const char **user,
                               size_t *user_len, segd_profile_t *p)
{
    const uint8_t *cur = *pos, *rec;
    size_t rec_len;
    segd_err_t err = segd_snapnat_decode_raw(&cur, end, user, user_len, &rec, &rec_len);
    if (!err)
        err = segd_record_decode(rec, rec_len, p);
    for (size_t i = 0; !err && i < p->n; i++)
        if (p->entries[i].expiry_s < 0) /* SnapshotRecord's rule: 0 = tombstone */
            err = SEGD_ERR_CORRUPT;
    if (!err)
        *pos = cur;
    return err;
}
