/* Snapshot unit planning; see snapshot_plan.h. The topic becomes a path
 * component of the destination, so it must be a legal Kafka topic name
 * ([A-Za-z0-9._-], not "." or ".."). */
#include "publisher/snapshot_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher/snapshot.h"

static int legal_topic(const char *t)
{
    size_t len = strlen(t);
    if (!len || len > 249 || !strcmp(t, ".") || !strcmp(t, ".."))
        return 0;
    return strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

segd_err_t segd_snapshot_plan_topic(const segd_snapshot_opts_t *o,
                                    const segd_topic_offset_t *offsets, size_t n_offsets,
                                    char *topic, size_t cap, char *errstr, size_t n)
{
    const char *t = o->topic;
    for (size_t i = 0; !o->topic && i < n_offsets; i++) {
        if (o->links_topic && !strcmp(o->links_topic, offsets[i].topic))
            continue; /* the identity graph's, every partition of it in every store */
        if (t && strcmp(t, offsets[i].topic))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "the store holds offsets of several topics (%s, %s): give --topic",
                             t, offsets[i].topic);
        t = offsets[i].topic;
    }
    if (!t)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "the store holds no input offsets (filled by backfill?): give --topic");
    if (!legal_topic(t) || strlen(t) >= cap)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "'%s' is not a Kafka topic name", t);
    snprintf(topic, cap, "%s", t);
    return SEGD_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorted, without duplicates. */
static void normalise(segd_snapshot_plan_t *plan)
{
    qsort(plan->units, plan->n_units, sizeof(*plan->units), cmp_i32);
    size_t k = 0;
    for (size_t i = 0; i < plan->n_units; i++)
        if (!k || plan->units[k - 1] != plan->units[i])
            plan->units[k++] = plan->units[i];
    plan->n_units = k;
}

static segd_err_t stored_units(segd_snapshot_plan_t *plan, const segd_topic_offset_t *off,
                               size_t n_off, int32_t *max_stored)
{
    plan->units = malloc((n_off ? n_off : 1) * sizeof(*plan->units));
    if (!plan->units)
        return SEGD_ERR_NOMEM;
    *max_stored = -1;
    for (size_t i = 0; i < n_off; i++)
        if (!strcmp(off[i].topic, plan->topic) && off[i].partition >= 0) {
            plan->units[plan->n_units++] = off[i].partition;
            if (off[i].partition > *max_stored)
                *max_stored = off[i].partition;
        }
    return SEGD_OK;
}

static int32_t choose_p(const segd_snapshot_opts_t *o, int by_offsets, int32_t max_stored,
                        int32_t topology_p)
{
    if (o->partition_count > 0)
        return o->partition_count;
    if (!by_offsets)
        return (int32_t)o->buckets;
    /* a fleet member holds only some partitions: the count its peers
     * recorded beats what its own offsets suggest */
    return topology_p > max_stored ? topology_p : max_stored + 1;
}

static int stored(const segd_snapshot_plan_t *plan, size_t n_stored, int32_t p)
{
    for (size_t i = 0; i < n_stored; i++)
        if (plan->units[i] == p)
            return 1;
    return 0;
}

/* Of the requested partitions, a store with offsets exports only those it
 * holds an offset for: a partition assigned but still restoring (or never
 * consumed) has no state of its own yet, and its unit would replace a good
 * one with an empty one carrying no offset. */
static segd_err_t chosen_units(const segd_snapshot_opts_t *o, segd_snapshot_plan_t *plan)
{
    if (o->partitions) {
        size_t n_stored = plan->n_units, k = 0;
        int32_t *u = malloc((o->n_partitions + 1) * sizeof(*u));
        if (!u)
            return SEGD_ERR_NOMEM;
        for (size_t i = 0; i < o->n_partitions; i++)
            if (!plan->by_offsets || stored(plan, n_stored, o->partitions[i]))
                u[k++] = o->partitions[i];
        free(plan->units);
        plan->units = u;
        plan->n_units = k;
    } else if (!plan->by_offsets) {
        int32_t *u = realloc(plan->units, (size_t)plan->partitions * sizeof(*u));
        if (!u)
            return SEGD_ERR_NOMEM;
        plan->units = u;
        for (int32_t p = 0; p < plan->partitions; p++)
            u[p] = p;
        plan->n_units = (size_t)plan->partitions;
    }
    return SEGD_OK;
}

segd_err_t segd_snapshot_plan(const segd_snapshot_opts_t *o, const segd_topic_offset_t *off,
                              size_t n_off, int32_t topology_p, segd_snapshot_plan_t *plan,
                              char *errstr, size_t n)
{
    memset(plan, 0, sizeof(*plan));
    int32_t max_stored = -1;
    segd_err_t err = segd_snapshot_plan_topic(o, off, n_off, plan->topic, sizeof(plan->topic),
                                              errstr, n);
    if (!err)
        err = stored_units(plan, off, n_off, &max_stored);
    if (err)
        goto out;
    plan->by_offsets = max_stored >= 0;
    plan->partitions = choose_p(o, plan->by_offsets, max_stored, topology_p);
    if (plan->partitions <= 0 || plan->partitions > 100000 || max_stored >= plan->partitions) {
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n,
                        "%d partitions for topic %s, whose partition %d the store holds",
                        (int)plan->partitions, plan->topic, (int)max_stored);
        goto out;
    }
    err = chosen_units(o, plan);
    if (err)
        goto out;
    normalise(plan);
    for (size_t i = 0; i < plan->n_units; i++)
        if (plan->units[i] < 0 || plan->units[i] >= plan->partitions)
            err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "partition %d is not one of %s's %d",
                            (int)plan->units[i], plan->topic, (int)plan->partitions);
    if (!err && !plan->n_units)
        err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "no unit to export");
out:
    if (err == SEGD_ERR_NOMEM)
        segd_errf(err, errstr, n, "out of memory");
    if (err)
        segd_snapshot_plan_free(plan);
    return err;
}

void segd_snapshot_plan_free(segd_snapshot_plan_t *plan)
{
    free(plan->units);
    plan->units = NULL;
    plan->n_units = 0;
}
