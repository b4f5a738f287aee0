/* The publisher's change producer: its settings, its delivery reports
 * (tallied into the current cycle's acks), its message budget, and its
 * replacement after a fatal error. Used by publisher.c (made at start,
 * destroyed at the end) and publisher_cycle.c (renewed before a cycle);
 * it calls neither. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher/publisher_int.h"
#include "transport/kconf.h"

/* Tallies one delivery report into the current cycle's acks. A report whose
 * message carries another cycle's id is counted as stale and nothing more,
 * so that a failed cycle's late acknowledgement cannot let this cycle delete
 * outbox entries whose own messages were never acknowledged. */
void segd_publisher_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    acks_t *a = &((segd_publisher_t *)opaque)->acks;
    if ((uintptr_t)m->_private != (uintptr_t)a->cycle) {
        a->stale++;
        return;
    }
    if (m->err) {
        a->failed++;
        snprintf(a->error, sizeof(a->error), "%s", rd_kafka_err2str(m->err));
        return;
    }
    a->ok++;
    a->bytes += m->len;
    if (m->partition >= 0 && m->partition < MAX_PARTITIONS && m->offset + 1 > a->next[m->partition])
        a->next[m->partition] = m->offset + 1;
}

/* librdkafka's lines, with the publisher as the client's opaque. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    const segd_publisher_t *p = rd_kafka_opaque(rk);
    segd_kconf_log(p ? p->o.log : NULL, rk, level, fac, buf);
}

static segd_err_t make_producer(segd_publisher_t *p, char *errstr, size_t n)
{
    char queue_kb[24];
    snprintf(queue_kb, sizeof(queue_kb), "%" PRId64, p->o.queue_kb);
    const char *defaults[] = {"bootstrap.servers", p->o.brokers,
                              "enable.idempotence", "true",
                              "compression.codec", p->o.compression,
                              "linger.ms", "5",
                              "message.timeout.ms", "0", /* retry until acked or stopped */
                              /* memory.limit.mb's share; a full queue waits (produce_one) */
                              p->o.queue_kb > 0 ? "queue.buffering.max.kbytes" : NULL, queue_kb,
                              NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "changes producer", defaults, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "changes producer", p->o.kafka_props, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, segd_publisher_dr_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, p);
    char e[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "changes producer: %s", e);
    }
    p->rkt = rd_kafka_topic_new(p->rk, p->o.topic, NULL);
    if (p->rkt)
        return SEGD_OK;
    rd_kafka_destroy(p->rk);
    p->rk = NULL;
    return segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s", p->o.topic);
}

/* Nothing of it is waited for: a failed cycle's messages were purged, and
 * what it still held is in the outbox, which the next cycle sends. */
void segd_publisher_destroy_producer(segd_publisher_t *p)
{
    if (p->rkt)
        rd_kafka_topic_destroy(p->rkt);
    if (p->rk) {
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(p->rk, 1000);
        rd_kafka_destroy(p->rk);
    }
    p->rkt = NULL;
    p->rk = NULL;
}


/* The most a change event's value (framing and body) may take. librdkafka
 * refuses a message over message.max.bytes at once and for good, and a
 * broker limits the size of a record batch. The headroom of 1 KiB plus 1/64
 * of the limit covers the key (at most 256 bytes), the record and batch
 * headers (under 128 bytes) and a codec's growth on incompressible data
 * (0.4% for lz4). */
static size_t message_budget(segd_publisher_t *p)
{
    char v[32];
    size_t vlen = sizeof(v);
    long long max = 1000000; /* librdkafka's default */
    if (rd_kafka_conf_get(rd_kafka_conf(p->rk), "message.max.bytes", v, &vlen) ==
        RD_KAFKA_CONF_OK)
        max = atoll(v);
    long long budget = max - 1024 - max / 64;
    return budget > 4096 ? (size_t)budget : 4096;
}

/* A fatal error of the idempotent producer (librdkafka 2.0.2 makes one of a
 * lost sequence: "out of order sequence number ... sequence
 * desynchronization", seen after two of three brokers were SIGKILLed) fails
 * every later produce, so the publisher retried for ever with the outbox
 * kept and the change stream stopped until a restart (RELIABILITY.md,
 * defect C). A new producer gets a new producer id and the next cycle sends
 * the outbox again; a cache joins a resent delta as it joins a restart's
 * (DESIGN §5). A producer that could not be made is tried again here. */
segd_err_t segd_publisher_renew_producer(segd_publisher_t *p, char *errstr, size_t n)
{
    char why[512];
    rd_kafka_resp_err_t fatal = p->rk ? rd_kafka_fatal_error(p->rk, why, sizeof(why)) : 0;
    if (p->rk && !fatal)
        return SEGD_OK;
    if (fatal) {
        segd_log_kv(p->o.log, SEGD_LOG_WARN, "publisher",
                    "change producer had a fatal error; replacing it, the outbox is sent again",
                    "error=%s reason=\"%s\"", rd_kafka_err2name(fatal), why);
        segd_publisher_destroy_producer(p);
        pthread_mutex_lock(&p->mu);
        p->st.producer_renewals++;
        pthread_mutex_unlock(&p->mu);
    }
    segd_err_t err = make_producer(p, errstr, n);
    if (!err)
        p->max_message = message_budget(p);
    return err;
}

