/* SegmentEvent validation and translation into merge operands (DESIGN §2-§3). */
#include "core/event.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/utf8.h"

void segd_limits_default(segd_limits_t *l)
{
    l->max_segments = 4096;
    l->max_user_id = SEGD_MAX_USER_ID;
    l->max_message = 1 << 20;
    l->max_clock_skew_ms = 600000;
}

void segd_event_init(segd_event_t *ev) { memset(ev, 0, sizeof(*ev)); }

void segd_event_free(segd_event_t *ev)
{
    free(ev->segments);
    segd_event_init(ev);
}

void segd_event_reset(segd_event_t *ev)
{
    ev->user_id[0] = 0;
    ev->user_id_len = 0;
    ev->ts_ms = 0;
    ev->op = SEGD_OP_UPSERT;
    ev->n_segments = 0;
    ev->source[0] = 0;
}

segd_err_t segd_event_set_user(segd_event_t *ev, const char *id, size_t len)
{
    if (len > SEGD_MAX_USER_ID)
        return SEGD_ERR_LIMIT;
    memcpy(ev->user_id, id, len);
    ev->user_id[len] = 0;
    ev->user_id_len = len;
    return SEGD_OK;
}

segd_err_t segd_event_add_segment(segd_event_t *ev, const segd_seg_update_t *u)
{
    segd_seg_update_t *s =
        segd_array_grow(ev->segments, &ev->cap_segments, ev->n_segments + 1, sizeof(*s));
    if (!s)
        return SEGD_ERR_NOMEM;
    ev->segments = s;
    ev->segments[ev->n_segments++] = *u;
    return SEGD_OK;
}

static int is_user(const segd_event_t *ev, const char *id)
{
    return ev->user_id_len == strlen(id) && !memcmp(ev->user_id, id, ev->user_id_len);
}

segd_err_t segd_event_validate(const segd_event_t *ev, const segd_limits_t *lim,
                               char *errstr, size_t errstr_size)
{
    if (ev->user_id_len == 0)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "empty user_id");
    if (ev->user_id_len > lim->max_user_id)
        return segd_errf(SEGD_ERR_LIMIT, errstr, errstr_size,
                         "user_id of %zu bytes exceeds %zu", ev->user_id_len,
                         lim->max_user_id);
    if (memchr(ev->user_id, 0, ev->user_id_len))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "user_id contains NUL");
    if (!segd_utf8_valid(ev->user_id, ev->user_id_len)) /* Avro strings are UTF-8 */
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "user_id is not valid UTF-8");
    if (ev->ts_ms <= 0)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "ts_ms must be > 0 (got %lld)", (long long)ev->ts_ms);
    if (ev->n_segments > lim->max_segments)
        return segd_errf(SEGD_ERR_LIMIT, errstr, errstr_size,
                         "%zu segments exceed %zu", ev->n_segments, lim->max_segments);
    /* the reserved id makes a store-wide retirement (DESIGN 3.2): only in
     * the form segd produces it, never as an ordinary producer's upsert */
    if (ev->op != SEGD_OP_REMOVE && (is_user(ev, SEGD_CONTROL_RETIRE_USER) ||
                                     is_user(ev, SEGD_CONTROL_RETIRE_PARTNER_USER)))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "user id %.*s is reserved for retirement control events, which are "
                         "op REMOVE", (int)ev->user_id_len, ev->user_id);
    if (ev->op == SEGD_OP_ERASE_USER && ev->n_segments)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "ERASE_USER carries segments");
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        if (u->segment_id < 0)
            return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                             "segment_id %lld < 0", (long long)u->segment_id);
        if (ev->op == SEGD_OP_UPSERT && u->ttl_s <= 0)
            return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                             "segment %lld: ttl_s must be > 0 for UPSERT",
                             (long long)u->segment_id);
    }
    return SEGD_OK;
}

segd_err_t segd_event_to_profile(const segd_event_t *ev, int64_t granularity_s,
                                 segd_profile_t *out)
{
    segd_profile_clear(out);
    if (ev->op == SEGD_OP_ERASE_USER) {
        out->erased_before_ms = ev->ts_ms;
        return SEGD_OK;
    }
    segd_err_t err = segd_profile_reserve(out, ev->n_segments);
    if (err)
        return err;
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        segd_entry_t e = {
            .segment_id = u->segment_id,
            .ts_ms = ev->ts_ms,
            .expiry_s = ev->op == SEGD_OP_UPSERT
                            ? segd_expiry_for(ev->ts_ms, u->ttl_s, granularity_s)
                            : 0,
            .flags = u->flags,
            .partner_id = u->partner_id,
        };
        out->entries[out->n++] = e;
    }
    segd_profile_normalize(out);
    return SEGD_OK;
}

const char *segd_op_name(segd_op_t op)
{
    switch (op) {
    case SEGD_OP_UPSERT: return "UPSERT";
    case SEGD_OP_REMOVE: return "REMOVE";
    case SEGD_OP_ERASE_USER: return "ERASE_USER";
    }
    return "?";
}

int segd_op_parse(const char *s, segd_op_t *op)
{
    static const segd_op_t ops[] = {SEGD_OP_UPSERT, SEGD_OP_REMOVE, SEGD_OP_ERASE_USER};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(s, segd_op_name(ops[i])) == 0) {
            *op = ops[i];
            return 0;
        }
    return -1;
}
