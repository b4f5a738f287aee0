/* Growable byte buffer: the one owner of encoded bytes between modules
 * (records, Avro bodies, outbox values, HTTP bodies). data is malloc'd and
 * owned by the buffer; a zeroed buffer is empty and valid. */
#ifndef SEGD_BUF_H
#define SEGD_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct segd_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} segd_buf_t;

void segd_buf_free(segd_buf_t *b);
/* Makes room for extra more bytes after len (SEGD_ERR_NOMEM, b unchanged). */
segd_err_t segd_buf_reserve(segd_buf_t *b, size_t extra);
/* Appends n bytes. */
segd_err_t segd_buf_append(segd_buf_t *b, const void *data, size_t n);

/* Makes room for need items of item_size bytes in a malloc'd array whose
 * capacity is *cap (doubling from 8). Returns the array, moved or not, and
 * updates *cap; NULL when out of memory (the old array and *cap stay). */
void *segd_array_grow(void *arr, size_t *cap, size_t need, size_t item_size);

#endif
