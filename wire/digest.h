/* SHA-256 as lower-case hex, the checksum manifests carry and S3 requests
 * are signed with (OpenSSL's libcrypto). One implementation for memory and
 * for files streamed in 64 KiB blocks. */
#ifndef SEGD_DIGEST_H
#define SEGD_DIGEST_H

#include <stddef.h>
#include <stdio.h>

/* Writes 64 hex digits and a NUL into hex. */
void segd_sha256_hex(const void *data, size_t len, char hex[65]);
/* Hashes f from its current position to the end, then rewinds it to the
 * start. 0, or -1 when reading failed (errno set). */
int segd_sha256_file_hex(FILE *f, char hex[65]);

#endif
