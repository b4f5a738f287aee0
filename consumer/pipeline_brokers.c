/* Whether the pipeline's brokers answer, for the log and /readyz: a probe at
 * start (transport/kprobe.h), the consumer's error_cb, which hears
 * librdkafka's "all brokers down" and the connection failure behind it, and a
 * check each second while none answers, which says when one does again. The
 * reason is kept under a mutex because /readyz reads it from the metrics
 * server's thread; everything else runs on the pipeline's thread. Without it
 * a cluster that does not answer was said nowhere: the log explained a group
 * assignment that never came (issue 30). */
#include "consumer/pipeline_int.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "transport/kprobe.h"

#define PROBE_MS 2000    /* the start's probe: a broker on the network answers in far less */
#define RECHECK_MS 1000  /* while down, a metadata request at most this often */
#define RECHECK_WAIT_MS 500

static void set_down(segd_pipeline_t *p, const char *why)
{
    pthread_mutex_lock(&p->brokers_mu);
    snprintf(p->brokers_down, sizeof(p->brokers_down), "%s", why);
    pthread_mutex_unlock(&p->brokers_mu);
}

int segd_pipeline_brokers_are_down(segd_pipeline_t *p)
{
    pthread_mutex_lock(&p->brokers_mu);
    int down = p->brokers_down[0] != 0;
    pthread_mutex_unlock(&p->brokers_mu);
    return down;
}

int segd_pipeline_brokers_down(segd_pipeline_t *p, char *out, size_t size)
{
    pthread_mutex_lock(&p->brokers_mu);
    int down = p->brokers_down[0] != 0;
    snprintf(out, size, "%s", p->brokers_down);
    pthread_mutex_unlock(&p->brokers_mu);
    return down;
}

/* Logs the episode's start once and keeps its reason for /readyz. */
static void went_down(segd_pipeline_t *p, const char *why)
{
    int was = segd_pipeline_brokers_are_down(p);
    set_down(p, why);
    p->brokers_down_messages = p->st.messages;
    p->brokers_check_ms = segd_mono_ms() + RECHECK_MS;
    if (!was)
        segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                 "%s; retrying: nothing is consumed until a broker answers, and /readyz "
                 "says why it is not ready", why);
}

int segd_pipeline_brokers_probe(segd_pipeline_t *p)
{
    const char *props[2 * SEGD_MAX_KAFKA_PROPS + 1];
    char why[512];
    segd_config_connection_props(p->cfg, props);
    segd_err_t err = segd_kprobe_brokers(p->cfg->brokers, props, PROBE_MS, why, sizeof(why));
    if (err == SEGD_ERR_KAFKA)
        went_down(p, why);
    return err == SEGD_ERR_KAFKA;
}

void segd_pipeline_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    segd_pipeline_t *p = segd_klog_owner(opaque);
    (void)rk;
    if (!p)
        return;
    if (err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__RESOLVE)
        segd_kprobe_cause(reason, p->broker_cause, sizeof(p->broker_cause));
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        char why[512];
        snprintf(why, sizeof(why), "no broker answers at %s (%s)", p->cfg->brokers,
                 p->broker_cause[0] ? p->broker_cause : reason);
        went_down(p, why);
        return;
    }
    /* what librdkafka logs itself when a client has no error_cb */
    segd_log(pipeline_log(p), SEGD_LOG_ERROR, "kafka", "%s: %s", rd_kafka_err2name(err), reason);
}

void segd_pipeline_brokers_step(segd_pipeline_t *p)
{
    if (!p->consumer || segd_mono_ms() < p->brokers_check_ms ||
        !segd_pipeline_brokers_are_down(p))
        return;
    p->brokers_check_ms = segd_mono_ms() + RECHECK_MS;
    char brokers[64];
    const struct rd_kafka_metadata *md = NULL;
    if (p->st.messages > p->brokers_down_messages) {
        /* a message consumed is a broker's answer: a metadata request slower
         * than RECHECK_WAIT_MS (a loaded or distant cluster) must not keep
         * /readyz saying the brokers are down while the pipeline consumes */
        snprintf(brokers, sizeof(brokers), "(consuming)");
    } else if (rd_kafka_metadata(p->consumer, 0, NULL, &md, RECHECK_WAIT_MS)) {
        return;
    } else {
        snprintf(brokers, sizeof(brokers), "%d", md->broker_cnt);
        rd_kafka_metadata_destroy(md);
    }
    set_down(p, "");
    p->broker_cause[0] = 0;
    segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "brokers answer again: consuming",
                "bootstrap=%s brokers=%s", p->cfg->brokers, brokers);
}
