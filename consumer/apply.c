/* The applier: every writer of input events (segd run, replay, rebuild,
 * backfill, the benchmarks) turns each event into one merge operand in one
 * store batch. Operands rather than a read and a put, because the DESIGN §3
 * join is order-free and idempotent: ingest never reads the store, and a
 * replayed or duplicated event changes nothing. The batch's outbox entry and
 * any retirement markers go into the same batch as the data and the offsets,
 * so the change stream and the policy learn exactly what was stored, and only
 * once it is. See apply.h. */
#include "consumer/apply.h"
#include "base/clock.h"
#include "core/record.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

segd_err_t segd_applier_init(segd_applier_t *a, segd_store_t *store)
{
    memset(a, 0, sizeof(*a));
    a->store = store;
    segd_profile_init(&a->scratch);
    segd_outbox_builder_init(&a->ob);
    return segd_batch_new(store, &a->batch);
}

void segd_applier_free(segd_applier_t *a)
{
    segd_batch_destroy(a->batch);
    segd_profile_free(&a->scratch);
    segd_buf_free(&a->operand);
    segd_outbox_builder_free(&a->ob);
    segd_buf_free(&a->outbox_value);
    segd_buf_free(&a->retire_value);
    free(a->retired);
    memset(a, 0, sizeof(*a));
}

void segd_applier_enable_outbox(segd_applier_t *a) { a->outbox = 1; }

void segd_applier_set_sync(segd_applier_t *a) { a->sync = 1; }

segd_err_t segd_applier_add_operand(segd_applier_t *a, const void *user, size_t user_len,
                                    const void *operand, size_t operand_len,
                                    size_t n_segments, const char *topic, int32_t partition,
                                    int64_t offset, int64_t event_ms)
{
    if (a->outbox) {
        segd_err_t err = segd_outbox_add(&a->ob, user, user_len, operand, operand_len, topic,
                                         partition, offset, event_ms);
        if (err)
            return err;
    }
    segd_batch_merge(a->batch, user, user_len, operand, operand_len);
    a->events++;
    a->segments += n_segments;
    return SEGD_OK;
}

static int is_user(const segd_event_t *ev, const char *id)
{
    return ev->user_id_len == strlen(id) && !memcmp(ev->user_id, id, ev->user_id_len);
}

int segd_event_is_control(const segd_event_t *ev)
{
    return is_user(ev, SEGD_CONTROL_RETIRE_USER) || is_user(ev, SEGD_CONTROL_RETIRE_PARTNER_USER);
}

/* The marker key a control event's i-th segment entry retires: the segment
 * id, or for a partner retirement the partner's key (core/profile.h). */
static int64_t control_key(const segd_event_t *ev, size_t i)
{
    return is_user(ev, SEGD_CONTROL_RETIRE_PARTNER_USER)
               ? segd_retire_key_of_partner(ev->segments[i].partner_id)
               : ev->segments[i].segment_id;
}

/* The marker a retirement of id at before_ms must write: the policy learns
 * a batch's retirements only once the batch is written, and in a batch the
 * last put of a key wins, so a later event with an earlier time would lower
 * on disk what an earlier one of the same batch raised (and a restart would
 * bring back what the running process had retired). */
static int64_t pending_retired_before(const segd_applier_t *a, int64_t id, int64_t before_ms)
{
    for (size_t i = 0; i < a->n_retired; i++)
        if (a->retired[i].segment_id == id && a->retired[i].retired_before_ms > before_ms)
            before_ms = a->retired[i].retired_before_ms;
    return before_ms;
}

/* A retirement through the log: its markers and a RETIRE outbox entry join
 * the pending batch (written atomically with the batch's offsets); the
 * policy learns them in segd_applier_flush once the batch is written. */
static segd_err_t add_retirement(segd_applier_t *a, const segd_event_t *ev)
{
    size_t n = ev->n_segments;
    segd_retirement_t *r = segd_array_grow(a->retired, &a->cap_retired, a->n_retired + n + 1,
                                           sizeof(*r));
    if (!r)
        return SEGD_ERR_NOMEM;
    a->retired = r;
    segd_retirement_t *mine = &r[a->n_retired];
    for (size_t i = 0; i < n; i++) {
        mine[i].segment_id = control_key(ev, i);
        mine[i].retired_before_ms = ev->ts_ms;
        segd_batch_retire(a->batch, mine[i].segment_id,
                          pending_retired_before(a, mine[i].segment_id, ev->ts_ms));
    }
    if (a->outbox && n) {
        segd_err_t err = segd_outbox_retire_value(mine, n, segd_wall_ms(), &a->retire_value);
        if (err)
            return err;
        segd_batch_outbox_append(a->batch, a->retire_value.data, a->retire_value.len);
    }
    a->n_retired += n;
    return SEGD_OK;
}

segd_err_t segd_applier_add_from(segd_applier_t *a, const segd_event_t *ev, const char *topic,
                                 int32_t partition, int64_t offset, int64_t event_ms)
{
    if (segd_store_fault_hit(a->store, SEGD_FAULT_APPLY))
        return SEGD_ERR_NOMEM;
    if (segd_event_is_control(ev))
        return add_retirement(a, ev);
    segd_err_t err = segd_event_to_profile(ev, segd_store_granularity(a->store), &a->scratch);
    if (!err)
        err = segd_record_encode(&a->scratch, &a->operand);
    if (err)
        return err;
    return segd_applier_add_operand(a, ev->user_id, ev->user_id_len, a->operand.data,
                                    a->operand.len, ev->n_segments, topic, partition, offset,
                                    event_ms);
}

segd_err_t segd_applier_add(segd_applier_t *a, const segd_event_t *ev)
{
    return segd_applier_add_from(a, ev, NULL, 0, 0, 0);
}


/* The outbox entry joins the batch once, even when the write is retried. */
static segd_err_t add_outbox_entry(segd_applier_t *a)
{
    if (!a->outbox || a->outbox_in_batch || a->ob.n_items == 0)
        return SEGD_OK;
    segd_err_t err = segd_outbox_finish(&a->ob, segd_wall_ms(), &a->outbox_value);
    if (err)
        return err;
    segd_batch_outbox_append(a->batch, a->outbox_value.data, a->outbox_value.len);
    a->outbox_in_batch = 1;
    return SEGD_OK;
}

segd_err_t segd_applier_seal(segd_applier_t *a) { return add_outbox_entry(a); }

segd_err_t segd_applier_flush(segd_applier_t *a, char *errstr, size_t errstr_size)
{
    if (segd_batch_count(a->batch) == 0)
        return SEGD_OK;
    segd_err_t err = add_outbox_entry(a);
    if (err)
        return segd_errf(err, errstr, errstr_size, "outbox entry: %s", segd_err_str(err));
    err = a->sync ? segd_store_write_sync(a->store, a->batch, errstr, errstr_size)
                  : segd_store_write(a->store, a->batch, errstr, errstr_size);
    if (!err) {
        segd_batch_clear(a->batch);
        segd_outbox_builder_reset(&a->ob);
        a->outbox_in_batch = 0;
        for (size_t i = 0; i < a->n_retired && !err; i++)
            err = segd_store_retire_applied(a->store, a->retired[i].segment_id,
                                            a->retired[i].retired_before_ms);
        a->n_retired = 0;
        if (err) /* written, and read back at the next open */
            return segd_errf(err, errstr, errstr_size, "retirement: out of memory");
    }
    return err;
}
