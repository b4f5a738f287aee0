/* libFuzzer target: SegmentEvent decoding in every framing. Whatever the
 * hand-written fast path accepts, avro-c's generic values accept identically.
 * (The fast path is stricter: it rejects over-long varints and ints out of
 * range, which avro-c silently truncates.) */
#include <stdlib.h>
#include <string.h>

#include "wire/avro_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Process-lifetime decoders, made once outside any run (a harness's state). */
static segd_avro_codec_t *fast, *slow;
static segd_event_t a, b;

static void init_once(void)
{
    char err[256];
    if (fast)
        return;
    if (segd_avro_codec_new(&fast, NULL, NULL, err, sizeof(err)) ||
        segd_avro_codec_new(&slow, NULL, NULL, err, sizeof(err)))
        abort();
    segd_avro_codec_set_generic_only(slow, 1);
    segd_event_init(&a);
    segd_event_init(&b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    init_once();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    init_once(); /* the corpus replayer calls no initializer */
    segd_avro_decode(fast, SEGD_FRAMING_AUTO, data, size, &a, err, sizeof(err));
    segd_err_t ea = segd_avro_decode(fast, SEGD_FRAMING_RAW, data, size, &a, err, sizeof(err));
    segd_err_t eb = segd_avro_decode(slow, SEGD_FRAMING_RAW, data, size, &b, err, sizeof(err));
    if (ea == SEGD_OK && (eb != SEGD_OK || a.n_segments != b.n_segments ||
                          a.ts_ms != b.ts_ms || a.op != b.op || strcmp(a.user_id, b.user_id) ||
                          strcmp(a.source, b.source)))
        abort();
    for (size_t i = 0; ea == SEGD_OK && i < a.n_segments; i++)
        if (a.segments[i].segment_id != b.segments[i].segment_id ||
            a.segments[i].ttl_s != b.segments[i].ttl_s || a.segments[i].flags != b.segments[i].flags ||
            a.segments[i].partner_id != b.segments[i].partner_id)
            abort();
    return 0;
}
