/* The publisher's background thread (publisher.h): it cycles when kicked
 * and at least every 100 ms, backs off on failures and logs a fault once.
 * Also the figures other threads read (stats, latencies), kept under mu. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "publisher/publisher_int.h"

static void log_fault(segd_publisher_t *p, const char *msg)
{
    if (strcmp(p->last_fault, msg)) {
        segd_log(p->o.log, SEGD_LOG_WARN, "publisher",
                 "publisher waiting: %s (outbox kept, retrying)", msg);
        snprintf(p->last_fault, sizeof(p->last_fault), "%.500s", msg);
    }
}

static void *run(void *arg)
{
    segd_publisher_t *p = arg;
    int64_t wait = 100;
    char err[512];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->kicked = 0;
        pthread_mutex_unlock(&p->mu);
        size_t acked = 0;
        segd_err_t e = segd_publisher_cycle(p, &acked, err, sizeof(err));
        if (e) {
            pthread_mutex_lock(&p->mu);
            p->st.retries++;
            pthread_mutex_unlock(&p->mu);
            log_fault(p, err);
            segd_sleep_ms(wait);
            wait = wait * 2 > p->o.retry_max_ms ? p->o.retry_max_ms : wait * 2;
            continue;
        }
        if (p->last_fault[0]) {
            segd_log(p->o.log, SEGD_LOG_INFO, "publisher", "publisher resumed after: %s",
                     p->last_fault);
            p->last_fault[0] = 0;
        }
        wait = 100;
        if (acked)
            continue; /* more may be waiting */
        pthread_mutex_lock(&p->mu);
        if (!p->kicked && !p->stop) {
            struct timespec ts;
            segd_realtime_after(&ts, 100);
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

segd_err_t segd_publisher_start(segd_publisher_t *p, char *errstr, size_t n)
{
    if (p->running)
        return SEGD_OK;
    p->stop = 0;
    if (pthread_create(&p->thread, NULL, run, p))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "publisher thread");
    p->running = 1;
    return SEGD_OK;
}

void segd_publisher_kick(segd_publisher_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->kicked = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_stop(segd_publisher_t *p, int64_t drain_ms)
{
    if (!p->running)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->running = 0;
    char err[512];
    if (drain_ms > 0 && segd_publisher_drain(p, drain_ms, err, sizeof(err)))
        segd_log(p->o.log, SEGD_LOG_WARN, "publisher",
                 "publisher stopped with deltas left in the outbox (re-published "
                 "at next start): %s", err);
}

/* ---------- figures for other threads ---------- */

static int64_t percentile(const uint64_t *lat, double q)
{
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < LAT_BUCKETS; b++)
        total += lat[b];
    if (!total)
        return 0;
    for (int b = 0; b < LAT_BUCKETS; b++) {
        seen += lat[b];
        if ((double)seen >= q * (double)total)
            return b;
    }
    return 0;
}

void segd_publisher_reset_latency(segd_publisher_t *p)
{
    pthread_mutex_lock(&p->mu);
    memset(p->lat, 0, LAT_BUCKETS * sizeof(*p->lat));
    p->st.latency_max_ms = 0;
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_set_metrics(segd_publisher_t *p, segd_metrics_t *m)
{
    segd_metric_t *h = segd_metrics_histogram(
        m, "segd_change_latency_seconds",
        "Input event timestamp to change-topic acknowledgement of its delta, per outbox entry.",
        NULL, segd_metric_latency_buckets, segd_metric_latency_nbuckets);
    pthread_mutex_lock(&p->mu);
    p->latency = h;
    pthread_mutex_unlock(&p->mu);
}

void segd_publisher_get_stats(segd_publisher_t *p, segd_publisher_stats_t *st)
{
    pthread_mutex_lock(&p->mu);
    *st = p->st;
    st->oldest_unacked_ms = p->oldest_committed_ms ? segd_wall_ms() - p->oldest_committed_ms : 0;
    st->depth = segd_store_outbox_depth(p->store); /* exact, whatever the cycles do */
    st->latency_p50_ms = percentile(p->lat, 0.50);
    st->latency_p99_ms = percentile(p->lat, 0.99);
    pthread_mutex_unlock(&p->mu);
}
