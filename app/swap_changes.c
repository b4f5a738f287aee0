/* Replacing deltas of a rebuild swap; see swap_changes.h. */
#include "app/swap_changes.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/partition.h"
#include "core/record.h"
#include "wire/outbox.h"

#define REPLACE_BATCH_USERS 1024 /* users per outbox entry and per store write */

/* The input partitions the live store holds offsets of: the ones this
 * member owns (the sweep deletes a partition's offset when it leaves). A
 * rebuild replays every partition, so the rebuilt store also holds users
 * other members own; a replacing delta of theirs would overwrite, in every
 * cache, what their owner published since (and bring back what it erased
 * offline). */
typedef struct owned {
    struct { char topic[256]; int32_t partition; } *parts;
    size_t n, cap;
    char (*topics)[256];
    int32_t *counts; /* partitions of topics[i] */
    size_t n_topics;
} owned_t;

typedef struct diff {
    segd_store_t *live, *rebuilt;
    segd_partitioner_t partitioner;
    owned_t own;
    uint64_t not_owned; /* users skipped: another member's */
    uint64_t carried;   /* unpublished entries carried as they are */
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

static int add_owned(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    owned_t *o = ctx;
    (void)next;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        void *parts = realloc(o->parts, cap * sizeof(*o->parts));
        if (!parts)
            return 1;
        o->parts = parts;
        o->cap = cap;
    }
    snprintf(o->parts[o->n].topic, sizeof(o->parts[o->n].topic), "%s", topic);
    o->parts[o->n++].partition = partition;
    return 0;
}

/* The live store's owned partitions and their topics' partition counts. */
static segd_err_t load_owned(diff_t *d)
{
    owned_t *o = &d->own;
    segd_err_t err = segd_store_view_positions(d->v, "offset", add_owned, o, d->errstr, d->n);
    if (!err && o->n && (!(o->topics = calloc(o->n, sizeof(*o->topics))) ||
                         !(o->counts = calloc(o->n, sizeof(*o->counts)))))
        err = segd_errf(SEGD_ERR_NOMEM, d->errstr, d->n, "rebuild swap: out of memory");
    for (size_t i = 0; !err && i < o->n; i++) {
        size_t t = 0;
        while (t < o->n_topics && strcmp(o->topics[t], o->parts[i].topic))
            t++;
        if (t < o->n_topics)
            continue;
        memcpy(o->topics[t], o->parts[i].topic, sizeof(o->topics[t]));
        if (segd_store_partition_count(d->live, o->topics[t], &o->counts[t], d->errstr, d->n))
            o->counts[t] = 0; /* unknown: users are placed by the other topics */
        o->n_topics++;
    }
    return err;
}

/* Whether the user is the live store's: its partition of some input topic
 * is one the live store holds an offset of. A store with no offsets (a
 * backfilled one, a single store never consumed) owns every user. */
static int owned(const diff_t *d, const char *user, size_t len)
{
    const owned_t *o = &d->own;
    if (!o->n)
        return 1;
    for (size_t t = 0; t < o->n_topics; t++) {
        if (o->counts[t] <= 0)
            continue;
        int32_t p = segd_partition_of(d->partitioner, user, len, o->counts[t]);
        for (size_t i = 0; i < o->n; i++)
            if (o->parts[i].partition == p && !strcmp(o->parts[i].topic, o->topics[t]))
                return 1;
    }
    return 0;
}

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

/* One replacing delta: the user's record in the rebuilt store (d->cur);
 * none for another member's user. */
static segd_err_t add_replace(diff_t *d, const char *user, size_t len)
{
    if (!owned(d, user, len)) {
        d->not_owned++;
        return SEGD_OK;
    }
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
 * those deltas, which the swap would otherwise drop with the live store.
 * Its unpublished retirements and identity members are not in any user's
 * record: they are carried as they are, after the replacements so far. */
static int diff_outbox(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen)
{
    diff_t *d = ctx;
    segd_outbox_entry_t e;
    (void)seq;
    segd_outbox_entry_init(&e);
    int decoded = segd_outbox_decode(value, vlen, &e) == SEGD_OK; /* else never publishable */
    if (decoded && (e.kind == SEGD_OUTBOX_RETIRE || e.kind == SEGD_OUTBOX_MEMBER)) {
        if (!(d->err = flush(d, 0)))
            segd_batch_outbox_append(d->b, value, vlen);
        d->carried++;
    }
    if (decoded && e.kind == SEGD_OUTBOX_DATA && !d->err) {
        /* joins of this store's own events the group has committed past:
         * a user of a partition swept away meanwhile gets no replacement
         * below, and its new owner never reads them again (review); a
         * join is idempotent, so carrying them is always safe */
        if (!(d->err = flush(d, 0)))
            segd_batch_outbox_append(d->b, value, vlen);
        d->carried++;
    }
    if (decoded && e.kind != SEGD_OUTBOX_RETIRE && e.kind != SEGD_OUTBOX_MEMBER)
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
                                    segd_store_t *rebuilt, segd_partitioner_t partitioner,
                                    uint64_t *users, char *errstr, size_t n)
{
    *users = 0;
    int changes = segd_store_outbox_depth(live) > 0;
    segd_err_t err = changes ? SEGD_OK
                             : segd_store_view_positions(v, "changes", has_position, &changes,
                                                         errstr, n);
    if (err || !changes)
        return err;
    diff_t d = {.live = live, .rebuilt = rebuilt, .v = v, .partitioner = partitioner,
                .errstr = errstr, .n = n};
    segd_outbox_builder_init(&d.ob);
    segd_profile_init(&d.old);
    segd_profile_init(&d.cur);
    if (!(err = load_owned(&d)) && !(err = segd_batch_new(rebuilt, &d.b)))
        err = scan_all(&d);
    *users = d.users;
    if (d.b)
        segd_batch_destroy(d.b);
    segd_outbox_builder_free(&d.ob);
    segd_profile_free(&d.old);
    segd_profile_free(&d.cur);
    segd_buf_free(&d.rec);
    segd_buf_free(&d.value);
    free(d.own.parts);
    free(d.own.topics);
    free(d.own.counts);
    return err;
}
