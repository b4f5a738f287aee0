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

/* The table the records go to, and what it held when the load began. */
typedef struct load_ctx {
    segd_edge_t *e;
    uint64_t users_before;  /* profiles held before the load */
    uint64_t deltas_before; /* deltas begun before it */
    int quiet_start;        /* no delta was being joined when it began */
} load_ctx_t;

/* Whether no delta began since the load did and none is being joined. */
static int no_delta_since(const load_ctx_t *l)
{
    uint64_t begun, done;
    segd_edge_delta_counts(l->e, &begun, &done);
    return begun == l->deltas_before && done == begun;
}

static int put_cb(void *ctx, int32_t partition, const char *user, size_t len,
                  const segd_profile_t *p)
{
    (void)partition;
    return segd_edge_put(((load_ctx_t *)ctx)->e, user, len, p) != SEGD_OK;
}

/* The unit was replaced mid-read: what the table took from it goes, so that
 * it holds exactly the new unit (whose store may have dropped users). Only
 * a table that held nothing before the load and joined no delta since holds
 * nothing else of that partition's users: otherwise dropping them would
 * lose changes that the change topic's follower has gone past, so the load
 * fails instead (SEGD_ERR_UNSORTED: load it anew). A delta that begins
 * while the drop runs fails the load as well, since the drop may have taken
 * it; a failed load's table is to be destroyed (edge_load.h). Member and
 * retirement events touch no profile and do not count. */
static int discard_cb(void *ctx, const segd_topology_t *t, int32_t partition)
{
    load_ctx_t *l = ctx;
    if (l->users_before || !l->quiet_start || !no_delta_since(l))
        return -1;
    segd_edge_drop_partition(l->e, t->partitioner, t->partitions, partition);
    return no_delta_since(l) ? 0 : -1;
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
    load_ctx_t lc = {.e = e};
    segd_edge_stats_t st;
    uint64_t done;
    segd_edge_delta_counts(e, &lc.deltas_before, &done);
    segd_edge_get_stats(e, &st);
    lc.users_before = st.users;
    lc.quiet_start = done == lc.deltas_before;
    segd_snapshot_read_opts_t ro = {0};
    if (o)
        ro = *o;
    ro.on_unit = on_unit;
    ro.unit_ctx = &u;
    ro.on_member = member_cb; /* a unit's identity registers (DESIGN §10.5) */
    ro.member_ctx = e;
    ro.on_discard = discard_cb; /* a unit replaced while it was read */
    segd_err_t err = segd_snapshot_read(src_url, &ro, m, put_cb, &lc, errstr, errstr_size);
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
