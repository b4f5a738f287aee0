/* What a decoded event becomes in its slot's chunk (reader_int.h): the
 * event validated, its time checked against the store's policy and its merge
 * operand encoded into the slot's arena, or the record reported as refused.
 * The formats call it on the workers, and on the producer thread for the
 * fallback OCF path; it calls neither of them. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/record.h"
#include "load/reader_int.h"

/* Reports a refused record as file:line or file:#record, as backfill always did. */
void segd_loader_report(worker_t *w, slot_t *s, int64_t no, const char *why)
{
    fprintf(w->l->o->errors, "%s:%s%lld: %s\n", s->file, s->kind == UNIT_JSON ? "" : "#",
            (long long)no, why);
    s->skipped++;
}

/* Validates w->ev, checks its time and appends its operand to the chunk.
 * -1 only when out of memory. */
int segd_loader_add_event(worker_t *w, slot_t *s, int64_t no)
{
    const segd_load_opts_t *o = w->l->o;
    segd_event_t *ev = &w->ev;
    char why[256];
    if (segd_event_validate(ev, &o->limits, why, sizeof(why)) != SEGD_OK) {
        segd_loader_report(w, s, no, why);
        return 0;
    }
    /* DESIGN §3, as segd run's too_late / from_future dead letters */
    segd_ts_verdict_t v =
        /* an event of no partition meets every restored unit's floor */
        o->policy ? segd_policy_check_ts_floor(o->policy, ev->ts_ms, o->limits.max_clock_skew_ms,
                                               segd_policy_import_floor(o->policy))
                  : SEGD_TS_OK;
    if (v == SEGD_TS_TOO_LATE) {
        char floor[160];
        segd_policy_floor_explain(o->policy, segd_policy_import_floor(o->policy), floor,
                                  sizeof(floor));
        snprintf(why, sizeof(why), "too_late: ts_ms %lld is below the ingest floor %s",
                 (long long)ev->ts_ms, floor);
        segd_loader_report(w, s, no, why);
        return 0;
    }
    if (v != SEGD_TS_OK) {
        snprintf(why, sizeof(why), "from_future: ts_ms %lld is more than %lld ms after now",
                 (long long)ev->ts_ms, (long long)o->limits.max_clock_skew_ms);
        segd_loader_report(w, s, no, why);
        return 0;
    }
    if (segd_event_to_profile(ev, o->granularity_s, &w->prof) ||
        segd_record_encode(&w->prof, &w->operand))
        return -1;
    segd_load_item_t *items =
        segd_array_grow(s->items, &s->cap_items, s->n_items + 1, sizeof(*items));
    if (!items)
        return -1;
    s->items = items;
    size_t at = s->arena.len;
    if (segd_buf_reserve(&s->arena, ev->user_id_len + w->operand.len))
        return -1;
    memcpy(s->arena.data + at, ev->user_id, ev->user_id_len);
    if (w->operand.len) /* an empty operand may have no buffer yet */
        memcpy(s->arena.data + at + ev->user_id_len, w->operand.data, w->operand.len);
    s->arena.len += ev->user_id_len + w->operand.len;
    /* Offsets for now, because the arena may still move while the chunk
     * grows; segd_loader_finish_chunk makes them pointers. */
    items[s->n_items++] = (segd_load_item_t){
        .user = (const uint8_t *)(uintptr_t)at,
        .operand = (const uint8_t *)(uintptr_t)(at + ev->user_id_len),
        .user_len = (uint32_t)ev->user_id_len,
        .operand_len = (uint32_t)w->operand.len,
        .n_segments = (uint32_t)ev->n_segments,
        .record_no = no,
    };
    s->segments += ev->n_segments;
    return 0;
}

void segd_loader_finish_chunk(slot_t *s)
{
    for (size_t i = 0; i < s->n_items; i++) {
        s->items[i].user = s->arena.data + (uintptr_t)s->items[i].user;
        s->items[i].operand = s->arena.data + (uintptr_t)s->items[i].operand;
    }
}
