/* See kconf.h. */
#include "transport/kconf.h"

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
