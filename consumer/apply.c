/* Event -> operand -> batch; see apply.h. */
#include "apply.h"

#include <string.h>

segd_err_t segd_applier_init(segd_applier_t *a, segd_store_t *store)
{
    memset(a, 0, sizeof(*a));
    a->store = store;
    segd_profile_init(&a->scratch);
    return segd_batch_new(store, &a->batch);
}

void segd_applier_free(segd_applier_t *a)
{
    segd_batch_destroy(a->batch);
    segd_profile_free(&a->scratch);
    segd_buf_free(&a->operand);
    memset(a, 0, sizeof(*a));
}

segd_err_t segd_applier_add(segd_applier_t *a, const segd_event_t *ev)
{
    segd_err_t err = segd_event_to_profile(ev, segd_store_granularity(a->store), &a->scratch);
    if (!err)
        err = segd_record_encode(&a->scratch, &a->operand);
    if (err)
        return err;
    segd_batch_merge(a->batch, ev->user_id, ev->user_id_len, a->operand.data,
                     a->operand.len);
    a->events++;
    a->segments += ev->n_segments;
    return SEGD_OK;
}

segd_err_t segd_applier_flush(segd_applier_t *a, char *errstr, size_t errstr_size)
{
    if (segd_batch_count(a->batch) == 0)
        return SEGD_OK;
    segd_err_t err = segd_store_write(a->store, a->batch, errstr, errstr_size);
    if (!err)
        segd_batch_clear(a->batch);
    return err;
}
