/* Lower-case hex of bytes (digests, fingerprints in manifests and logs). */
#ifndef SEGD_HEX_H
#define SEGD_HEX_H

#include <stddef.h>

/* Writes 2*n hex digits and a NUL into out (room for 2*n + 1). */
void segd_hex(const void *data, size_t n, char *out);

#endif
