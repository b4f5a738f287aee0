/* Growable byte buffer; see buf.h. Capacity doubles from 64 bytes. */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

void segd_buf_free(segd_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

segd_err_t segd_buf_reserve(segd_buf_t *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return SEGD_OK;
    if (extra > SIZE_MAX / 2 - b->len)
        return SEGD_ERR_NOMEM;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra)
        cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d)
        return SEGD_ERR_NOMEM;
    b->data = d;
    b->cap = cap;
    return SEGD_OK;
}

segd_err_t segd_buf_append(segd_buf_t *b, const void *data, size_t n)
{
    segd_err_t err = segd_buf_reserve(b, n);
    if (err)
        return err;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    return SEGD_OK;
}

void *segd_array_grow(void *arr, size_t *cap, size_t need, size_t item_size)
{
    if (need <= *cap)
        return arr;
    size_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > SIZE_MAX / 2 / item_size)
            return NULL;
        c *= 2;
    }
    void *a = realloc(arr, c * item_size);
    if (a)
        *cap = c;
    return a;
}
