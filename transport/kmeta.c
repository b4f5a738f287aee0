/* Topic partition counts from broker metadata; see kmeta.h. */
#include "transport/kmeta.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

segd_err_t segd_kmeta_topic_written(rd_kafka_t *rk, const char *topic, int timeout_ms,
                                    int *written, char *errstr, size_t n)
{
    *written = 0;
    int64_t deadline = segd_mono_ms() + timeout_ms;
    int32_t count;
    segd_err_t err = segd_kmeta_partitions(rk, topic, timeout_ms, &count, errstr, n);
    /* one deadline for the whole walk, not one per partition: a topic of 64
     * partitions must not hold the caller 64 timeouts */
    for (int32_t p = 0; !err && !*written && p < count; p++) {
        int64_t lo, hi, left = deadline - segd_mono_ms();
        if (left <= 0) {
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s: no answer in %d ms "
                            "(%d of %d partitions asked)", topic, timeout_ms, (int)p,
                            (int)count);
            break;
        }
        rd_kafka_resp_err_t kerr =
            rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, (int)left);
        if (kerr)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s [%d]: %s", topic,
                            (int)p, rd_kafka_err2str(kerr));
        else
            *written = hi > 0;
    }
    return err;
}

/* A big-endian reader over untrusted bytes: every read is bounds-checked,
 * a short read sets bad. */
typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd_t;

static int32_t rd_int(rd_t *r, int bytes)
{
    if (r->bad || r->end - r->p < bytes) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | *r->p++;
    return bytes == 2 ? (int16_t)v : (int32_t)v;
}

/* A member's host as the group coordinator reports it is Java's
 * InetAddress.toString, "/127.0.0.1" or "name/127.0.0.1": the name when
 * there is one, else the address, without the slash. Sets *len. */
static const char *bare_host(const char *h, int *len)
{
    h = h ? h : "";
    const char *slash = strchr(h, '/');
    if (slash == h)
        h++;
    *len = slash && slash > h ? (int)(slash - h) : (int)strlen(h);
    return h;
}

/* Fills owners from one member's assignment: Kafka's ConsumerProtocol
 * Assignment (int16 version, [topic string, [int32 partition]], bytes user
 * data). A version 0..3 body starts the same way; anything that does not
 * parse assigns nothing. */
static void note_member(const struct rd_kafka_group_member_info *m, const char *topic,
                        int32_t partitions, char (*owners)[SEGD_KMETA_OWNER_LEN])
{
    int hlen;
    const char *host = bare_host(m->client_host, &hlen);
    rd_t r = {m->member_assignment, (const uint8_t *)m->member_assignment +
                                        m->member_assignment_size, m->member_assignment == NULL};
    rd_int(&r, 2);
    int32_t topics = rd_int(&r, 4);
    for (int32_t t = 0; !r.bad && t < topics; t++) {
        int32_t len = rd_int(&r, 2);
        if (len < 0 || r.end - r.p < len)
            return;
        int ours = (size_t)len == strlen(topic) && !memcmp(r.p, topic, (size_t)len);
        r.p += len;
        int32_t parts = rd_int(&r, 4);
        for (int32_t i = 0; !r.bad && i < parts; i++) {
            int32_t p = rd_int(&r, 4);
            if (!r.bad && ours && p >= 0 && p < partitions)
                snprintf(owners[p], SEGD_KMETA_OWNER_LEN, "%.200s host=%.*s",
                         m->client_id && *m->client_id ? m->client_id : m->member_id,
                         hlen < 100 ? hlen : 100, host);
        }
    }
}

/* The legacy group API (ListGroups + DescribeGroups), not the admin API's
 * DescribeConsumerGroups: in librdkafka 2.0.2 the latter, answered
 * "unsupported" (the mock cluster), leaves rd_kafka_destroy deadlocked. */
segd_err_t segd_kmeta_group_owners(rd_kafka_t *rk, const char *group, const char *topic,
                                   int32_t partitions, char (*owners)[SEGD_KMETA_OWNER_LEN],
                                   int timeout_ms, char *errstr, size_t n)
{
    for (int32_t p = 0; p < partitions; p++)
        owners[p][0] = 0;
    const struct rd_kafka_group_list *gl = NULL;
    rd_kafka_resp_err_t kerr = rd_kafka_list_groups(rk, group, &gl, timeout_ms);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "group %s: %s", group,
                         rd_kafka_err2str(kerr));
    segd_err_t err = SEGD_OK;
    if (gl->group_cnt != 1)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "group %s: not described", group);
    else if (gl->groups[0].err)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "group %s: %s", group,
                        rd_kafka_err2str(gl->groups[0].err));
    else if (strcmp(gl->groups[0].state, "Stable"))
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "group %s is %s, not Stable: its "
                        "assignment is changing", group, gl->groups[0].state);
    for (int i = 0; !err && i < gl->groups[0].member_cnt; i++)
        note_member(&gl->groups[0].members[i], topic, partitions, owners);
    rd_kafka_group_list_destroy(gl);
    return err;
}
