/* libFuzzer target: everything segd decodes from outside its own process
 * after issue 4 — change events as a cache reads them from Kafka (framed),
 * outbox entries, and Avro container files of snapshot records. The first
 * byte picks the decoder. A change event that decodes must survive an
 * encode/decode round trip unchanged; so must a MemberEvent (the change
 * topic's second kind, read by the same framing). */
#include <stdlib.h>
#include <string.h>

#include "wire/avro_file.h"
#include "wire/change.h"
#include "wire/change_frame.h"
#include "wire/member.h"
#include "wire/outbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void change(const uint8_t *data, size_t size)
{
    const uint8_t *body;
    size_t blen;
    segd_change_t c, d;
    segd_buf_t out = {0};
    segd_change_init(&c);
    segd_change_init(&d);
    if (segd_change_unframe(data, size, -1, &body, &blen) != SEGD_OK) {
        body = data;
        blen = size;
    }
    if (segd_change_decode(body, blen, &c) == SEGD_OK) {
        if (segd_change_encode(&c, &out) != SEGD_OK ||
            segd_change_decode(out.data, out.len, &d) != SEGD_OK || d.profile.n != c.profile.n ||
            d.n_sources != c.n_sources || d.n_retirements != c.n_retirements ||
            (c.profile.n &&
             memcmp(c.profile.entries, d.profile.entries, c.profile.n * sizeof(segd_entry_t))))
            abort();
    }
    segd_buf_free(&out);
    segd_change_free(&c);
    segd_change_free(&d);
    /* the same bytes as a change topic reader of both kinds sees them */
    segd_frame_kind_t kind;
    segd_member_t m, n;
    if (segd_change_unframe_kind(data, size, -1, -1, &body, &blen, &kind) == SEGD_OK &&
        kind == SEGD_FRAME_MEMBER && segd_member_decode(body, blen, &m) == SEGD_OK) {
        if (segd_member_encode(&m, &out) != SEGD_OK ||
            segd_member_decode(out.data, out.len, &n) != SEGD_OK || n.id_len != m.id_len ||
            memcmp(n.id, m.id, m.id_len) || n.master_len != m.master_len ||
            memcmp(n.master, m.master, m.master_len) || n.epoch_ms != m.epoch_ms ||
            n.master_first_seen_ms != m.master_first_seen_ms || segd_member_wins(&m, &n) ||
            segd_member_wins(&n, &m))
            abort();
        segd_buf_free(&out);
    }
}

static int block(void *ctx, const uint8_t *blk, size_t len, int64_t count)
{
    segd_profile_t *p = ctx;
    const uint8_t *pos = blk, *end = blk + len;
    for (int64_t i = 0; i < count; i++) {
        const char *user;
        size_t ulen;
        if (segd_snaprec_decode(&pos, end, &user, &ulen, p) != SEGD_OK)
            return -1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t which = data[0] % 3;
    data++, size--;
    if (which == 0) {
        change(data, size);
    } else if (which == 1) {
        segd_outbox_entry_t e;
        segd_outbox_entry_init(&e);
        segd_outbox_decode(data, size, &e);
        segd_outbox_entry_free(&e);
    } else {
        segd_profile_t p;
        segd_profile_init(&p);
        char err[128], *schema = NULL;
        segd_ocf_read(data, size, block, &p, &schema, err, sizeof(err));
        free(schema);
        segd_profile_free(&p);
    }
    return 0;
}
