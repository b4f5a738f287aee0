/* The metrics registry and its text exposition; see registry.h. One mutex
 * guards families and series; a second one serializes renders, so
 * collectors never run twice at once and a removed collector is not
 * running once its removal returns. */
#include "metrics/registry.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { T_COUNTER, T_GAUGE, T_HISTOGRAM } type_t;

static const char *const type_names[] = {"counter", "gauge", "histogram"};

const double segd_metric_latency_buckets[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                              0.025,  0.05,   0.1,   0.25,   0.5,   1,
                                              2.5,    5,      10,    30,     60,    600};
const size_t segd_metric_latency_nbuckets =
    sizeof(segd_metric_latency_buckets) / sizeof(segd_metric_latency_buckets[0]);

typedef struct series {
    char *values[SEGD_METRIC_MAX_LABELS];
    double value;    /* counters and gauges */
    uint64_t *counts; /* histograms: n_bounds + 1 counts, one per bucket, not
                       * cumulative (render sums them) */
    uint64_t count;
    double sum;
} series_t;

struct segd_metric {
    segd_metrics_t *m;
    char *name, *help;
    type_t type;
    char *labels[SEGD_METRIC_MAX_LABELS];
    size_t n_labels;
    double *bounds;
    size_t n_bounds;
    series_t *series;
    size_t n_series, cap_series;
};

typedef struct collector {
    segd_metrics_collect_cb cb;
    void *ctx;
} collector_t;

struct segd_metrics {
    pthread_mutex_t mu;        /* families, series, collectors */
    pthread_mutex_t render_mu; /* one render (and its collectors) at a time */
    segd_metric_t **fams;
    size_t n_fams, cap_fams;
    collector_t *coll;
    size_t n_coll, cap_coll;
};

segd_metrics_t *segd_metrics_new(void)
{
    segd_metrics_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->render_mu, NULL);
    return m;
}

static void free_series(segd_metric_t *f, series_t *s)
{
    for (size_t i = 0; i < f->n_labels; i++)
        free(s->values[i]);
    free(s->counts);
}

static void free_family(segd_metric_t *f)
{
    for (size_t i = 0; i < f->n_series; i++)
        free_series(f, &f->series[i]);
    for (size_t i = 0; i < f->n_labels; i++)
        free(f->labels[i]);
    free(f->series);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

void segd_metrics_destroy(segd_metrics_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_fams; i++)
        free_family(m->fams[i]);
    free(m->fams);
    free(m->coll);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->render_mu);
    free(m);
}

/* ---------- registration ---------- */

static int valid_name(const char *s, int colon)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || (colon && *s == ':')))
            return 0;
    return 1;
}

/* Splits "a,b" into f->labels; 0 on a bad or reserved name or too many. */
static int parse_labels(segd_metric_t *f, const char *labels)
{
    for (const char *p = labels; p && *p;) {
        size_t len = strcspn(p, ",");
        if (f->n_labels == SEGD_METRIC_MAX_LABELS)
            return 0;
        char *name = strndup(p, len);
        if (!name)
            return 0;
        f->labels[f->n_labels++] = name;
        /* "le" is the histograms' own; names starting __ are Prometheus's */
        if (!valid_name(name, 0) || !strcmp(name, "le") || !strncmp(name, "__", 2))
            return 0;
        p += len + (p[len] == ',');
    }
    return 1;
}

static int same_shape(const segd_metric_t *a, const segd_metric_t *b)
{
    if (a->type != b->type || a->n_labels != b->n_labels || a->n_bounds != b->n_bounds)
        return 0;
    for (size_t i = 0; i < a->n_labels; i++)
        if (strcmp(a->labels[i], b->labels[i]))
            return 0;
    for (size_t i = 0; i < a->n_bounds; i++)
        if (a->bounds[i] != b->bounds[i])
            return 0;
    return 1;
}

/* Adds f, or returns the family of that name if it has f's shape (f is then
 * freed); NULL on a clash or no memory. */
static segd_metric_t *insert_family(segd_metrics_t *m, segd_metric_t *f)
{
    segd_metric_t *out = NULL;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_fams; i++)
        if (!strcmp(m->fams[i]->name, f->name)) {
            out = same_shape(m->fams[i], f) ? m->fams[i] : NULL;
            goto out_unlock;
        }
    segd_metric_t **grown =
        segd_array_grow(m->fams, &m->cap_fams, m->n_fams + 1, sizeof(*m->fams));
    if (grown) {
        m->fams = grown;
        m->fams[m->n_fams++] = out = f;
    }
out_unlock:
    pthread_mutex_unlock(&m->mu);
    if (out != f)
        free_family(f);
    return out;
}

static segd_metric_t *new_family(segd_metrics_t *m, type_t type, const char *name,
                                 const char *help, const char *labels, const double *bounds,
                                 size_t n_bounds)
{
    if (!m || !valid_name(name, 1))
        return NULL;
    segd_metric_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->m = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    int ok = f->name && f->help && parse_labels(f, labels);
    if (ok && n_bounds) {
        f->bounds = malloc(n_bounds * sizeof(*bounds));
        ok = f->bounds != NULL;
        for (size_t i = 0; ok && i < n_bounds; i++)
            ok = !isnan(bounds[i]) && !isinf(bounds[i]) && (i == 0 || bounds[i] > bounds[i - 1]);
        if (ok)
            memcpy(f->bounds, bounds, n_bounds * sizeof(*bounds));
        f->n_bounds = n_bounds;
    }
    if (!ok) {
        free_family(f);
        return NULL;
    }
    return insert_family(m, f);
}

segd_metric_t *segd_metrics_counter(segd_metrics_t *m, const char *name, const char *help,
                                    const char *labels)
{
    return new_family(m, T_COUNTER, name, help, labels, NULL, 0);
}

segd_metric_t *segd_metrics_gauge(segd_metrics_t *m, const char *name, const char *help,
                                  const char *labels)
{
    return new_family(m, T_GAUGE, name, help, labels, NULL, 0);
}

segd_metric_t *segd_metrics_histogram(segd_metrics_t *m, const char *name, const char *help,
                                      const char *labels, const double *bounds, size_t n)
{
    if (!n)
        return NULL;
    return new_family(m, T_HISTOGRAM, name, help, labels, bounds, n);
}

/* ---------- series ---------- */

static int series_is(const segd_metric_t *f, const series_t *s, const char *const *values)
{
    for (size_t i = 0; i < f->n_labels; i++)
        if (strcmp(s->values[i], values[i] ? values[i] : ""))
            return 0;
    return 1;
}

static series_t *find_series(segd_metric_t *f, const char *const *values)
{
    for (size_t i = 0; i < f->n_series; i++)
        if (series_is(f, &f->series[i], values))
            return &f->series[i];
    return NULL;
}

/* The series of values, made if new; NULL when out of memory. Under mu. */
static series_t *get_series(segd_metric_t *f, const char *const *values)
{
    series_t *s = find_series(f, values);
    if (s)
        return s;
    series_t *grown =
        segd_array_grow(f->series, &f->cap_series, f->n_series + 1, sizeof(*f->series));
    if (!grown)
        return NULL;
    f->series = grown;
    s = &f->series[f->n_series];
    memset(s, 0, sizeof(*s));
    int ok = 1;
    for (size_t i = 0; i < f->n_labels; i++)
        ok &= (s->values[i] = strdup(values[i] ? values[i] : "")) != NULL;
    if (ok && f->type == T_HISTOGRAM)
        ok = (s->counts = calloc(f->n_bounds + 1, sizeof(*s->counts))) != NULL;
    if (!ok) {
        free_series(f, s);
        return NULL;
    }
    f->n_series++;
    return s;
}

static void update(segd_metric_t *f, const char *const *values, double v, int how)
{
    if (!f || (f->n_labels && !values))
        return;
    pthread_mutex_lock(&f->m->mu);
    series_t *s = get_series(f, values);
    if (s && how == 0 && (f->type == T_GAUGE || v > 0))
        s->value += v;
    else if (s && how == 1)
        s->value = v;
    else if (s && how == 2) {
        size_t b = 0;
        while (b < f->n_bounds && v > f->bounds[b])
            b++;
        s->counts[b]++;
        s->count++;
        s->sum += v;
    }
    pthread_mutex_unlock(&f->m->mu);
}

void segd_metric_add(segd_metric_t *f, const char *const *values, double v)
{
    if (f && f->type != T_HISTOGRAM)
        update(f, values, v, 0);
}

void segd_metric_set(segd_metric_t *f, const char *const *values, double v)
{
    if (f && f->type != T_HISTOGRAM)
        update(f, values, v, 1);
}

void segd_metric_observe(segd_metric_t *f, const char *const *values, double v)
{
    if (f && f->type == T_HISTOGRAM && !isnan(v))
        update(f, values, v, 2);
}

void segd_metric_remove(segd_metric_t *f, const char *const *values)
{
    if (!f || (f->n_labels && !values))
        return;
    pthread_mutex_lock(&f->m->mu);
    series_t *s = find_series(f, values);
    if (s) { /* keeps creation order: a scrape reads series in a stable order */
        free_series(f, s);
        size_t i = (size_t)(s - f->series);
        memmove(s, s + 1, (f->n_series - i - 1) * sizeof(*s));
        f->n_series--;
    }
    pthread_mutex_unlock(&f->m->mu);
}

void segd_metric_clear(segd_metric_t *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->m->mu);
    for (size_t i = 0; i < f->n_series; i++)
        free_series(f, &f->series[i]);
    f->n_series = 0;
    pthread_mutex_unlock(&f->m->mu);
}

/* ---------- collectors ---------- */

segd_err_t segd_metrics_add_collector(segd_metrics_t *m, segd_metrics_collect_cb cb, void *ctx)
{
    pthread_mutex_lock(&m->mu);
    collector_t *grown = segd_array_grow(m->coll, &m->cap_coll, m->n_coll + 1, sizeof(*m->coll));
    if (grown) {
        m->coll = grown;
        m->coll[m->n_coll++] = (collector_t){cb, ctx};
    }
    pthread_mutex_unlock(&m->mu);
    return grown ? SEGD_OK : SEGD_ERR_NOMEM;
}

void segd_metrics_remove_collector(segd_metrics_t *m, segd_metrics_collect_cb cb, void *ctx)
{
    pthread_mutex_lock(&m->render_mu); /* not while a render runs it */
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_coll; i++)
        if (m->coll[i].cb == cb && m->coll[i].ctx == ctx) {
            memmove(&m->coll[i], &m->coll[i + 1], (m->n_coll - i - 1) * sizeof(*m->coll));
            m->n_coll--;
            break;
        }
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&m->render_mu);
}

/* Collectors run without mu: they update families, which takes it. */
static void run_collectors(segd_metrics_t *m)
{
    for (size_t i = 0;; i++) {
        pthread_mutex_lock(&m->mu);
        collector_t c = i < m->n_coll ? m->coll[i] : (collector_t){0};
        pthread_mutex_unlock(&m->mu);
        if (!c.cb)
            return;
        c.cb(c.ctx);
    }
}

/* ---------- exposition ---------- */

typedef struct out {
    segd_buf_t *b;
    segd_err_t err;
} out_t;

static void put(out_t *o, const char *s, size_t n)
{
    if (!o->err)
        o->err = segd_buf_append(o->b, s, n);
}

static void puts_(out_t *o, const char *s) { put(o, s, strlen(s)); }

/* HELP escapes \ and newline; label values also ". */
static void put_escaped(out_t *o, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            puts_(o, "\\\\");
        else if (*s == '\n')
            puts_(o, "\\n");
        else if (quote && *s == '"')
            puts_(o, "\\\"");
        else
            put(o, s, 1);
    }
}

/* Writes the shortest text that reads back as v, so 0.005 stays "0.005"
 * and counts stay integers. NaN and the infinities get the exposition
 * format's own words. */
static void format_value(double v, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* exact integers as such */
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void put_value(out_t *o, double v)
{
    char buf[64];
    format_value(v, buf, sizeof(buf));
    puts_(o, buf);
}

/* {a="x",b="y"} plus le for a bucket; nothing when there are no labels. */
static void put_labels(out_t *o, const segd_metric_t *f, const series_t *s, const char *le)
{
    if (!f->n_labels && !le)
        return;
    puts_(o, "{");
    for (size_t i = 0; i < f->n_labels; i++) {
        if (i)
            puts_(o, ",");
        puts_(o, f->labels[i]);
        puts_(o, "=\"");
        put_escaped(o, s->values[i], 1);
        puts_(o, "\"");
    }
    if (le) {
        puts_(o, f->n_labels ? ",le=\"" : "le=\"");
        puts_(o, le);
        puts_(o, "\"");
    }
    puts_(o, "}");
}

static void put_sample(out_t *o, const segd_metric_t *f, const char *suffix,
                       const series_t *s, const char *le, double v)
{
    puts_(o, f->name);
    puts_(o, suffix);
    put_labels(o, f, s, le);
    puts_(o, " ");
    put_value(o, v);
    puts_(o, "\n");
}

static void put_histogram(out_t *o, const segd_metric_t *f, const series_t *s)
{
    uint64_t cum = 0;
    char le[64];
    for (size_t b = 0; b <= f->n_bounds; b++) {
        cum += s->counts[b];
        if (b < f->n_bounds)
            format_value(f->bounds[b], le, sizeof(le));
        else
            snprintf(le, sizeof(le), "+Inf");
        put_sample(o, f, "_bucket", s, le, (double)cum);
    }
    put_sample(o, f, "_sum", s, NULL, s->sum);
    put_sample(o, f, "_count", s, NULL, (double)s->count);
}

static void put_family(out_t *o, const segd_metric_t *f)
{
    puts_(o, "# HELP ");
    puts_(o, f->name);
    puts_(o, " ");
    put_escaped(o, f->help, 0);
    puts_(o, "\n# TYPE ");
    puts_(o, f->name);
    puts_(o, " ");
    puts_(o, type_names[f->type]);
    puts_(o, "\n");
    for (size_t i = 0; i < f->n_series; i++)
        if (f->type == T_HISTOGRAM)
            put_histogram(o, f, &f->series[i]);
        else
            put_sample(o, f, "", &f->series[i], NULL, f->series[i].value);
}

segd_err_t segd_metrics_render(segd_metrics_t *m, segd_buf_t *b)
{
    out_t o = {b, SEGD_OK};
    pthread_mutex_lock(&m->render_mu);
    run_collectors(m);
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_fams; i++)
        if (m->fams[i]->n_series)
            put_family(&o, m->fams[i]);
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&m->render_mu);
    return o.err;
}
