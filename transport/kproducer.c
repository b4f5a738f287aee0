/* The acknowledged producer; see kproducer.h. */
#include "transport/kproducer.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "transport/kconf.h"

struct segd_kproducer {
    rd_kafka_t *rk;
    const char *brokers;
    const segd_log_t *log;
    segd_kproducer_counts_t n;
    char first_dr_err[160]; /* the first failed delivery report's error */
    char broker_err[400];   /* the last broker (transport) error */
    atomic_uint fail_lines; /* librdkafka "FAIL" lines seen (log_cb: its threads) */
};

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    segd_kproducer_t *kp = opaque;
    if (!m->err) {
        kp->n.delivered++;
        return;
    }
    if (!kp->n.failed++)
        snprintf(kp->first_dr_err, sizeof(kp->first_dr_err), "%s", rd_kafka_err2str(m->err));
}

/* librdkafka prefixes a broker's errors with "HOST:PORT/ID: "; the report
 * names the brokers itself, so only the cause is kept. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    segd_kproducer_t *kp = opaque;
    const char *colon = strstr(reason, ": ");
    const char *slash = strchr(reason, '/');
    if (colon && slash && slash < colon)
        reason = colon + 2;
    /* "1/1 brokers are down" says less than the connection error before it */
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && kp->broker_err[0])
        return;
    snprintf(kp->broker_err, sizeof(kp->broker_err), "%s", reason);
}

/* Through segd's logger; a broker that cannot be reached makes librdkafka
 * log a FAIL line per reconnect, so only the first is shown: the report
 * names the brokers and the last cause. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    segd_kproducer_t *kp = rd_kafka_opaque(rk);
    if (fac && !strcmp(fac, "FAIL") && atomic_fetch_add(&kp->fail_lines, 1) > 0)
        return;
    segd_kconf_log(kp->log, rk, level, fac, buf);
}

static segd_err_t configure(const segd_kproducer_opts_t *o, rd_kafka_conf_t *conf,
                            char *errstr, size_t n)
{
    const char *what = o->what ? o->what : "producer";
    char timeout[24];
    segd_err_t err = segd_kconf_set(conf, what, "bootstrap.servers", o->brokers, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, what, o->defaults, errstr, n);
    snprintf(timeout, sizeof(timeout), "%d", o->delivery_timeout_ms);
    if (!err && o->delivery_timeout_ms > 0)
        err = segd_kconf_set(conf, what, "message.timeout.ms", timeout, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, what, o->kafka_props, errstr, n);
    if (!err && o->configure)
        err = o->configure(o->configure_ctx, conf, errstr, n);
    return err;
}

segd_err_t segd_kproducer_new(segd_kproducer_t **out, const segd_kproducer_opts_t *o,
                              char *errstr, size_t n)
{
    *out = NULL;
    segd_kproducer_t *kp = calloc(1, sizeof(*kp));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!kp || !conf) {
        free(kp);
        if (conf)
            rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "producer: out of memory");
    }
    kp->brokers = o->brokers;
    kp->log = o->log;
    atomic_init(&kp->fail_lines, 0);
    segd_err_t err = configure(o, conf, errstr, n);
    if (!err) {
        char why[512];
        rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
        rd_kafka_conf_set_error_cb(conf, error_cb);
        rd_kafka_conf_set_log_cb(conf, log_cb);
        rd_kafka_conf_set_opaque(conf, kp);
        /* rd_kafka_new owns conf only when it succeeds */
        if ((kp->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why))))
            conf = NULL;
        else
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "%s: %s",
                            o->what ? o->what : "producer", why);
    }
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (err) {
        free(kp);
        return err;
    }
    *out = kp;
    return SEGD_OK;
}

static int stopped(volatile sig_atomic_t *stop) { return stop && *stop; }

segd_err_t segd_kproducer_send(segd_kproducer_t *kp, const char *topic, const void *key,
                               size_t key_len, const void *value, size_t value_len,
                               volatile sig_atomic_t *stop, char *errstr, size_t n)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            kp->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
            RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_END);
        if (!err) {
            kp->n.queued++;
            return SEGD_OK;
        }
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "produce: %s", rd_kafka_err2str(err));
        if (stopped(stop))
            return SEGD_ERR_ABORTED;
        rd_kafka_poll(kp->rk, 10);
    }
}

void segd_kproducer_poll(segd_kproducer_t *kp) { rd_kafka_poll(kp->rk, 0); }

void segd_kproducer_flush(segd_kproducer_t *kp, int wait_ms, volatile sig_atomic_t *stop)
{
    int64_t end = segd_mono_ms() + wait_ms;
    while (rd_kafka_outq_len(kp->rk) > 0 && !stopped(stop) && segd_mono_ms() < end)
        rd_kafka_flush(kp->rk, 200);
}

void segd_kproducer_interrupted(segd_kproducer_t *kp) { kp->n.interrupted = 1; }

void segd_kproducer_drain(segd_kproducer_t *kp, volatile sig_atomic_t *stop)
{
    while (rd_kafka_outq_len(kp->rk) > 0 && !stopped(stop))
        rd_kafka_flush(kp->rk, 200);
    if (rd_kafka_outq_len(kp->rk) > 0) {
        kp->n.interrupted = 1;
        rd_kafka_purge(kp->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(kp->rk, 5000);
    }
}

void segd_kproducer_counts(const segd_kproducer_t *kp, segd_kproducer_counts_t *c)
{
    *c = kp->n;
}

segd_err_t segd_kproducer_report(const segd_kproducer_t *kp, const char *topic,
                                 const char *noun, uint64_t total, char *errstr, size_t n)
{
    const segd_kproducer_counts_t *c = &kp->n;
    if (c->delivered >= c->queued && !c->interrupted)
        return SEGD_OK;
    char head[200], cause[700] = "";
    if (c->interrupted)
        snprintf(head, sizeof(head), "interrupted (%llu of %llu %s queued): ",
                 (unsigned long long)c->queued, (unsigned long long)total, noun);
    else
        head[0] = '\0';
    if (c->delivered < c->queued && c->delivered == 0 && kp->broker_err[0])
        snprintf(cause, sizeof(cause), ": no broker answered at %s: %s", kp->brokers,
                 kp->broker_err);
    else if (c->delivered < c->queued)
        snprintf(cause, sizeof(cause), ": %s (brokers %s%s%s)",
                 kp->first_dr_err[0] ? kp->first_dr_err : "not acknowledged", kp->brokers,
                 kp->broker_err[0] ? "; last broker error: " : "", kp->broker_err);
    return segd_errf(c->interrupted ? SEGD_ERR_ABORTED : SEGD_ERR_KAFKA, errstr, n,
                     "%sdelivered %llu of %llu %s to %s%s", head,
                     (unsigned long long)c->delivered, (unsigned long long)c->queued, noun, topic,
                     cause);
}

void segd_kproducer_destroy(segd_kproducer_t *kp)
{
    if (!kp)
        return;
    if (kp->rk)
        rd_kafka_destroy(kp->rk);
    free(kp);
}
