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

/* Registers a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]*; counters
 * end in _total by convention, which the caller must follow. labels is a
 * comma-separated list of label names ("topic,partition"), at most
 * SEGD_METRIC_MAX_LABELS, or NULL. Registering an existing name again with
 * the same type and labels returns the same family, so components that come
 * and go can register each time. Any other clash, a bad name or a lack of
 * memory returns NULL. */
segd_metric_t *segd_metrics_counter(segd_metrics_t *m, const char *name, const char *help,
                                    const char *labels);
segd_metric_t *segd_metrics_gauge(segd_metrics_t *m, const char *name, const char *help,
                                  const char *labels);
/* bounds: the buckets' upper bounds, strictly ascending, +Inf implied (copied). */
segd_metric_t *segd_metrics_histogram(segd_metrics_t *m, const char *name, const char *help,
                                      const char *labels, const double *bounds, size_t n);

/* The series is chosen by values, one per label in the family's order (NULL
 * for a family without labels), and made at its first update. All of these
 * do nothing on a NULL family, so a component without a registry needs no
 * branches.
 * add is for counters and gauges; negative adds to a counter are ignored,
 * because a counter never goes down. set is for gauges, and for counters
 * copied from a component's own running total. observe is for histograms. */
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

/* Runs the collectors, then appends every family that has at least one
 * series, in registration order, with its series in creation order. Each
 * family is written as # HELP, # TYPE and then the samples; a histogram's
 * samples are cumulative _bucket{le=".."} lines, _sum and _count. */
segd_err_t segd_metrics_render(segd_metrics_t *m, segd_buf_t *out);

#endif
