/* Pipeline + publisher wiring; see daemon.h. */
#include "app/daemon.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "app/restorer.h"
#include "transport/kprobe.h"

struct segd_daemon {
    segd_pipeline_t *pipeline;
    segd_publisher_t *publisher; /* NULL when changes.enable = 0 */
    segd_restorer_t *restorer;   /* NULL without restore.from */
    const char *props[2 * SEGD_MAX_KAFKA_PROPS + 1];
    int closed;
};

void segd_daemon_publisher_opts(const segd_config_t *cfg, segd_publisher_opts_t *o,
                                const char **props)
{
    segd_config_connection_props(cfg, props);
    segd_publisher_opts_default(o);
    o->brokers = cfg->brokers;
    o->topic = cfg->changes_topic;
    o->framing = strcmp(cfg->changes_format, "confluent") ? SEGD_CHANGE_SINGLE_OBJECT
                                                          : SEGD_CHANGE_CONFLUENT;
    o->registry_url = cfg->changes_registry_url;
    o->registry_auth = cfg->registry_auth;
    o->registry_ca = cfg->registry_ca;
    o->compression = cfg->changes_compression;
    o->partitioner = cfg->partitioner;
    o->retry_max_ms = cfg->retry_max_ms;
    o->max_entries = (size_t)cfg->memory.publisher_entries;
    o->queue_kb = cfg->memory.producer_queue_kb;
    o->kafka_props = props;
    o->log = cfg->log;
}

static void on_committed(void *ctx) { segd_publisher_kick(ctx); }

static uint64_t outbox_backlog(void *ctx)
{
    segd_publisher_stats_t st;
    segd_publisher_get_stats(ctx, &st);
    return st.depth;
}

/* A short probe first: unreachable brokers would make the publisher's start
 * and check_partitions wait 10 s per topic before /readyz even serves. The
 * pipeline's own probe says it in the log. */
static int brokers_answer(const segd_config_t *cfg)
{
    const char *props[2 * SEGD_MAX_KAFKA_PROPS + 1];
    char why[512];
    segd_config_connection_props(cfg, props);
    return segd_kprobe_brokers(cfg->brokers, props, 2000, why, sizeof(why)) != SEGD_ERR_KAFKA;
}

static segd_err_t new_publisher(segd_daemon_t *d, const segd_config_t *cfg,
                                segd_store_t *store, int brokers_down, char *errstr, size_t n)
{
    segd_publisher_opts_t o;
    segd_daemon_publisher_opts(cfg, &o, d->props);
    o.brokers_down = brokers_down;
    return segd_publisher_new(&d->publisher, store, &o, errstr, n);
}

/* Change partition p carries the deltas of input partition p (DESIGN §5),
 * so the change topic needs at least the input topics' partitions. Counts
 * the brokers cannot give now (unreachable, input topic not created yet)
 * are checked by the publisher at every delta instead. */
static segd_err_t check_partitions(segd_daemon_t *d, const segd_config_t *cfg, char *errstr,
                                   size_t n)
{
    int32_t changes = segd_publisher_partitions(d->publisher);
    for (size_t i = 0; changes > 0 && i < cfg->n_topics; i++) {
        int32_t input = 0;
        char why[256];
        if (segd_publisher_topic_partitions(d->publisher, cfg->topics[i], &input, why,
                                            sizeof(why)))
            continue;
        if (changes < input)
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "change topic %s has %" PRId32 " partitions, fewer than the %" PRId32
                             " of input topic %s: change partition p carries the deltas of "
                             "input partition p; add partitions to %s",
                             cfg->changes_topic, changes, input, cfg->topics[i],
                             cfg->changes_topic);
    }
    return SEGD_OK;
}

static int restore_begin(void *ctx, const char *topic, int32_t partition, int32_t partitions)
{
    return segd_restorer_begin(ctx, topic, partition, partitions);
}

static int restore_state(void *ctx, const char *topic, int32_t partition)
{
    switch (segd_restorer_state(ctx, topic, partition)) {
    case SEGD_RESTORE_DONE:
        return SEGD_PIPELINE_RESTORED;
    case SEGD_RESTORE_RUNNING:
        return SEGD_PIPELINE_RESTORING;
    default: /* REPLAY, or a job the restorer no longer knows */
        return SEGD_PIPELINE_REPLAY;
    }
}

static void restore_cancel(void *ctx, const char *topic, int32_t partition)
{
    segd_restorer_cancel(ctx, topic, partition);
}

static segd_err_t start_restorer(segd_daemon_t *d, const segd_config_t *cfg,
                                 segd_store_t *store, char *errstr, size_t n)
{
    segd_restorer_opts_t o;
    segd_restorer_opts_default(&o);
    o.from = cfg->restore_from;
    o.fallback_replay = (int)cfg->restore_fallback_replay;
    o.retries = (int)cfg->restore_retries;
    o.retry_max_ms = cfg->retry_max_ms;
    o.partitioner = cfg->partitioner;
    o.memory_bytes = (uint64_t)cfg->memory.restore_mb << 20;
    o.log = cfg->log;
    return segd_restorer_new(&d->restorer, store, &o, errstr, n);
}

static void set_hooks(segd_daemon_t *d)
{
    segd_pipeline_hooks_t h = {0};
    if (d->publisher) {
        h.committed = on_committed;
        h.backlog = outbox_backlog;
        h.ctx = d->publisher;
    }
    if (d->restorer) {
        h.restore_begin = restore_begin;
        h.restore_state = restore_state;
        h.restore_cancel = restore_cancel;
        h.restore_ctx = d->restorer;
    }
    segd_pipeline_set_hooks(d->pipeline, &h);
}

segd_err_t segd_daemon_new(segd_daemon_t **out, const segd_config_t *cfg, segd_store_t *store,
                           volatile sig_atomic_t *stop, char *errstr, size_t n)
{
    segd_daemon_t *d = calloc(1, sizeof(*d));
    if (!d)
        return SEGD_ERR_NOMEM;
    segd_err_t err = SEGD_OK;
    int down = cfg->changes_enable && !brokers_answer(cfg);
    if (cfg->changes_enable)
        err = new_publisher(d, cfg, store, down, errstr, n);
    if (!err && cfg->restore_from)
        err = start_restorer(d, cfg, store, errstr, n);
    /* before the consumer subscribes: a refused start must not have joined
     * the group (closing a consumer that joined serves its assignment) */
    if (!err && d->publisher && !down)
        err = check_partitions(d, cfg, errstr, n);
    if (!err) /* subscribes only: the group is joined by the first step */
        err = segd_pipeline_new(&d->pipeline, cfg, store, stop, errstr, n);
    if (!err && d->publisher)
        err = segd_publisher_start(d->publisher, errstr, n);
    if (err) {
        segd_daemon_destroy(d);
        return err;
    }
    set_hooks(d);
    *out = d;
    return SEGD_OK;
}

segd_pipeline_t *segd_daemon_pipeline(segd_daemon_t *d) { return d->pipeline; }
segd_publisher_t *segd_daemon_publisher(segd_daemon_t *d) { return d->publisher; }

void segd_daemon_close(segd_daemon_t *d)
{
    if (d->closed)
        return;
    d->closed = 1;
    if (d->pipeline)
        segd_pipeline_close(d->pipeline);
    /* a load under way is abandoned before its offset: restored again next time */
    segd_restorer_destroy(d->restorer);
    d->restorer = NULL;
    if (d->publisher) /* what is left is re-published at the next start */
        segd_publisher_stop(d->publisher, 5000);
}

void segd_daemon_destroy(segd_daemon_t *d)
{
    if (!d)
        return;
    segd_daemon_close(d);
    segd_pipeline_destroy(d->pipeline);
    segd_publisher_destroy(d->publisher);
    free(d);
}
