/* The publisher's construction and teardown (publisher.h): the options'
 * defaults, the change producer and its settings, and the change positions
 * already recorded in the store. One producer serves one thread at a time
 * (the background thread, or the caller of cycle/drain), and its delivery
 * reports run inside rd_kafka_flush on that thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher/publisher_int.h"
#include "transport/kconf.h"

void segd_publisher_opts_default(segd_publisher_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->topic = SEGD_DEFAULT_CHANGES_TOPIC;
    o->framing = SEGD_CHANGE_SINGLE_OBJECT;
    o->compression = "lz4";
    o->partitioner = SEGD_PARTITIONER_MURMUR2;
    o->max_entries = 64;
    o->retry_max_ms = 5000;
    o->ack_timeout_ms = 30000;
    o->max_delta_entries = 32768; /* ~16 B each: well under 1 MB messages */
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
static void destroy_producer(segd_publisher_t *p)
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
        destroy_producer(p);
        pthread_mutex_lock(&p->mu);
        p->st.producer_renewals++;
        pthread_mutex_unlock(&p->mu);
    }
    segd_err_t err = make_producer(p, errstr, n);
    if (!err)
        p->max_message = message_budget(p);
    return err;
}

int32_t segd_publisher_partitions(const segd_publisher_t *p) { return p->partitions; }

static int load_known(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    segd_publisher_t *p = ctx;
    if (!strcmp(topic, p->o.topic) && partition >= 0 && partition < MAX_PARTITIONS)
        p->known[partition] = next;
    return 0;
}

static segd_err_t load_positions(segd_publisher_t *p, char *errstr, size_t n)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = segd_store_view_open(p->store, &v, errstr, n);
    if (!err)
        err = segd_store_view_positions(v, "changes", load_known, p, errstr, n);
    segd_store_view_close(v);
    return err;
}

segd_err_t segd_publisher_new(segd_publisher_t **out, segd_store_t *store,
                              const segd_publisher_opts_t *o, char *errstr, size_t n)
{
    *out = NULL;
    if (!o->brokers || !o->topic || !*o->topic)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "changes: brokers and topic are required");
    if (o->framing == SEGD_CHANGE_CONFLUENT && !o->registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.format = confluent needs a schema registry URL");
    segd_publisher_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->o = *o;
    if (!p->o.max_entries)
        p->o.max_entries = 64;
    if (!p->o.max_delta_entries)
        p->o.max_delta_entries = 32768;
    p->store = store;
    p->schema_id = -1;
    p->member_schema_id = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    segd_profile_init(&p->acc);
    segd_profile_init(&p->tmp);
    segd_profile_init(&p->joined);
    segd_change_init(&p->change);
    p->lat = calloc(LAT_BUCKETS, sizeof(*p->lat));
    segd_err_t err = p->lat ? segd_batch_new(store, &p->batch) : SEGD_ERR_NOMEM;
    if (!err)
        err = load_positions(p, errstr, n);
    if (!err && o->framing == SEGD_CHANGE_CONFLUENT) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = o->registry_auth;
        ro.ca_file = o->registry_ca;
        err = segd_registry_new(&p->registry, o->registry_url, &ro, errstr, n);
    }
    if (!err)
        err = make_producer(p, errstr, n);
    if (!err)
        p->max_message = message_budget(p);
    /* A missing change topic is refused now. Unreachable brokers are not an
     * error yet, because every cycle asks again and the outbox keeps the
     * deltas meanwhile, and brokers known not to answer are not waited for. */
    if (!err && !o->brokers_down &&
        segd_publisher_ensure_partitions(p, 0, errstr, n) == SEGD_ERR_NOTFOUND)
        err = SEGD_ERR_NOTFOUND;
    if (err) {
        segd_publisher_destroy(p);
        return err;
    }
    *out = p;
    return SEGD_OK;
}

void segd_publisher_destroy(segd_publisher_t *p)
{
    if (!p)
        return;
    segd_publisher_stop(p, 0);
    destroy_producer(p);
    segd_publisher_clear_cycle(p);
    for (size_t i = 0; i < p->cap_entries; i++)
        segd_buf_free(&p->values[i]);
    free(p->values);
    free(p->entries);
    free(p->refs);
    free(p->lat);
    segd_profile_free(&p->acc);
    segd_profile_free(&p->tmp);
    segd_profile_free(&p->joined);
    segd_change_free(&p->change);
    segd_buf_free(&p->msg);
    segd_batch_destroy(p->batch);
    segd_registry_destroy(p->registry);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
