/* Restore of a snapshot unit into a store (load/restore.h): first the
 * store's side (a bulk load with the unit's markers and offset), then one
 * unit from its destination fed into it. */
#include "load/restore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "core/record.h"
#include "snapread/unit.h"
#include "store/identity.h"

struct segd_restore {
    segd_store_t *store;
    const _Atomic int *cancel;
    pthread_mutex_t *cancel_lock;
    segd_bulk_t *bulk;
    segd_buf_t op;
    segd_restore_stats_t st;
    struct timespec t0;
};

void segd_restore_opts_default(segd_restore_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->memory_bytes = 1ull << 30;
}

/* The restored store's membership changes must not lose, in caches that
 * hold the exporter's registers, to those of an epoch they never saw
 * (DESIGN §10.6): its epoch becomes at least the exporter's. */
static segd_err_t raise_epoch(segd_store_t *s, int64_t epoch_ms, char *errstr, size_t n)
{
    int64_t cur = 0;
    segd_err_t err = epoch_ms > 0 ? segd_store_counter_get(s, SEGD_IDENT_EPOCH_COUNTER, &cur,
                                                           errstr, n)
                                  : SEGD_OK;
    if (err || cur >= epoch_ms)
        return err;
    segd_batch_t *b = NULL;
    if ((err = segd_batch_new(s, &b)))
        return segd_errf(err, errstr, n, "restore: out of memory");
    segd_batch_set_counter(b, SEGD_IDENT_EPOCH_COUNTER, epoch_ms);
    err = segd_store_write_sync(s, b, errstr, n);
    segd_batch_destroy(b);
    return err;
}

static segd_err_t take_markers(segd_store_t *s, const segd_restore_unit_t *u, char *errstr,
                               size_t n)
{
    segd_err_t err = SEGD_OK;
    if (u->gc_watermark_ms > 0 && !u->topic) /* whose floor would it be? */
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "restore: a unit with a GC watermark needs its topic");
    if (u->gc_watermark_ms > 0)
        err = segd_store_raise_import_floor(s, u->topic, u->partition, u->gc_watermark_ms,
                                            errstr, n);
    for (size_t i = 0; !err && i < u->n_retirements; i++)
        err = segd_store_retire(s, u->retirements[i].segment_id,
                                u->retirements[i].retired_before_ms, NULL, errstr, n);
    if (!err)
        err = raise_epoch(s, u->identity_epoch_ms, errstr, n);
    return err;
}

segd_err_t segd_restore_new(segd_restore_t **out, segd_store_t *store,
                            const segd_restore_opts_t *o, char *errstr, size_t n)
{
    *out = NULL;
    segd_restore_t *r = calloc(1, sizeof(*r));
    if (!r)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "restore: out of memory");
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    r->store = store;
    r->cancel = o->cancel;
    r->cancel_lock = o->cancel_lock;
    r->st.offset_before = -1;
    segd_bulk_opts_t bo;
    segd_bulk_opts_default(&bo);
    bo.memory_bytes = o->memory_bytes;
    bo.changes = o->changes;
    bo.stop = o->stop;
    bo.shared = o->shared;
    bo.direct = o->shared && o->direct && !o->changes;
    bo.cancel = o->cancel;
    bo.progress = o->progress;
    bo.progress_ctx = o->progress_ctx;
    segd_err_t err = segd_bulk_new(&r->bulk, store, &bo, errstr, n);
    if (err) {
        segd_restore_destroy(r);
        return err;
    }
    *out = r;
    return SEGD_OK;
}

segd_err_t segd_restore_add_record(segd_restore_t *r, const char *user, size_t user_len,
                                   const segd_profile_t *p, const uint8_t *rec, size_t rec_len,
                                   char *errstr, size_t n)
{
    if (!rec) {
        r->op.len = 0;
        segd_err_t err = segd_record_encode(p, &r->op);
        if (err)
            return segd_errf(err, errstr, n, "restore: cannot encode user %.*s",
                             (int)user_len, user);
        rec = r->op.data;
        rec_len = r->op.len;
    }
    if (!rec_len) /* no entries, no erase marker: nothing to hold */
        return SEGD_OK;
    segd_err_t err = segd_bulk_add(r->bulk, user, user_len, rec, rec_len, p->n, errstr, n);
    if (err)
        return err;
    r->st.users++;
    r->st.segments += p->n;
    return SEGD_OK;
}

segd_err_t segd_restore_add(segd_restore_t *r, const char *user, size_t user_len,
                            const segd_profile_t *p, char *errstr, size_t n)
{
    return segd_restore_add_record(r, user, user_len, p, NULL, 0, errstr, n);
}

/* The store's offset for the partition becomes the unit's unless the store
 * is already further (it then holds everything the unit does, by §3). */
static segd_err_t set_offset(segd_restore_t *r, const segd_restore_unit_t *u, char *errstr,
                             size_t n)
{
    if (!u->topic || u->next_offset < 0)
        return SEGD_OK;
    int64_t cur = -1;
    segd_err_t err = segd_store_offset_get(r->store, u->topic, u->partition, &cur, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        cur = -1;
    else if (err)
        return err;
    r->st.offset_before = cur;
    if (cur >= u->next_offset)
        return SEGD_OK;
    segd_batch_t *b = NULL;
    if ((err = segd_batch_new(r->store, &b)))
        return segd_errf(err, errstr, n, "restore: out of memory");
    segd_batch_set_offset(b, u->topic, u->partition, u->next_offset);
    err = segd_store_write_sync(r->store, b, errstr, n);
    segd_batch_destroy(b);
    r->st.offset_set = !err;
    return err;
}

static segd_err_t cancelled(const segd_restore_t *r, char *errstr, size_t n)
{
    return r->cancel && *r->cancel
               ? segd_errf(SEGD_ERR_ABORTED, errstr, n, "restore cancelled: partition revoked")
               : SEGD_OK;
}

/* The offset only if not cancelled, both under the cancel lock: checked
 * first and written after without it, a revoke in between left an offset
 * vouching for a partition another member now owns, whose data this
 * member's sweep may be deleting. */
static segd_err_t set_offset_unless_cancelled(segd_restore_t *r, const segd_restore_unit_t *u,
                                              char *errstr, size_t n)
{
    if (r->cancel_lock)
        pthread_mutex_lock(r->cancel_lock);
    segd_err_t err = cancelled(r, errstr, n);
    if (!err)
        err = set_offset(r, u, errstr, n);
    if (r->cancel_lock)
        pthread_mutex_unlock(r->cancel_lock);
    return err;
}

segd_err_t segd_restore_finish(segd_restore_t *r, const segd_restore_unit_t *unit,
                               segd_restore_stats_t *stats, char *errstr, size_t n)
{
    segd_bulk_stats_t bs;
    segd_err_t err = cancelled(r, errstr, n);
    if (!err)
        err = take_markers(r->store, unit, errstr, n);
    if (!err && !(err = cancelled(r, errstr, n)))
        err = segd_bulk_finish(r->bulk, &bs, errstr, n);
    if (!err) {
        r->st.users_sst = bs.users_sst;
        r->st.users_merged = bs.users_merged;
        err = set_offset_unless_cancelled(r, unit, errstr, n);
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->st.seconds = (double)(t1.tv_sec - r->t0.tv_sec) + (t1.tv_nsec - r->t0.tv_nsec) / 1e9;
    if (stats)
        *stats = r->st;
    return err;
}

void segd_restore_destroy(segd_restore_t *r)
{
    if (!r)
        return;
    segd_bulk_destroy(r->bulk);
    segd_buf_free(&r->op);
    free(r);
}

/* ---------- one unit from its destination ---------- */

typedef struct feed {
    segd_restore_t *restore;
    const segd_unit_load_t *u;
    segd_err_t code; /* the callback's own failure */
    char err[512];
} feed_t;

/* Checks the stop and the revoke at every record, so that neither waits for
 * a whole unit to download. A non-zero return stops the unit's read. */
static int feed(void *ctx, int32_t partition, const char *user, size_t len,
                const segd_profile_t *p, const uint8_t *rec, size_t rec_len)
{
    (void)partition;
    feed_t *f = ctx;
    if ((f->u->stop && *f->u->stop) || (f->u->cancel && *f->u->cancel)) {
        snprintf(f->err, sizeof(f->err), "restore stopped");
        f->code = SEGD_ERR_ABORTED;
        return 1;
    }
    f->code = segd_restore_add_record(f->restore, user, len, p, rec, rec_len, f->err,
                                      sizeof(f->err));
    return f->code != SEGD_OK;
}

static int64_t unit_offset(const segd_manifest_t *m, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < m->n_inputs; i++)
        if (m->inputs[i].partition == partition && m->inputs[i].topic &&
            !strcmp(m->inputs[i].topic, topic))
            return m->inputs[i].offset;
    return -1;
}

static uint64_t unit_bytes(const segd_manifest_t *m)
{
    uint64_t b = 0;
    for (size_t i = 0; i < m->n_files; i++)
        b += m->files[i].bytes;
    return b;
}

/* A snapshot made with another partition count or partitioner routes other
 * users to its units, so it cannot restore this partition: the partition
 * replays instead (SEGD_ERR_NOTFOUND), as it does without a snapshot. */
static segd_err_t usable_topology(segd_dest_t *d, const char *url, const segd_unit_load_t *u,
                                  segd_topology_t *t, char *errstr, size_t n)
{
    segd_err_t err = segd_snapread_topology(d, t, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "%s: no %s", url, SEGD_TOPOLOGY_NAME);
    if (err)
        return err;
    if (u->partitions > 0 && t->partitions != u->partitions)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n,
                         "%s: the snapshot has %d partitions, the topic %d: its units hold "
                         "other users", url, (int)t->partitions, (int)u->partitions);
    if (u->partitions > 0 && t->partitioner != u->partitioner)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n,
                         "%s: the snapshot's units are routed by %s, input.partitioner is %s: "
                         "they hold other users", url, segd_partitioner_name(t->partitioner),
                         segd_partitioner_name(u->partitioner));
    if (u->partition < 0 || u->partition >= t->partitions)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: no partition %d", url,
                         (int)u->partition);
    return SEGD_OK;
}

/* The unit read and checked through d, each record fed to the restore. */
static segd_err_t read_unit(segd_dest_t *d, const char *url, const segd_unit_load_t *u,
                            feed_t *f, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_topology_t t;
    segd_err_t err = usable_topology(d, url, u, &t, errstr, n);
    if (err)
        return err;
    segd_unit_read_opts_t o = {.on_record = feed, .ctx = f, .absent_is_notfound = 1};
    err = segd_snapread_unit(d, &t, u->partition, &o, m, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "%s: no unit for partition %d", url,
                         (int)u->partition);
    if (err == SEGD_ERR_INVALID && f->code) /* the callback's own failure */
        err = segd_errf(f->code == SEGD_ERR_UNSORTED ? f->code : SEGD_ERR_IO, errstr, n, "%s",
                        f->err);
    return err;
}

/* Read and checked, the unit goes in with its markers and offset. */
static segd_err_t finish_unit(segd_restore_t *r, const segd_unit_load_t *u,
                              const segd_manifest_t *m, segd_restore_stats_t *st,
                              char *errstr, size_t n)
{
    int64_t next = unit_offset(m, u->topic, u->partition);
    /* A unit without its partition's offset (from a store filled by
     * backfill) cannot say where the input goes on, and a replay is exact. */
    if (next < 0)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "its unit holds no input offset of %s",
                         u->topic);
    segd_restore_unit_t ru = {.topic = u->topic,
                              .partition = u->partition,
                              .next_offset = next,
                              .gc_watermark_ms = m->gc_watermark_ms,
                              .retirements = m->retirements,
                              .n_retirements = m->n_retirements,
                              .identity_epoch_ms = m->identity_epoch_ms};
    return segd_restore_finish(r, &ru, st, errstr, n);
}

/* One load of the unit through d: direct (straight into SST files, as
 * exports write units in key order) or through the sort. */
static segd_err_t load_once(segd_store_t *store, segd_dest_t *d, const char *url,
                            const segd_unit_load_t *u, int direct,
                            segd_unit_load_stats_t *out, char *errstr, size_t n)
{
    segd_restore_opts_t ro;
    segd_restore_opts_default(&ro);
    ro.memory_bytes = u->memory_bytes;
    ro.shared = 1;
    ro.direct = direct;
    ro.stop = u->stop;
    ro.cancel = u->cancel;
    ro.cancel_lock = u->cancel_lock;
    feed_t f = {.u = u};
    segd_manifest_t m;
    segd_manifest_init(&m);
    double t0 = segd_mono_s();
    segd_restore_stats_t st = {0};
    segd_err_t err = segd_restore_new(&f.restore, store, &ro, errstr, n);
    if (!err)
        err = read_unit(d, url, u, &f, &m, errstr, n);
    if (!err)
        err = finish_unit(f.restore, u, &m, &st, errstr, n);
    if (!err && out) {
        out->users = st.users;
        out->segments = st.segments;
        out->bytes = unit_bytes(&m);
        out->next_offset = unit_offset(&m, u->topic, u->partition);
        out->seconds = segd_mono_s() - t0;
    }
    segd_restore_destroy(f.restore); /* SST files not ingested go with it */
    segd_manifest_free(&m);
    return err;
}

/* One handle for the unit, opened at DEST/<topic>, serves every load of it.
 * The first two loads go direct. A unit read again after a newer export
 * replaced it halfway shows its users twice, out of order, so it is loaded
 * anew, direct once more. A unit that is not in key order at all (written
 * by another writer) goes through the sort on the third load. */
segd_err_t segd_unit_load(segd_store_t *store, const segd_unit_load_t *u,
                          segd_unit_load_stats_t *out, char *errstr, size_t n)
{
    char url[4200];
    segd_dest_join(url, sizeof(url), u->from, u->topic);
    segd_dest_t *d = NULL;
    segd_err_t err = segd_dest_open(&d, url, u->dest, errstr, n);
    if (err)
        return err;
    err = SEGD_ERR_UNSORTED;
    for (int attempt = 0; err == SEGD_ERR_UNSORTED && attempt < 3; attempt++)
        err = load_once(store, d, url, u, attempt < 2, out, errstr, n);
    segd_dest_close(d);
    return err;
}
