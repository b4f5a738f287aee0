/* libFuzzer target: the profile record decoder on untrusted bytes. Odd-length
 * inputs are decoded as they are; even-length ones get a valid XXH32 appended
 * so the fuzzer reaches the parser behind the checksum. A decoded record must
 * survive an encode/decode round trip unchanged. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segd_profile_t p;
    segd_buf_t out = {0};
    segd_profile_init(&p);
    uint8_t *in = malloc(size + 4);
    if (!in)
        return 0;
    memcpy(in, data, size);
    if (size % 2 == 0) {
        uint32_t h = XXH32(in, size, 0);
        for (int i = 0; i < 4; i++)
            in[size++] = (uint8_t)(h >> (8 * i));
    }
    if (segd_record_decode(in, size, &p) == SEGD_OK && segd_record_encode(&p, &out) == SEGD_OK) {
        segd_profile_t q;
        segd_profile_init(&q);
        if (segd_record_decode(out.data, out.len, &q) != SEGD_OK || q.n != p.n ||
            (p.n && memcmp(p.entries, q.entries, p.n * sizeof(*p.entries))))
            abort();
        segd_profile_free(&q);
    }
    free(in);
    segd_buf_free(&out);
    segd_profile_free(&p);
    return 0;
}
