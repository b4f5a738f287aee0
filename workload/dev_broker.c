/* In-process mock Kafka cluster; see dev_broker.h. The mock cluster needs an
 * rd_kafka_t to live in; a bare producer handle serves. */
#include "workload/dev_broker.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdlib.h>

struct segd_dev_broker {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mcl;
};

segd_err_t segd_dev_broker_new(segd_dev_broker_t **out, int brokers, int partitions,
                               const char *const *topics, size_t n_topics, char *errstr,
                               size_t n)
{
    char err[512];
    segd_dev_broker_t *b = calloc(1, sizeof(*b));
    if (!b)
        return SEGD_ERR_NOMEM;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err));
    b->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!b->rk) {
        rd_kafka_conf_destroy(conf);
        free(b);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "mock cluster handle: %s", err);
    }
    b->mcl = rd_kafka_mock_cluster_new(b->rk, brokers);
    if (!b->mcl) {
        segd_dev_broker_destroy(b);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "cannot start the mock cluster");
    }
    for (size_t i = 0; i < n_topics; i++) {
        rd_kafka_resp_err_t kerr =
            rd_kafka_mock_topic_create(b->mcl, topics[i], partitions, brokers < 3 ? brokers : 3);
        if (kerr) {
            segd_dev_broker_destroy(b);
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "create topic %s: %s", topics[i],
                             rd_kafka_err2str(kerr));
        }
    }
    *out = b;
    return SEGD_OK;
}

void segd_dev_broker_destroy(segd_dev_broker_t *b)
{
    if (!b)
        return;
    if (b->mcl)
        rd_kafka_mock_cluster_destroy(b->mcl);
    rd_kafka_destroy(b->rk);
    free(b);
}

const char *segd_dev_broker_bootstraps(const segd_dev_broker_t *b)
{
    return rd_kafka_mock_cluster_bootstraps(b->mcl);
}

void segd_dev_broker_set_down(segd_dev_broker_t *b, int32_t id, int down)
{
    if (down)
        rd_kafka_mock_broker_set_down(b->mcl, id);
    else
        rd_kafka_mock_broker_set_up(b->mcl, id);
}

rd_kafka_mock_cluster_t *segd_dev_broker_mock(segd_dev_broker_t *b)
{
    return b->mcl;
}
