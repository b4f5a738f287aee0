/* Scrape-time figures and readiness of `segd run`; see health.h. */
#include "app/health.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "metrics/process.h"

/* RocksDB integer properties shown per column family. */
static const struct {
    const char *property, *name, *help;
} cf_props[] = {
    {"rocksdb.estimate-live-data-size", "segd_rocksdb_live_data_bytes",
     "Estimated live data (rocksdb.estimate-live-data-size)."},
    {"rocksdb.total-sst-files-size", "segd_rocksdb_sst_files_bytes",
     "Size of all SST files (rocksdb.total-sst-files-size)."},
    {"rocksdb.estimate-pending-compaction-bytes", "segd_rocksdb_pending_compaction_bytes",
     "Bytes compaction must rewrite to settle the levels."},
    {"rocksdb.cur-size-all-mem-tables", "segd_rocksdb_memtable_bytes",
     "Memory of the active and unflushed memtables."},
    {"rocksdb.estimate-num-keys", "segd_rocksdb_estimated_keys", "Estimated keys."},
};
#define N_CF_PROPS (sizeof(cf_props) / sizeof(cf_props[0]))
#define STALLED_MS 10000 /* a lag table older than this: not ready ("stalled") */

struct segd_health {
    segd_metrics_t *m;
    segd_daemon_t *d;
    segd_store_t *store;
    const segd_config_t *cfg;
    segd_metric_t *cf[N_CF_PROPS];
    segd_metric_t *cache_usage, *cache_capacity, *delayed_rate, *write_stopped,
        *compactions_running, *compaction_pending, *gc_watermark, *corrupt, *writable, *ready;
    segd_metric_t *pub_events, *pub_bytes, *pub_segments, *pub_entries, *pub_cycles,
        *pub_retries, *pub_renewals, *outbox_depth, *outbox_oldest;
};

static void collect_store(segd_health_t *h)
{
    for (size_t i = 0; i < N_CF_PROPS; i++)
        for (int f = 0; f < SEGD_STORE_FAMILIES; f++) {
            uint64_t v;
            if (!segd_store_property(h->store, f, cf_props[i].property, &v))
                segd_metric_set(h->cf[i], (const char *[]){segd_store_family_name(f)},
                                (double)v);
        }
    uint64_t usage, capacity, v;
    segd_store_block_cache(h->store, &usage, &capacity);
    segd_metric_set(h->cache_usage, NULL, (double)usage);
    segd_metric_set(h->cache_capacity, NULL, (double)capacity);
    if (!segd_store_property(h->store, -1, "rocksdb.actual-delayed-write-rate", &v))
        segd_metric_set(h->delayed_rate, NULL, (double)v);
    if (!segd_store_property(h->store, -1, "rocksdb.is-write-stopped", &v))
        segd_metric_set(h->write_stopped, NULL, (double)v);
    if (!segd_store_property(h->store, -1, "rocksdb.num-running-compactions", &v))
        segd_metric_set(h->compactions_running, NULL, (double)v);
    if (!segd_store_property(h->store, 0, "rocksdb.compaction-pending", &v))
        segd_metric_set(h->compaction_pending, NULL, (double)v);
    segd_metric_set(h->gc_watermark, NULL, (double)segd_store_gc_watermark(h->store) / 1000.0);
    segd_metric_set(h->corrupt, NULL,
                    (double)segd_policy_corrupt_count(segd_store_policy(h->store)));
    char why[256];
    segd_metric_set(h->writable, NULL, segd_store_writable(h->store, why, sizeof(why)) == SEGD_OK);
}

static void collect_publisher(segd_health_t *h)
{
    segd_publisher_t *pub = segd_daemon_publisher(h->d);
    if (!pub)
        return;
    segd_publisher_stats_t st;
    segd_publisher_get_stats(pub, &st);
    segd_metric_set(h->pub_events, NULL, (double)st.events);
    segd_metric_set(h->pub_bytes, NULL, (double)st.bytes);
    segd_metric_set(h->pub_segments, NULL, (double)st.segments);
    segd_metric_set(h->pub_entries, NULL, (double)st.entries);
    segd_metric_set(h->pub_cycles, NULL, (double)st.cycles);
    segd_metric_set(h->pub_retries, NULL, (double)st.retries);
    segd_metric_set(h->pub_renewals, NULL, (double)st.producer_renewals);
    segd_metric_set(h->outbox_depth, NULL, (double)st.depth);
    segd_metric_set(h->outbox_oldest, NULL, (double)st.oldest_unacked_ms / 1000.0);
}

static void collect(void *ctx)
{
    segd_health_t *h = ctx;
    collect_store(h);
    collect_publisher(h);
    segd_metric_set(h->ready, NULL, segd_health_ready(h, NULL));
}

static void register_store(segd_health_t *h)
{
    segd_metrics_t *m = h->m;
    for (size_t i = 0; i < N_CF_PROPS; i++)
        h->cf[i] = segd_metrics_gauge(m, cf_props[i].name, cf_props[i].help, "cf");
    h->cache_usage = segd_metrics_gauge(m, "segd_rocksdb_block_cache_usage_bytes",
                                        "Bytes in the block cache.", NULL);
    h->cache_capacity = segd_metrics_gauge(m, "segd_rocksdb_block_cache_capacity_bytes",
                                           "Capacity of the block cache.", NULL);
    h->delayed_rate = segd_metrics_gauge(m, "segd_rocksdb_delayed_write_rate_bytes_per_second",
        "Write rate RocksDB throttles to while stalling writes (0 = no stall; "
        "rocksdb.actual-delayed-write-rate).", NULL);
    h->write_stopped = segd_metrics_gauge(m, "segd_rocksdb_write_stopped",
        "1 while RocksDB stops writes (rocksdb.is-write-stopped).", NULL);
    h->compactions_running = segd_metrics_gauge(m, "segd_rocksdb_running_compactions",
                                                "Compactions running now.", NULL);
    h->compaction_pending = segd_metrics_gauge(m, "segd_rocksdb_compaction_pending",
        "1 when the profiles family needs at least one compaction.", NULL);
    h->gc_watermark = segd_metrics_gauge(m, "segd_gc_watermark_seconds",
        "The store's persisted GC watermark W (DESIGN 3.1), seconds since the epoch; 0 = none.",
        NULL);
    h->corrupt = segd_metrics_counter(m, "segd_corrupt_records_total",
        "Records or operands that did not decode in merges and compactions (kept as they are).",
        NULL);
    h->writable = segd_metrics_gauge(m, "segd_store_writable",
        "1 when the store takes writes (not stopped by a failed write, disk above "
        "store.min.free.mb).", NULL);
    h->ready = segd_metrics_gauge(m, "segd_ready", "1 when /readyz answers 200.", NULL);
}

static void register_publisher(segd_health_t *h)
{
    segd_metrics_t *m = h->m;
    h->pub_events = segd_metrics_counter(m, "segd_change_events_total",
                                         "Change events acknowledged by the change topic.", NULL);
    h->pub_bytes = segd_metrics_counter(m, "segd_change_bytes_total",
                                        "Value bytes of the acknowledged change events.", NULL);
    h->pub_segments = segd_metrics_counter(m, "segd_change_segments_total",
                                           "Entries carried by the acknowledged change events.",
                                           NULL);
    h->pub_entries = segd_metrics_counter(m, "segd_outbox_acked_entries_total",
                                          "Outbox entries acknowledged and deleted.", NULL);
    h->pub_cycles = segd_metrics_counter(m, "segd_publish_cycles_total",
                                         "Publish cycles completed.", NULL);
    h->pub_retries = segd_metrics_counter(m, "segd_publish_retries_total",
                                          "Failed publish cycles (broker, registry or store).",
                                          NULL);
    h->pub_renewals = segd_metrics_counter(
        m, "segd_publish_producer_renewals_total",
        "Change producers replaced after a fatal error (the outbox sent again).", NULL);
    h->outbox_depth = segd_metrics_gauge(m, "segd_outbox_entries",
                                         "Outbox entries not yet acknowledged.", NULL);
    h->outbox_oldest = segd_metrics_gauge(
        m, "segd_outbox_oldest_unacked_age_seconds",
        "Age of the oldest unacknowledged outbox entry; 0 = none.", NULL);
}

segd_err_t segd_health_new(segd_health_t **out, segd_metrics_t *m, segd_daemon_t *d,
                           segd_store_t *store, const segd_config_t *cfg)
{
    segd_health_t *h = calloc(1, sizeof(*h));
    if (!h)
        return SEGD_ERR_NOMEM;
    *h = (segd_health_t){.m = m, .d = d, .store = store, .cfg = cfg};
    register_store(h);
    if (segd_daemon_publisher(d)) {
        register_publisher(h);
        segd_publisher_set_metrics(segd_daemon_publisher(d), m);
    }
    segd_pipeline_set_metrics(segd_daemon_pipeline(d), m);
    segd_err_t err = segd_process_metrics_register(m);
    if (!err)
        err = segd_metrics_add_collector(m, collect, h);
    if (err) {
        free(h);
        return err;
    }
    *out = h;
    return SEGD_OK;
}

void segd_health_destroy(segd_health_t *h)
{
    if (!h)
        return;
    segd_metrics_remove_collector(h->m, collect, h);
    free(h);
}

static json_t *offset_json(int64_t v) { return v < 0 ? json_null() : json_integer(v); }

/* The partitions as JSON; *behind = how many are not within max_lag. */
static json_t *partitions_json(const segd_partition_lag_t *l, size_t n, int64_t max_lag,
                               size_t *behind)
{
    json_t *a = json_array();
    *behind = 0;
    for (size_t i = 0; i < n; i++) {
        int late = l[i].lag < 0 || l[i].lag > max_lag;
        *behind += (size_t)late;
        json_array_append_new(a, json_pack("{s:s,s:i,s:o,s:o,s:o}", "topic", l[i].topic,
                                           "partition", (int)l[i].partition, "lag",
                                           offset_json(l[i].lag), "high", offset_json(l[i].high),
                                           "next", offset_json(l[i].next)));
    }
    return a;
}

int segd_health_ready(void *ctx, segd_buf_t *body)
{
    segd_health_t *h = ctx;
    segd_partition_lag_t *lags = NULL;
    size_t n = 0, behind = 0;
    int assigned = 0;
    char why[256] = "", brokers[512];
    int down = segd_pipeline_brokers_down(segd_daemon_pipeline(h->d), brokers, sizeof(brokers));
    int writable = segd_store_writable(h->store, why, sizeof(why)) == SEGD_OK;
    int64_t age_ms = 0;
    segd_err_t err =
        segd_pipeline_lags(segd_daemon_pipeline(h->d), &lags, &n, &assigned, &age_ms);
    json_t *parts = partitions_json(lags, n, h->cfg->ready_max_lag, &behind);
    free(lags);
    /* a table this old: the pipeline is stuck in a fault wait (registry or
     * broker down, change stream behind), and its lag is what it was */
    const char *reason = err ? "memory" : !writable ? "store" : down ? "brokers"
                         : !assigned ? "unassigned"
                         : age_ms > STALLED_MS ? "stalled" : behind ? "lag" : NULL;
    if (body) {
        json_t *o = json_pack("{s:b,s:s?,s:s,s:s,s:I,s:I,s:o}", "ready", !reason, "reason",
                              reason, "store", writable ? "writable" : why, "brokers",
                              down ? brokers : "answering", "max_lag",
                              (json_int_t)h->cfg->ready_max_lag, "lag_age_ms",
                              (json_int_t)age_ms, "partitions", parts);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (text)
            segd_buf_append(body, text, strlen(text));
        free(text);
        json_decref(o);
    } else {
        json_decref(parts);
    }
    return !reason;
}
