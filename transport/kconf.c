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
