/* Membership changes into outbox entries; see member_outbox.h. */
#include "consumer/member_outbox.h"

#include <string.h>

#include "base/clock.h"

void segd_member_outbox_init(segd_member_outbox_t *m)
{
    memset(m, 0, sizeof(*m));
    segd_outbox_builder_init(&m->gathered);
}

void segd_member_outbox_free(segd_member_outbox_t *m)
{
    segd_outbox_builder_free(&m->gathered);
    segd_buf_free(&m->value);
    segd_member_outbox_init(m);
}

void segd_member_outbox_reset(segd_member_outbox_t *m)
{
    segd_outbox_builder_reset(&m->gathered);
    m->appended = 0;
}

segd_err_t segd_member_outbox_flush(segd_member_outbox_t *m, segd_batch_t *b)
{
    if (!m->gathered.n_items)
        return SEGD_OK;
    segd_err_t err = segd_outbox_finish_members(&m->gathered, segd_wall_ms(), &m->value);
    if (err)
        return err;
    segd_batch_outbox_append(b, m->value.data, m->value.len);
    m->appended += m->gathered.n_items;
    segd_outbox_builder_reset(&m->gathered);
    return SEGD_OK;
}

segd_err_t segd_member_outbox_add(segd_member_outbox_t *m, segd_batch_t *b,
                                  const segd_ident_change_t *c)
{
    segd_err_t err = segd_outbox_add_member(&m->gathered, c->id, c->id_len, c->master,
                                            c->master_len, c->master_first_seen_ms, c->epoch_ms);
    if (!err && m->gathered.n_items >= SEGD_OUTBOX_MAX_MEMBERS)
        err = segd_member_outbox_flush(m, b);
    return err;
}
