/* Replacing deltas of a rebuild swap; see swap_changes.h. */
#include "app/swap_changes.h"

#include <string.h>

#include "base/clock.h"
#include "wire/outbox.h"

#define REPLACE_BATCH_USERS 1024 /* users per outbox entry and per store write */

typedef struct diff {
    segd_store_t *live, *rebuilt;
    segd_store_view_t *v;
    segd_batch_t *b;
    segd_outbox_builder_t ob;
    segd_profile_t old, cur;
    segd_buf_t rec, value;
    uint64_t users;
    segd_err_t err;
    char *errstr;
    size_t n;
} diff_t;

static int same_profile(const segd_profile_t *a, const segd_profile_t *b)
{
    if (a->erased_before_ms != b->erased_before_ms || a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const segd_entry_t *x = &a->entries[i], *y = &b->entries[i];
        if (x->segment_id != y->segment_id || x->ts_ms != y->ts_ms ||
            x->expiry_s != y->expiry_s || x->flags != y->flags ||
            x->partner_id != y->partner_id)
            return 0;
    }
    return 1;
}

/* The builder's entry into the batch, written; a full one is cut here so
 * that an entry stays within what the publisher reads per cycle. */
static segd_err_t flush(diff_t *d, int sync)
{
    if (d->ob.n_items) {
        segd_err_t err = segd_outbox_finish_replace(&d->ob, segd_wall_ms(), &d->value);
        if (err)
            return segd_errf(err, d->errstr, d->n, "rebuild swap: outbox: %s",
                             segd_err_str(err));
        segd_batch_outbox_append(d->b, d->value.data, d->value.len);
        segd_outbox_builder_reset(&d->ob);
    }
    segd_err_t err = sync ? segd_store_write_sync(d->rebuilt, d->b, d->errstr, d->n)
                          : segd_store_write(d->rebuilt, d->b, d->errstr, d->n);
    segd_batch_clear(d->b);
    return err;
}

/* One replacing delta: the user's record in the rebuilt store (d->cur). */
static segd_err_t add_replace(diff_t *d, const char *user, size_t len)
{
    segd_err_t err = segd_record_encode(&d->cur, &d->rec);
    if (!err)
        err = segd_outbox_add(&d->ob, user, len, d->rec.data, d->rec.len, NULL, 0, 0, 0);
    if (err)
        return segd_errf(err, d->errstr, d->n, "rebuild swap: replacing delta: %s",
                         segd_err_str(err));
    d->users++;
    return d->ob.n_items < REPLACE_BATCH_USERS ? SEGD_OK : flush(d, 0);
}

/* Both stores' records of user into d->old (live) and d->cur (rebuilt). */
static segd_err_t read_both(diff_t *d, const char *user, size_t len)
{
    segd_err_t err = segd_store_view_get(d->v, user, len, &d->old, d->errstr, d->n);
    if (!err)
        err = segd_store_get(d->rebuilt, user, len, &d->cur, d->errstr, d->n);
    return err;
}

/* Users of the live store: replaced where the rebuilt record differs. */
static int diff_live(void *ctx, const char *user, size_t len, const uint8_t *value,
                     size_t vlen)
{
    diff_t *d = ctx;
    (void)value, (void)vlen;
    if ((d->err = read_both(d, user, len)))
        return 1;
    if (!d->old.n && !d->old.erased_before_ms && !d->cur.n && !d->cur.erased_before_ms)
        return 0; /* an empty value in both: no user */
    if (same_profile(&d->old, &d->cur))
        return 0;
    return (d->err = add_replace(d, user, len)) != SEGD_OK;
}

/* Users only the rebuilt store holds (the others diff_live judged). */
static int diff_rebuilt(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    diff_t *d = ctx;
    (void)p;
    if ((d->err = read_both(d, user, len)))
        return 1;
    if (d->old.n || d->old.erased_before_ms || (!d->cur.n && !d->cur.erased_before_ms))
        return 0;
    return (d->err = add_replace(d, user, len)) != SEGD_OK;
}

/* Users of the live store's unpublished outbox entries: the caches may lack
 * those deltas, which the swap would otherwise drop with the live store. */
static int diff_outbox(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen)
{
    diff_t *d = ctx;
    segd_outbox_entry_t e;
    (void)seq;
    segd_outbox_entry_init(&e);
    if (segd_outbox_decode(value, vlen, &e) == SEGD_OK) /* undecodable: never publishable */
        for (size_t i = 0; !d->err && i < e.n_items; i++)
            if (!(d->err = segd_store_get(d->rebuilt, e.items[i].user, e.items[i].user_len,
                                          &d->cur, d->errstr, d->n)))
                d->err = add_replace(d, e.items[i].user, e.items[i].user_len);
    segd_outbox_entry_free(&e);
    return d->err != SEGD_OK;
}

static int has_position(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    (void)topic, (void)partition, (void)next;
    *(int *)ctx = 1;
    return 1;
}

static segd_err_t scan_all(diff_t *d)
{
    segd_err_t err = segd_store_view_scan_raw(d->v, diff_live, d, d->errstr, d->n);
    if (!err && !d->err)
        err = segd_store_scan(d->rebuilt, diff_rebuilt, d, d->errstr, d->n);
    if (!err && !d->err)
        err = segd_store_outbox_scan(d->live, 0, SIZE_MAX, diff_outbox, d, d->errstr, d->n);
    if (!err && !d->err)
        err = flush(d, 1);
    return err ? err : d->err;
}

segd_err_t segd_swap_replace_deltas(segd_store_t *live, segd_store_view_t *v,
                                    segd_store_t *rebuilt, uint64_t *users, char *errstr,
                                    size_t n)
{
    *users = 0;
    int changes = segd_store_outbox_depth(live) > 0;
    segd_err_t err = changes ? SEGD_OK
                             : segd_store_view_positions(v, "changes", has_position, &changes,
                                                         errstr, n);
    if (err || !changes)
        return err;
    diff_t d = {.live = live, .rebuilt = rebuilt, .v = v, .errstr = errstr, .n = n};
    segd_outbox_builder_init(&d.ob);
    segd_profile_init(&d.old);
    segd_profile_init(&d.cur);
    if (!(err = segd_batch_new(rebuilt, &d.b)))
        err = scan_all(&d);
    *users = d.users;
    if (d.b)
        segd_batch_destroy(d.b);
    segd_outbox_builder_free(&d.ob);
    segd_profile_free(&d.old);
    segd_profile_free(&d.cur);
    segd_buf_free(&d.rec);
    segd_buf_free(&d.value);
    return err;
}
