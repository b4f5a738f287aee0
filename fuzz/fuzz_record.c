/* libFuzzer target: the profile record decoder on untrusted bytes. A decoded
 * record must re-encode to exactly the input (the encoding is canonical). */
#include <stdlib.h>
#include <string.h>

#include "store/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segd_profile_t p;
    segd_buf_t out = {0};
    segd_profile_init(&p);
    if (segd_record_decode(data, size, &p) == SEGD_OK && segd_record_encode(&p, &out) == SEGD_OK) {
        segd_profile_t q;
        segd_profile_init(&q);
        if (segd_record_decode(out.data, out.len, &q) != SEGD_OK || q.n != p.n ||
            (p.n && memcmp(p.entries, q.entries, p.n * sizeof(*p.entries))))
            abort();
        segd_profile_free(&q);
    }
    segd_buf_free(&out);
    segd_profile_free(&p);
    return 0;
}
