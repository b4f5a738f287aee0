/* The pipeline's group consumer: the topics it needs checked before it
 * joins, the librdkafka settings it is made with (memory.limit.mb's fetch
 * share, static membership with the store's instance id, the operator's
 * kafka.* settings last), the detection of librdkafka's mock cluster, and
 * the subscription. Called from segd_pipeline_new, and again by
 * segd_pipeline_rebuild after a fatal error. */
#include "consumer/pipeline_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/fetch_conf.h"
#include "consumer/static_member.h"
#include "transport/kconf.h"
#include "transport/kmeta.h"

#define CLUSTER_ID_WAIT_MS 3000 /* is it librdkafka's mock? (mock_brokers) */
#define MOCK_SESSION_TIMEOUT_MS "6000" /* the consumer's default there */
#define TOPIC_WAIT_MS 10000 /* a topic being auto-created answers "unknown" first */

/* Every topic segd run reads or dead-letters to must exist before the group is
 * joined (DESIGN §7.2). They are asked for through the dead-letter producer,
 * whose metadata requests let brokers that auto-create topics (the dev broker)
 * create them. Where brokers do not create topics (production Kafka), a missing
 * topic stops segd run at start, named, with nothing consumed. Brokers that do
 * not answer are no reason to refuse, because ingest waits for them: a short
 * probe says so first (pipeline_brokers.c), and the topics go unchecked. */
segd_err_t segd_pipeline_check_topics(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    rd_kafka_t *rk = segd_dlq_producer(p->dlq);
    char why[512];
    int32_t count;
    if (segd_pipeline_brokers_probe(p)) /* said, and no use waiting for each topic */
        return SEGD_OK;
    for (size_t i = 0; rk && i <= cfg->n_topics; i++) {
        const char *topic = i < cfg->n_topics ? cfg->topics[i] : cfg->dlq_topic;
        if (!topic || !*topic)
            continue;
        segd_err_t err = segd_kmeta_partitions_wait(rk, topic, TOPIC_WAIT_MS, &count, why,
                                                    sizeof(why));
        if (err == SEGD_ERR_NOTFOUND)
            return segd_errf(err, errstr, n, "%s topic %s%s does not exist and the brokers "
                             "did not create it (automatic topic creation off): create it "
                             "before starting segd run", i < cfg->n_topics ? "input" : "dead-letter",
                             topic, i < cfg->n_topics ? "" : " (dlq.topic)");
        if (err) { /* unreachable: the consumer and the DLQ's deliveries wait for them */
            segd_log(pipeline_log(p), SEGD_LOG_WARN, "pipeline",
                     "topics not checked at start: %s", why);
            return SEGD_OK;
        }
    }
    return SEGD_OK;
}

/* Static membership (KIP-345): a restarted member with the same
 * group.instance.id takes its old place at once instead of waiting for the
 * group to time the old one out. The id is the store's (one store, one
 * member) with its input topics' digest (static_member.h: other topics make
 * a new member); group.instance.id overrides it, and an empty value turns
 * static membership off. */
static segd_err_t instance_id(segd_pipeline_t *p, char *out, size_t size, char *errstr,
                              size_t n)
{
    if (p->cfg->group_instance_id) {
        snprintf(out, size, "%s", p->cfg->group_instance_id);
        return SEGD_OK;
    }
    char store_id[128];
    segd_err_t err = segd_store_instance_id(p->store, store_id, sizeof(store_id), errstr, n);
    return err ? err
               : segd_static_member_id(store_id, p->cfg->topics, p->cfg->n_topics, out, size,
                                       errstr, n);
}

/* librdkafka's errors for the group consumer, on the polling thread (its
 * opaque is the klog route, whose owner is p). A refused login (wrong
 * sasl.username/password or mechanism) or a failed TLS handshake (a broker
 * certificate that ssl.ca.location does not trust) is said once, as an
 * error naming the settings to check, and stops segd run at the next step:
 * librdkafka would retry it forever with the same settings, which never
 * succeeds, while a restart with fixed ones does. Everything else is
 * transient, retried by librdkafka, and only logged. reason never holds a
 * password: librdkafka does not put credentials in its messages. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    segd_pipeline_t *p = segd_klog_owner(opaque);
    if (!p)
        return;
    const char *check = err == RD_KAFKA_RESP_ERR__AUTHENTICATION
                            ? "SASL authentication failed: check kafka.sasl.mechanism, "
                              "kafka.sasl.username and kafka.sasl.password"
                        : err == RD_KAFKA_RESP_ERR__SSL
                            ? "TLS failed (a certificate verify failed means the broker's "
                              "certificate is not signed by a CA in kafka.ssl.ca.location)"
                            : NULL;
    /* librdkafka 2.0.2 also reports a broker that went away in the middle of
     * the SASL handshake ("... Local: Broker transport failure") as an
     * authentication error, and an unclean TLS close as an SSL one: those
     * are transient, and only a refusal or a certificate that does not
     * verify stops segd run (review) */
    if (check && (strstr(reason, "Local: ") ||
                  (err == RD_KAFKA_RESP_ERR__SSL && !strstr(reason, "verify failed"))))
        check = NULL;
    if (!check) /* unreachable brokers and the rest (consumer/pipeline_brokers.c) */
        return segd_pipeline_error_cb(rk, err, reason, opaque);
    if (p->refused[0])
        return;
    snprintf(p->refused, sizeof(p->refused), "kafka: %s: %s", check, reason);
    segd_log(pipeline_log(p), SEGD_LOG_ERROR, "pipeline",
             "%s; segd run stops: retrying with the same "
             "settings never succeeds", p->refused);
}

/* Makes the group consumer. It is a static member when static_id is not empty,
 * and it gets a short session timeout on librdkafka's mock (mock_brokers). Its
 * names (client_id, static_id) and session timeout are only defaults, because
 * the operator's kafka.* settings are applied after them and win. */
static segd_err_t new_consumer(segd_pipeline_t *p, const char *client_id,
                               const char *static_id, int mock, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    char timeout[24];
    const char *const defaults[] = {
        "bootstrap.servers", cfg->brokers, "enable.auto.commit", "false",
        "enable.auto.offset.store", "false", "partition.assignment.strategy",
        "cooperative-sticky", "enable.partition.eof", "false", "group.id", cfg->group,
        "auto.offset.reset", cfg->offset_reset, "client.id", client_id,
        /* the mock holds every rebalance for session.timeout.ms less 1 s */
        "session.timeout.ms", mock ? MOCK_SESSION_TIMEOUT_MS : "45000",
        static_id[0] ? "group.instance.id" : NULL, static_id, NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "consumer", defaults, errstr, n);
    if (!err)
        err = segd_fetch_conf_apply(conf, "consumer", cfg, SEGD_FETCH_MAIN, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++) /* the operator's settings win */
        err = segd_kconf_set(conf, "consumer", cfg->kafka[i].key, cfg->kafka[i].value, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    size_t len = sizeof(timeout);
    p->session_timeout_ms = rd_kafka_conf_get(conf, "session.timeout.ms", timeout, &len) ==
                                    RD_KAFKA_CONF_OK
                                ? strtoll(timeout, NULL, 10)
                                : 0;
    rd_kafka_conf_set_rebalance_cb(conf, segd_pipeline_rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, segd_pipeline_commit_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (!p->klog && !(p->klog = segd_klog_new(pipeline_log(p), p))) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "consumer: out of memory");
    }
    segd_klog_attach(p->klog, conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "consumer: %s", errbuf);
    }
    rd_kafka_poll_set_consumer(rk);
    segd_pipeline_consumer_set(p, rk);
    return SEGD_OK;
}

void segd_pipeline_consumer_set(segd_pipeline_t *p, rd_kafka_t *rk)
{
    pthread_mutex_lock(&p->consumer_mu);
    p->consumer = rk;
    pthread_mutex_unlock(&p->consumer_mu);
}

struct rd_kafka_s *segd_pipeline_consumer(segd_pipeline_t *p)
{
    return p->consumer;
}

/* Whether the brokers are librdkafka's mock cluster (`segd dev-broker` and the
 * tests' brokers), which names itself "mockCluster<hex>". The mock of 2.0.2
 * needs two allowances. It ignores group.instance.id, so a static member that
 * stops does not leave, its restart is a new member, and the old one stays until
 * its session times out. It also holds every rebalance of a group that has
 * members for session.timeout.ms less 1 s (rd_kafka_mock_cgrp_rebalance),
 * restarts included, which with the default 45 s means 44 s of /readyz
 * "unassigned". Brokers that do not answer within the wait, or that did not
 * answer the start's probe (not waited for), are taken for real ones. */
static int mock_brokers(rd_kafka_t *rk)
{
    char *id = rd_kafka_clusterid(rk, CLUSTER_ID_WAIT_MS);
    int mock = id && !strncmp(id, "mockCluster", strlen("mockCluster"));
    if (id)
        rd_kafka_mem_free(rk, id);
    return mock;
}

segd_err_t segd_pipeline_subscribe(segd_pipeline_t *p, char *errstr, size_t n)
{
    const segd_config_t *cfg = p->cfg;
    char member[256], client_id[256];
    p->subscribed_s = segd_mono_s(); /* "waiting for the group's assignment" counts from here */
    segd_err_t err = instance_id(p, member, sizeof(member), errstr, n);
    /* the name `segd owner` gives the member: its store's instance id (DESIGN
     * §7), static membership or not */
    char why[256];
    if (err || segd_store_instance_id(p->store, client_id, sizeof(client_id), why, sizeof(why)))
        snprintf(client_id, sizeof(client_id), "segd");
    if (!err)
        err = new_consumer(p, client_id, member, 0, errstr, n);
    if (!err && !segd_pipeline_brokers_are_down(p) && mock_brokers(p->consumer)) {
        rd_kafka_t *probe = p->consumer;
        segd_pipeline_consumer_set(p, NULL);
        rd_kafka_destroy(probe); /* never subscribed: nothing to leave */
        member[0] = 0;
        err = new_consumer(p, client_id, member, 1, errstr, n);
        if (!err)
            segd_log(pipeline_log(p), SEGD_LOG_INFO, "pipeline",
                     "the brokers are librdkafka's mock cluster (segd dev-broker): it "
                     "ignores group.instance.id, so static membership is off and this member "
                     "leaves the group when it stops, and it holds every rebalance for "
                     "session.timeout.ms less 1 s, so session.timeout.ms is %" PRId64
                     " ms (default " MOCK_SESSION_TIMEOUT_MS " here, 45000 on Kafka): a join "
                     "or restart waits that long", p->session_timeout_ms);
    }
    if (err)
        return err;
    char client[256];
    size_t client_len = sizeof(client);
    if (rd_kafka_conf_get(rd_kafka_conf(p->consumer), "client.id", client, &client_len) !=
        RD_KAFKA_CONF_OK)
        snprintf(client, sizeof(client), "?");
    /* the names `segd owner` and the brokers' group tools show for this member */
    segd_log_kv(pipeline_log(p), SEGD_LOG_INFO, "pipeline", "group member",
                "group=%s client_id=%s group_instance_id=%s session_timeout_ms=%" PRId64,
                cfg->group, client, member[0] ? member : "(none)", p->session_timeout_ms);
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int)cfg->n_topics);
    for (size_t i = 0; i < cfg->n_topics; i++)
        rd_kafka_topic_partition_list_add(topics, cfg->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t kerr = rd_kafka_subscribe(p->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "subscribe: %s", rd_kafka_err2str(kerr))
                : SEGD_OK;
}
