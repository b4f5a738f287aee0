/* A snapshot into an edge table; see edge_load.h. The per-unit W come from
 * segd_snapshot_read's unit reports (the fold keeps only their minimum). */
#include "cache/edge_load.h"

#include <stdlib.h>
#include <string.h>

/* Each loaded unit's W, by partition; -1 = no unit loaded there. */
typedef struct unit_marks {
    const segd_snapshot_read_opts_t *caller;
    int64_t *w;
    int32_t n;
    int nomem;
} unit_marks_t;

/* Runs serialised (segd_snapshot_read's promise), once per unit. */
static void on_unit(void *ctx, const segd_unit_report_t *r)
{
    unit_marks_t *u = ctx;
    if (r->m && !u->w && !u->nomem) {
        u->n = r->m->partitions; /* every unit was checked against the topology */
        u->w = malloc((size_t)u->n * sizeof(*u->w));
        u->nomem = !u->w;
        for (int32_t p = 0; u->w && p < u->n; p++)
            u->w[p] = -1;
    }
    if (r->m && u->w && r->partition >= 0 && r->partition < u->n)
        u->w[r->partition] = r->m->gc_watermark_ms;
    if (u->caller && u->caller->on_unit)
        u->caller->on_unit(u->caller->unit_ctx, r);
}

static int put_cb(void *ctx, int32_t partition, const char *user, size_t len,
                  const segd_profile_t *p)
{
    (void)partition;
    return segd_edge_put(ctx, user, len, p) != SEGD_OK;
}

/* The unit was replaced mid-read: what the table took from it goes, so that
 * it holds exactly the new unit (whose store may have dropped users). */
static void discard_cb(void *ctx, const segd_topology_t *t, int32_t partition)
{
    segd_edge_drop_partition(ctx, t->partitioner, t->partitions, partition);
}

static int member_cb(void *ctx, int32_t partition, const segd_member_t *m)
{
    (void)partition;
    return segd_edge_apply_member(ctx, m) != SEGD_OK;
}

/* After the records: a W raised earlier would only make the load's joins
 * drop what the units already dropped, and lookups honour markers whenever
 * they arrive. */
static segd_err_t apply_marks(segd_edge_t *e, const segd_manifest_t *m, const unit_marks_t *u,
                              char *errstr, size_t n)
{
    segd_err_t err = segd_edge_set_partitions(e, m->partitioner, m->partitions);
    if (err)
        return segd_errf(err, errstr, n, "the cache is already partitioned otherwise than "
                         "the snapshot (%d partitions by %s)", (int)m->partitions,
                         segd_partitioner_name(m->partitioner));
    for (int32_t p = 0; p < u->n; p++)
        if (u->w[p] >= 0 && (err = segd_edge_raise_partition_gc_watermark(e, p, u->w[p])))
            return segd_errf(err, errstr, n, "unit %d: cannot raise its W", (int)p);
    for (size_t i = 0; i < m->n_retirements; i++)
        if ((err = segd_edge_retire(e, m->retirements[i].segment_id,
                                    m->retirements[i].retired_before_ms)))
            return segd_errf(err, errstr, n, "out of memory");
    return SEGD_OK;
}

segd_err_t segd_edge_load_snapshot(segd_edge_t *e, const char *src_url,
                                   const segd_snapshot_read_opts_t *o, segd_manifest_t *m,
                                   char *errstr, size_t errstr_size)
{
    unit_marks_t u = {.caller = o};
    segd_snapshot_read_opts_t ro = {0};
    if (o)
        ro = *o;
    ro.on_unit = on_unit;
    ro.unit_ctx = &u;
    ro.on_member = member_cb; /* a unit's identity registers (DESIGN §10.5) */
    ro.member_ctx = e;
    ro.on_discard = discard_cb; /* a unit replaced while it was read */
    segd_err_t err = segd_snapshot_read(src_url, &ro, m, put_cb, e, errstr, errstr_size);
    if (err)
        goto out;
    if (u.nomem || !u.w) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, errstr_size, "out of memory");
        goto out;
    }
    err = apply_marks(e, m, &u, errstr, errstr_size);
out:
    free(u.w);
    return err;
}
