/* Strict UTF-8 validation; see utf8.h. The table is RFC 3629 §4's
 * well-formed byte sequences: the second byte's range depends on the lead
 * byte (E0, ED, F0, F4 narrow it), every later byte is 80..BF. */
#include "base/utf8.h"

#include <stdint.h>

int segd_utf8_valid(const void *s, size_t len)
{
    const uint8_t *p = s, *end = p + len;
    while (p < end) {
        uint8_t c = *p++;
        if (c < 0x80)
            continue;
        size_t more;
        uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong below U+0800 */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates U+D800..U+DFFF */
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong below U+10000 */
            else if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else
            return 0; /* 80..C1 (continuation, overlong lead), F5..FF */
        if ((size_t)(end - p) < more || *p < lo || *p > hi)
            return 0;
        p++;
        for (size_t i = 1; i < more; i++, p++)
            if ((*p & 0xC0) != 0x80)
                return 0;
    }
    return 1;
}
