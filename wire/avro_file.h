/* Avro object container files (Avro 1.11 spec, "Object Container Files"),
 * written and read by hand for snapshots: records arrive already encoded
 * (change.h), blocks are deflate-compressed with zlib (the "deflate" codec
 * every Avro reader understands) and hashed with SHA-256 as they are
 * written, so a manifest can carry the file's checksum without reading it
 * back. */
#ifndef SEGD_AVRO_FILE_H
#define SEGD_AVRO_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/record.h"
#include "wire/digest.h"

typedef struct segd_ocf_writer segd_ocf_writer_t;

typedef struct segd_ocf_info {
    uint64_t records;
    uint64_t bytes;    /* file size */
    char sha256[65];   /* lower-case hex of the whole file */
} segd_ocf_info_t;

typedef enum segd_ocf_codec {
    SEGD_OCF_NULL,
    SEGD_OCF_DEFLATE,  /* "deflate": every Avro implementation reads it */
    SEGD_OCF_ZSTANDARD /* "zstandard": Java, Python (with zstandard), Rust, Go */
} segd_ocf_codec_t;

/* level: zlib level 0..9 (0 = "null" codec, no compression). */
segd_err_t segd_ocf_writer_open(segd_ocf_writer_t **out, const char *path,
                                const char *schema_json, int level, char *errstr,
                                size_t errstr_size);
/* Any codec; level is the codec's own (deflate 1..9, zstd 1..19). */
segd_err_t segd_ocf_writer_open_codec(segd_ocf_writer_t **out, const char *path,
                                      const char *schema_json, segd_ocf_codec_t codec,
                                      int level, char *errstr, size_t errstr_size);
/* The codec's name in the container header ("null", "deflate", "zstandard"). */
const char *segd_ocf_codec_name(segd_ocf_codec_t codec);
/* The buffer to append exactly one encoded record to, then call _commit. */
segd_buf_t *segd_ocf_writer_buf(segd_ocf_writer_t *w);
segd_err_t segd_ocf_writer_commit(segd_ocf_writer_t *w, char *errstr, size_t errstr_size);
/* Flushes the last block, fsyncs and closes; info may be NULL. Frees w even
 * on error. */
segd_err_t segd_ocf_writer_close(segd_ocf_writer_t *w, segd_ocf_info_t *info, char *errstr,
                                 size_t errstr_size);
/* Frees w and removes the file (error paths). */
void segd_ocf_writer_abort(segd_ocf_writer_t *w);

/* Reads a container file held in memory. It checks the magic, the codec
 * (null, deflate or zstandard) and every sync marker, and calls cb once per
 * block with the decompressed block bytes and its record count. cb decodes
 * the records and returns non-zero to stop; a -1 from cb is returned as
 * SEGD_ERR_CORRUPT. If schema_json is not NULL it receives a malloc'd copy
 * of the writer schema. */
typedef int (*segd_ocf_block_cb)(void *ctx, const uint8_t *block, size_t len, int64_t count);
segd_err_t segd_ocf_read(const uint8_t *data, size_t len, segd_ocf_block_cb cb, void *ctx,
                         char **schema_json, char *errstr, size_t errstr_size);

/* The writer schema of a container file held in memory, from its header
 * alone (before any block is read): *schema_json is malloc'd. */
segd_err_t segd_ocf_schema(const uint8_t *data, size_t len, char **schema_json, char *errstr,
                           size_t errstr_size);

/* Walks a container file's blocks without decompressing them (any codec):
 * the header, then per block a record count and a byte size that fit in
 * the file, followed by the sync marker. For files another library will
 * read: libavro trusts block sizes and allocates them. */
segd_err_t segd_ocf_check_blocks(const uint8_t *data, size_t len, char *errstr,
                                 size_t errstr_size);

#endif
