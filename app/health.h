/* What `segd run` shows on its metrics server (metrics/server.h): the
 * figures of the store (RocksDB properties, block cache, GC watermark,
 * writability) and of the change publisher, read at scrape time from their
 * own stats, and readiness (/readyz): every assigned partition within
 * ready.max.lag messages of its high watermark and the store writable.
 * The pipeline and the publisher report their own series into the same
 * registry (segd_pipeline_set_metrics, segd_publisher_set_metrics), wired
 * here too.
 *
 * Threads: new/destroy on the daemon's thread; the collector and
 * segd_health_ready run on the HTTP server's thread.
 * Ownership: m, d, store and cfg are borrowed and must outlive the health
 * object; destroy it (which removes its collector) before any of them. */
#ifndef SEGD_HEALTH_H
#define SEGD_HEALTH_H

#include "app/daemon.h"
#include "base/buf.h"
#include "metrics/registry.h"

typedef struct segd_health segd_health_t;

segd_err_t segd_health_new(segd_health_t **out, segd_metrics_t *m, segd_daemon_t *d,
                           segd_store_t *store, const segd_config_t *cfg);
void segd_health_destroy(segd_health_t *h);

/* A segd_ready_cb (ctx = the health object): 1 when ready; body gets
 * {"ready":bool,"reason":"unassigned"|"lag"|"store"|null,"store":"...",
 *  "max_lag":N,"partitions":[{"topic","partition","lag","high","next"}]}
 * with lag null while unknown (no fetch yet, or restoring). */
int segd_health_ready(void *ctx, segd_buf_t *body);

#endif
