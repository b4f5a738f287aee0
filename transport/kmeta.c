/* Topic partition counts from broker metadata; see kmeta.h. */
#include "transport/kmeta.h"

#include "base/clock.h"

segd_err_t segd_kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms,
                                 int32_t *count, char *errstr, size_t n)
{
    *count = 0;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s: %s", topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    rd_kafka_topic_destroy(rkt);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "metadata of %s: %s", topic,
                         rd_kafka_err2str(kerr));
    segd_err_t err = SEGD_OK;
    rd_kafka_resp_err_t terr =
        md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    if (terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
        terr == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
        (!terr && md->topics[0].partition_cnt <= 0))
        err = segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "topic %s does not exist", topic);
    else if (terr)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s: %s", topic,
                        rd_kafka_err2str(terr));
    else
        *count = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return err;
}

segd_err_t segd_kmeta_partitions_wait(rd_kafka_t *rk, const char *topic, int wait_ms,
                                      int32_t *count, char *errstr, size_t n)
{
    int64_t deadline = segd_mono_ms() + wait_ms;
    for (;;) {
        int64_t left = deadline - segd_mono_ms();
        segd_err_t err = segd_kmeta_partitions(rk, topic, left > 1000 ? (int)left : 1000,
                                               count, errstr, n);
        if (err != SEGD_ERR_NOTFOUND || segd_mono_ms() >= deadline)
            return err;
        segd_sleep_ms(200);
    }
}
