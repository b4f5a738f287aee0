/* Hex encoding; see hex.h. */
#include "base/hex.h"

#include <stdint.h>

void segd_hex(const void *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *d = data;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = 0;
}
