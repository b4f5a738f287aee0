/* Per-partition consumer lag; see lag.h. */
#define _GNU_SOURCE
#include "consumer/lag.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"

/* Where a partition was started or sought (pipeline thread only). */
typedef struct start {
    char topic[256];
    int32_t partition;
    int64_t offset;
} start_t;

struct segd_lag {
    start_t *starts;
    size_t n_starts, cap_starts;
    pthread_mutex_t mu; /* guards parts, n, assigned */
    segd_partition_lag_t *parts;
    size_t n, cap;
    int assigned; /* the table reflects an assignment of the group */
    int pending;  /* an assignment came; the next refresh reads it (pipeline thread) */
    int64_t refreshed_ms; /* segd_mono_ms of the last refresh (0 = none) */
};

segd_lag_t *segd_lag_new(void)
{
    segd_lag_t *l = calloc(1, sizeof(*l));
    if (l)
        pthread_mutex_init(&l->mu, NULL);
    return l;
}

void segd_lag_destroy(segd_lag_t *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l->starts);
    free(l->parts);
    free(l);
}

void segd_lag_assigned(segd_lag_t *l)
{
    l->pending = 1;
}

void segd_lag_unassigned(segd_lag_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->assigned = l->pending = 0; /* the table goes at the next refresh, with its gauge series */
    pthread_mutex_unlock(&l->mu);
}

static start_t *find_start(segd_lag_t *l, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < l->n_starts; i++)
        if (l->starts[i].partition == partition && !strcmp(l->starts[i].topic, topic))
            return &l->starts[i];
    return NULL;
}

segd_err_t segd_lag_start(segd_lag_t *l, const char *topic, int32_t partition, int64_t offset)
{
    start_t *s = find_start(l, topic, partition);
    if (!s) {
        start_t *grown =
            segd_array_grow(l->starts, &l->cap_starts, l->n_starts + 1, sizeof(*l->starts));
        if (!grown)
            return SEGD_ERR_NOMEM;
        l->starts = grown;
        s = &l->starts[l->n_starts++];
        snprintf(s->topic, sizeof(s->topic), "%s", topic);
        s->partition = partition;
    }
    s->offset = offset;
    return SEGD_OK;
}

/* Where a partition without a consumer position yet (nothing delivered
 * since its assignment or seek) goes on from; -1 when unknown. */
static int64_t start_of(segd_lag_t *l, const char *topic, int32_t partition, int64_t lo,
                        int64_t hi)
{
    const start_t *s = find_start(l, topic, partition);
    if (!s)
        return -1;
    if (s->offset == RD_KAFKA_OFFSET_BEGINNING)
        return lo;
    if (s->offset == RD_KAFKA_OFFSET_END)
        return hi;
    return s->offset >= 0 ? s->offset : -1;
}

static void measure(segd_lag_t *l, segd_partition_lag_t *q, const rd_kafka_topic_partition_t *tp,
                    rd_kafka_t *rk, int paused)
{
    int64_t lo = -1, hi = -1;
    snprintf(q->topic, sizeof(q->topic), "%s", tp->topic);
    q->partition = tp->partition;
    if (rd_kafka_get_watermark_offsets(rk, tp->topic, tp->partition, &lo, &hi))
        lo = hi = -1;
    q->high = hi;
    q->next = tp->offset >= 0 ? tp->offset : start_of(l, tp->topic, tp->partition, lo, hi);
    q->lag = hi >= 0 && q->next >= 0 && !paused ? (hi > q->next ? hi - q->next : 0) : -1;
}

static void update_gauge(segd_metric_t *gauge, const segd_partition_lag_t *old, size_t n_old,
                         const segd_partition_lag_t *now, size_t n_now)
{
    char part[16];
    const char *v[2] = {NULL, part};
    for (size_t i = 0; i < n_old; i++) { /* revoked, or its lag became unknown */
        int keep = 0;
        for (size_t j = 0; !keep && j < n_now; j++)
            keep = now[j].lag >= 0 && now[j].partition == old[i].partition &&
                   !strcmp(now[j].topic, old[i].topic);
        if (keep || old[i].lag < 0)
            continue;
        snprintf(part, sizeof(part), "%" PRId32, old[i].partition);
        v[0] = old[i].topic;
        segd_metric_remove(gauge, v);
    }
    for (size_t j = 0; j < n_now; j++) {
        if (now[j].lag < 0)
            continue;
        snprintf(part, sizeof(part), "%" PRId32, now[j].partition);
        v[0] = now[j].topic;
        segd_metric_set(gauge, v, (double)now[j].lag);
    }
}

void segd_lag_refresh(segd_lag_t *l, rd_kafka_t *rk,
                      int (*paused)(void *ctx, const char *topic, int32_t partition), void *ctx,
                      segd_metric_t *gauge)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(rk, &parts))
        return;
    rd_kafka_position(rk, parts); /* the next offset each partition delivers */
    size_t n = (size_t)parts->cnt, cap = 0;
    segd_partition_lag_t *now = n ? segd_array_grow(NULL, &cap, n, sizeof(*now)) : NULL;
    if (n && !now) {
        rd_kafka_topic_partition_list_destroy(parts);
        return;
    }
    for (size_t i = 0; i < n; i++)
        measure(l, &now[i], &parts->elems[i], rk,
                paused && paused(ctx, parts->elems[i].topic, parts->elems[i].partition));
    rd_kafka_topic_partition_list_destroy(parts);
    pthread_mutex_lock(&l->mu);
    segd_partition_lag_t *old = l->parts;
    size_t n_old = l->n;
    l->parts = now;
    l->n = n;
    l->cap = cap;
    l->assigned |= l->pending; /* not before the table holds the assignment */
    l->refreshed_ms = segd_mono_ms();
    pthread_mutex_unlock(&l->mu);
    if (gauge)
        update_gauge(gauge, old, n_old, now, n);
    free(old);
}

int64_t segd_lag_age_ms(segd_lag_t *l)
{
    pthread_mutex_lock(&l->mu);
    int64_t at = l->refreshed_ms;
    pthread_mutex_unlock(&l->mu);
    return at ? segd_mono_ms() - at : INT64_MAX;
}

segd_err_t segd_lag_get(segd_lag_t *l, segd_partition_lag_t **out, size_t *n, int *assigned)
{
    segd_err_t err = SEGD_OK;
    pthread_mutex_lock(&l->mu);
    *out = NULL;
    *n = l->n;
    *assigned = l->assigned;
    if (l->n && !(*out = malloc(l->n * sizeof(**out))))
        err = SEGD_ERR_NOMEM;
    if (*out)
        memcpy(*out, l->parts, l->n * sizeof(**out));
    pthread_mutex_unlock(&l->mu);
    if (err)
        *n = 0;
    return err;
}
