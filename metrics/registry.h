/* A metrics registry: counters, gauges and histograms with labels, rendered
 * in the Prometheus text exposition format 0.0.4 (docs/metrics.md). The
 * component that owns a figure registers its family and updates it; figures
 * that already live in a component's stats struct are copied in by a
 * collector that runs just before each render (at scrape time).
 *
 * Threads: every function is safe from any thread at once (one mutex);
 * collectors run on the rendering thread, one render at a time, and may
 * update any family. Updates are meant per batch or per scrape, not per
 * message: a hot loop counts locally and adds its total.
 * Ownership: the registry owns its families and series; a family pointer is
 * borrowed until segd_metrics_destroy. Names, help texts and label values
 * are copied. No global state: each program makes its registry and passes
 * it to the components that report into it. */
#ifndef SEGD_METRICS_REGISTRY_H
#define SEGD_METRICS_REGISTRY_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

typedef struct segd_metrics segd_metrics_t;
typedef struct segd_metric segd_metric_t;

#define SEGD_METRIC_MAX_LABELS 4

/* Buckets (seconds) for latencies from 100 µs to 10 min. */
extern const double segd_metric_latency_buckets[];
extern const size_t segd_metric_latency_nbuckets;

segd_metrics_t *segd_metrics_new(void); /* NULL when out of memory */
void segd_metrics_destroy(segd_metrics_t *m);

/* Registers a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]* (counters end
 * in _total by convention, which is the caller's to follow); labels is a
 * comma-separated list of label names ("topic,partition") or NULL, at most
 * SEGD_METRIC_MAX_LABELS. Registering an existing name again with the same
 * type and labels returns the same family (components that come and go);
 * any other clash, a bad name or no memory returns NULL. */
segd_metric_t *segd_metrics_counter(segd_metrics_t *m, const char *name, const char *help,
                                    const char *labels);
segd_metric_t *segd_metrics_gauge(segd_metrics_t *m, const char *name, const char *help,
                                  const char *labels);
/* bounds: the buckets' upper bounds, strictly ascending, +Inf implied (copied). */
segd_metric_t *segd_metrics_histogram(segd_metrics_t *m, const char *name, const char *help,
                                      const char *labels, const double *bounds, size_t n);

/* The series is chosen by values (one per label, in the family's order;
 * NULL for a family without labels) and made at its first update. All are
 * no-ops on a NULL family, so a component without a registry needs no
 * branches. add: counters and gauges (a counter never goes down: negative
 * adds are ignored). set: gauges, and counters copied from a component's
 * own running total. observe: histograms. */
void segd_metric_add(segd_metric_t *f, const char *const *values, double v);
void segd_metric_set(segd_metric_t *f, const char *const *values, double v);
void segd_metric_observe(segd_metric_t *f, const char *const *values, double v);
/* Drops one series (a revoked partition's lag), or all of the family's. */
void segd_metric_remove(segd_metric_t *f, const char *const *values);
void segd_metric_clear(segd_metric_t *f);

/* cb(ctx) runs before each render, on the rendering thread; ctx is borrowed
 * until the registry is destroyed or the collector removed. */
typedef void (*segd_metrics_collect_cb)(void *ctx);
segd_err_t segd_metrics_add_collector(segd_metrics_t *m, segd_metrics_collect_cb cb, void *ctx);
void segd_metrics_remove_collector(segd_metrics_t *m, segd_metrics_collect_cb cb, void *ctx);

/* Runs the collectors, then appends every family with at least one series,
 * in registration order (series in creation order): # HELP, # TYPE, then
 * the samples; histograms as cumulative _bucket{le=".."}, _sum, _count. */
segd_err_t segd_metrics_render(segd_metrics_t *m, segd_buf_t *out);

#endif
