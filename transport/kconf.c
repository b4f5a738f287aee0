/* See kconf.h. */
#include "transport/kconf.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/clock.h"

segd_err_t segd_kconf_set(rd_kafka_conf_t *c, const char *who, const char *key,
                          const char *value, char *errstr, size_t n)
{
    char e[512];
    if (rd_kafka_conf_set(c, key, value, e, sizeof(e)) != RD_KAFKA_CONF_OK)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: kafka.%s: %s", who, key, e);
    return SEGD_OK;
}

segd_err_t segd_kconf_apply(rd_kafka_conf_t *c, const char *who, const char *const *kv,
                            char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && kv && kv[i]; i += 2)
        err = segd_kconf_set(c, who, kv[i], kv[i + 1], errstr, n);
    return err;
}

static segd_log_level_t from_syslog(int level)
{
    return level <= 3 ? SEGD_LOG_ERROR
           : level == 4 ? SEGD_LOG_WARN
           : level <= 6 ? SEGD_LOG_INFO
                        : SEGD_LOG_DEBUG;
}

void segd_kconf_log(const segd_log_t *log, const rd_kafka_t *rk, int level, const char *fac,
                    const char *buf)
{
    segd_log_kv(log, from_syslog(level), "kafka", buf, "client=%s facility=%s",
                rk ? rd_kafka_name(rk) : "-", fac ? fac : "-");
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    segd_kconf_log(rd_kafka_opaque(rk), rk, level, fac, buf);
}

void segd_kconf_set_logger(rd_kafka_conf_t *c, const segd_log_t *log)
{
    rd_kafka_conf_set_log_cb(c, log_cb);
    rd_kafka_conf_set_opaque(c, (void *)log);
}

struct segd_klog {
    pthread_mutex_t mu; /* held while a line is written, so a cut waits for it */
    const segd_log_t *log;
    int cut;
    void *owner;
};

segd_klog_t *segd_klog_new(const segd_log_t *log, void *owner)
{
    segd_klog_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    pthread_mutex_init(&k->mu, NULL);
    k->log = log;
    k->owner = owner;
    return k;
}

static void klog_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    segd_klog_t *k = rd_kafka_opaque(rk);
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    if (!k->cut)
        segd_kconf_log(k->log, rk, level, fac, buf);
    pthread_mutex_unlock(&k->mu);
}

void segd_klog_attach(segd_klog_t *k, rd_kafka_conf_t *c)
{
    rd_kafka_conf_set_log_cb(c, klog_cb);
    rd_kafka_conf_set_opaque(c, k);
}

void *segd_klog_owner(void *opaque) { return opaque ? ((segd_klog_t *)opaque)->owner : NULL; }

void segd_klog_cut(segd_klog_t *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->cut = 1;
    k->log = NULL;
    pthread_mutex_unlock(&k->mu);
}

void segd_klog_free(segd_klog_t *k)
{
    if (!k)
        return;
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* One bounded destroy: whoever of the waiter and the destroy's thread is
 * last frees it. */
typedef struct kdestroy_job {
    rd_kafka_t *rk;
    int flags;
    void (*done)(void *ctx);
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished, abandoned;
} kdestroy_job_t;

static void job_free(kdestroy_job_t *j)
{
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void *kdestroy_main(void *arg)
{
    kdestroy_job_t *j = arg;
    rd_kafka_destroy_flags(j->rk, j->flags);
    pthread_mutex_lock(&j->mu);
    j->finished = 1;
    int abandoned = j->abandoned;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (abandoned) { /* nobody waits any more: what follows is this thread's */
        if (j->done)
            j->done(j->ctx);
        job_free(j);
    }
    return NULL;
}

int segd_kdestroy_bounded(rd_kafka_t *rk, int flags, segd_klog_t *klog, int64_t wait_ms,
                          void (*done)(void *ctx), void *ctx)
{
    kdestroy_job_t *j = calloc(1, sizeof(*j));
    pthread_t th;
    if (j) {
        *j = (kdestroy_job_t){.rk = rk, .flags = flags, .done = done, .ctx = ctx};
        pthread_mutex_init(&j->mu, NULL);
        pthread_cond_init(&j->cv, NULL);
    }
    if (!j || pthread_create(&th, NULL, kdestroy_main, j)) { /* no thread: here */
        if (j)
            job_free(j);
        rd_kafka_destroy_flags(rk, flags);
        if (done)
            done(ctx);
        return 1;
    }
    struct timespec until;
    segd_realtime_after(&until, wait_ms > 0 ? wait_ms : 0);
    pthread_mutex_lock(&j->mu);
    while (wait_ms > 0 && !j->finished && pthread_cond_timedwait(&j->cv, &j->mu, &until) == 0)
        ;
    int finished = j->finished;
    if (!finished) {
        j->abandoned = 1;
        segd_klog_cut(klog);
    }
    pthread_mutex_unlock(&j->mu);
    if (!finished) {
        pthread_detach(th);
        return 0;
    }
    pthread_join(th, NULL);
    job_free(j);
    if (done)
        done(ctx);
    return 1;
}
