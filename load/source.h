/* A file's bytes as a stream, decompressed when its magic says gzip
 * (1f 8b; every member of a multi-member file) or zstd (28 b5 2f fd; every
 * frame); anything else is read as it is. A cut-off stream is an error, not
 * a short file. Used by the reader's producer thread only. */
#ifndef SEGD_LOAD_SOURCE_H
#define SEGD_LOAD_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

typedef enum segd_source_kind {
    SEGD_SOURCE_PLAIN,
    SEGD_SOURCE_GZIP,
    SEGD_SOURCE_ZSTD,
} segd_source_kind_t;

typedef struct segd_source segd_source_t;

/* Opens path (a regular file) and detects its compression. */
segd_err_t segd_source_open(segd_source_t **out, const char *path, char *errstr,
                            size_t errstr_size);
void segd_source_close(segd_source_t *s);

segd_source_kind_t segd_source_kind(const segd_source_t *s);
const char *segd_source_kind_name(segd_source_kind_t k); /* "plain", "gzip", "zstd" */

/* Reads up to cap decompressed bytes: > 0 bytes, 0 at the clean end, -1 on
 * an error (errstr: "truncated gzip stream", "corrupt zstd data: ...", a read
 * error); after -1 the source only returns -1. */
ssize_t segd_source_read(segd_source_t *s, void *buf, size_t cap, char *errstr,
                         size_t errstr_size);

/* Bytes of the file consumed so far (compressed bytes for gzip and zstd). */
uint64_t segd_source_consumed(const segd_source_t *s);
/* The file's size in bytes. */
uint64_t segd_source_size(const segd_source_t *s);

#endif
