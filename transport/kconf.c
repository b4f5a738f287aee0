/* See kconf.h. */
#include "transport/kconf.h"

#include <pthread.h>
#include <stdlib.h>

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
