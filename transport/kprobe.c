/* Broker reachability at start; see kprobe.h. */
#include "transport/kprobe.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "transport/kconf.h"

void segd_kprobe_cause(const char *reason, char *out, size_t size)
{
    if (!size)
        return;
    reason = reason ? reason : "";
    const char *tail = strstr(reason, " (after ");
    size_t len = tail ? (size_t)(tail - reason) : strlen(reason);
    const char *start = reason;
    for (const char *s = reason; s + 1 < reason + len; s++)
        if (s[0] == ':' && s[1] == ' ')
            start = s + 2;
    len -= (size_t)(start - reason);
    snprintf(out, size, "%.*s", (int)len, start);
}

/* The first connection failure of the probe, served by rd_kafka_poll on the
 * probing thread. */
typedef struct probe {
    char cause[256];
} probe_t;

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    probe_t *pr = opaque;
    if (pr->cause[0] || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        return;
    segd_kprobe_cause(reason, pr->cause, sizeof(pr->cause));
}

segd_err_t segd_kprobe_brokers(const char *brokers, const char *const *props, int timeout_ms,
                               char *errstr, size_t n)
{
    probe_t pr = {{0}};
    const char *const defaults[] = {"bootstrap.servers", brokers, "client.id", "segd-probe",
                                    NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "probe", defaults, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "probe", props, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_log_cb(conf, NULL); /* its connection failures are said below */
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_opaque(conf, &pr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errbuf, sizeof(errbuf));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "broker probe: %s", errbuf);
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rd_kafka_metadata(rk, 0, NULL, &md, timeout_ms);
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_poll(rk, 0); /* serves the connection errors to error_cb */
    rd_kafka_destroy(rk);
    if (!kerr)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_KAFKA, errstr, n, "no broker answers at %s (%s)", brokers,
                     pr.cause[0] ? pr.cause : rd_kafka_err2str(kerr));
}
