/* Seed workload -> Kafka; see seed_producer.h. */
#include "workload/seed_producer.h"

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "transport/kconf.h"
#include "transport/registry.h"

/* What the producer's callbacks learn, for the final report. dr_cb and
 * error_cb run in rd_kafka_poll/flush on the producing thread; log_cb runs
 * on librdkafka's threads, hence the atomic. */
typedef struct produce_ctx {
    segd_seed_produce_result_t *res;
    const segd_log_t *log;
    char first_dr_err[160]; /* the first failed delivery report's error */
    char broker_err[400];   /* the last broker (transport) error */
    atomic_uint fail_lines; /* librdkafka "FAIL" lines seen */
} produce_ctx_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    produce_ctx_t *x = opaque;
    if (!m->err) {
        x->res->delivered++;
        return;
    }
    if (!x->res->failed++)
        snprintf(x->first_dr_err, sizeof(x->first_dr_err), "%s", rd_kafka_err2str(m->err));
}

/* librdkafka prefixes a broker's errors with "HOST:PORT/ID: "; the report
 * names the brokers itself, so only the cause is kept. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    produce_ctx_t *x = opaque;
    const char *colon = strstr(reason, ": ");
    const char *slash = strchr(reason, '/');
    if (colon && slash && slash < colon)
        reason = colon + 2;
    /* "1/1 brokers are down" says less than the connection error before it */
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && x->broker_err[0])
        return;
    snprintf(x->broker_err, sizeof(x->broker_err), "%s", reason);
}

/* Through segd's logger; a broker that cannot be reached makes librdkafka
 * log a FAIL line per reconnect, so only the first is shown: the final
 * report names the brokers and the last cause. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    produce_ctx_t *x = rd_kafka_opaque(rk);
    if (fac && !strcmp(fac, "FAIL") && atomic_fetch_add(&x->fail_lines, 1) > 0)
        return;
    segd_kconf_log(x->log, rk, level, fac, buf);
}

static rd_kafka_t *make_producer(const segd_seed_produce_opts_t *o, produce_ctx_t *x,
                                 char *errstr, size_t n)
{
    static const char *const defaults[] = {
        "compression.codec", "lz4", "linger.ms", "20", "batch.num.messages", "10000",
        "queue.buffering.max.messages", "1000000", "enable.idempotence", "true",
        /* keyed as the Java clients do: segd's default input.partitioner */
        "partitioner", "murmur2_random", NULL};
    char err[512], timeout[24];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", o->brokers, err, sizeof(err)))
        goto out_conf;
    for (size_t i = 0; defaults[i]; i += 2)
        if (rd_kafka_conf_set(conf, defaults[i], defaults[i + 1], err, sizeof(err)))
            goto out_conf;
    snprintf(timeout, sizeof(timeout), "%d", o->delivery_timeout_ms);
    if (o->delivery_timeout_ms > 0 &&
        rd_kafka_conf_set(conf, "message.timeout.ms", timeout, err, sizeof(err)))
        goto out_conf;
    for (size_t i = 0; o->kafka_props && o->kafka_props[i]; i += 2)
        if (rd_kafka_conf_set(conf, o->kafka_props[i], o->kafka_props[i + 1], err,
                              sizeof(err)))
            goto out_conf;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, x);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (rk)
        return rk;
out_conf:
    rd_kafka_conf_destroy(conf);
    segd_errf(SEGD_ERR_KAFKA, errstr, n, "producer: %s", err);
    return NULL;
}

/* Registers the local schema under <topic>-value for Confluent framing. */
static segd_err_t schema_id_for(const segd_seed_produce_opts_t *o, const segd_avro_codec_t *c,
                                segd_registry_t **reg, int32_t *id, char *errstr, size_t n)
{
    *id = 0;
    if (o->framing != SEGD_FRAMING_CONFLUENT)
        return SEGD_OK;
    if (!o->registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "confluent framing needs a registry URL");
    segd_err_t err = segd_registry_new(reg, o->registry_url, NULL, errstr, n);
    if (err)
        return err;
    char subject[300];
    snprintf(subject, sizeof(subject), "%s-value", o->topic);
    return segd_registry_register(*reg, subject, segd_avro_codec_reader_json(c), id, errstr,
                                  n);
}

static void pace(const segd_seed_produce_opts_t *o, double t0, uint64_t sent)
{
    if (o->rate <= 0)
        return;
    double ahead = (double)sent / o->rate - (now_s() - t0);
    if (ahead > 0.001) {
        struct timespec ts = {(time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void progress(const segd_seed_produce_opts_t *o, const segd_seed_produce_result_t *r,
                     double t0, uint64_t total, int final)
{
    if (!o->progress)
        return;
    double dt = now_s() - t0;
    fprintf(stderr, "\rqueued %llu/%llu events (%llu segments), %llu delivered, %.0f events/s%s",
            (unsigned long long)r->events, (unsigned long long)total,
            (unsigned long long)r->segments, (unsigned long long)r->delivered,
            dt > 0 ? (double)r->events / dt : 0.0, final ? "\n" : "");
}

static int stopped(volatile sig_atomic_t *stop) { return stop && *stop; }

/* SEGD_ERR_ABORTED when stop is set while librdkafka's queue is full. */
static segd_err_t produce_one(rd_kafka_t *rk, const char *topic, const segd_event_t *ev,
                              const segd_buf_t *buf, volatile sig_atomic_t *stop, char *errstr,
                              size_t n)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(ev->user_id, ev->user_id_len),
            RD_KAFKA_V_VALUE(buf->data, buf->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_END);
        if (!err)
            return SEGD_OK;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "produce: %s", rd_kafka_err2str(err));
        if (stopped(stop))
            return SEGD_ERR_ABORTED;
        rd_kafka_poll(rk, 10);
    }
}

/* Waits for every delivery report. On stop, what is queued or in flight is
 * purged: its reports (errors) come at once, so an interrupted run ends
 * promptly and counts only what a broker acknowledged. Otherwise the wait is
 * bounded by message.timeout.ms, after which librdkafka fails the rest. */
static void drain(rd_kafka_t *rk, volatile sig_atomic_t *stop, segd_seed_produce_result_t *res)
{
    while (rd_kafka_outq_len(rk) > 0 && !stopped(stop))
        rd_kafka_flush(rk, 200);
    if (rd_kafka_outq_len(rk) > 0) {
        res->interrupted = 1;
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(rk, 5000);
    }
}

/* The error of a run that was interrupted or did not deliver everything:
 * how many of how many, where to, and why. */
static segd_err_t report_undelivered(const segd_seed_produce_opts_t *o, const produce_ctx_t *x,
                                     uint64_t total, char *errstr, size_t n)
{
    const segd_seed_produce_result_t *r = x->res;
    char head[200], cause[700] = "";
    if (r->interrupted)
        snprintf(head, sizeof(head), "interrupted (%llu of %llu events queued): ",
                 (unsigned long long)r->events, (unsigned long long)total);
    else
        head[0] = '\0';
    if (r->delivered < r->events && r->delivered == 0 && x->broker_err[0])
        snprintf(cause, sizeof(cause), ": no broker answered at %s: %s", o->brokers,
                 x->broker_err);
    else if (r->delivered < r->events)
        snprintf(cause, sizeof(cause), ": %s (brokers %s%s%s)",
                 x->first_dr_err[0] ? x->first_dr_err : "not acknowledged", o->brokers,
                 x->broker_err[0] ? "; last broker error: " : "", x->broker_err);
    return segd_errf(r->interrupted ? SEGD_ERR_ABORTED : SEGD_ERR_KAFKA, errstr, n,
                     "%sdelivered %llu of %llu events to %s%s", head,
                     (unsigned long long)r->delivered, (unsigned long long)r->events, o->topic,
                     cause);
}

segd_err_t segd_seed_produce(const segd_seed_produce_opts_t *o, volatile sig_atomic_t *stop,
                             segd_seed_produce_result_t *res, char *errstr, size_t n)
{
    memset(res, 0, sizeof(*res));
    produce_ctx_t x = {.res = res, .log = o->log};
    atomic_init(&x.fail_lines, 0);
    segd_registry_t *reg = NULL;
    segd_avro_codec_t *codec = NULL;
    segd_seed_t *gen = NULL;
    segd_event_t ev;
    segd_buf_t buf = {0};
    int32_t schema_id;
    segd_event_init(&ev);
    rd_kafka_t *rk = make_producer(o, &x, errstr, n);
    segd_err_t err = rk ? SEGD_OK : SEGD_ERR_KAFKA;
    if (!err)
        err = segd_avro_codec_new(&codec, NULL, NULL, errstr, n);
    if (!err)
        err = schema_id_for(o, codec, &reg, &schema_id, errstr, n);
    if (!err && segd_seed_new(&gen, &o->seed) != SEGD_OK)
        err = segd_errf(SEGD_ERR_INVALID, errstr, n, "bad seed workload options");
    if (err)
        goto out_free;
    uint64_t total = segd_seed_total_events(gen);
    if (o->max_events && o->max_events < total)
        total = o->max_events;
    double t0 = now_s(), last = t0;
    while (res->events < total && !stopped(stop) && segd_seed_next(gen, &ev)) {
        if ((err = segd_avro_encode(codec, o->framing, schema_id, &ev, &buf)) ||
            (err = produce_one(rk, o->topic, &ev, &buf, stop, errstr, n)))
            break;
        res->events++;
        res->segments += ev.n_segments;
        res->bytes += buf.len;
        rd_kafka_poll(rk, 0);
        /* A paced run measures the latency of what follows its producer's
         * start: the first event is acknowledged before the pace's clock
         * starts, so the producer's connection and its idempotence PID (a
         * second or more on a cluster that has just started) are not in
         * every event of the first second. */
        if (o->rate > 0 && res->events == 1) {
            for (int i = 0; i < 150 && rd_kafka_outq_len(rk) > 0 && !stopped(stop); i++)
                rd_kafka_flush(rk, 200);
            t0 = last = now_s();
        }
        pace(o, t0, res->events);
        if (now_s() - last > 0.5) {
            progress(o, res, t0, total, 0);
            last = now_s();
        }
    }
    /* an error above leaves what was queued before it to be reported */
    if (err == SEGD_ERR_ABORTED)
        err = SEGD_OK;
    res->interrupted = stopped(stop) && res->events < total;
    drain(rk, stop, res);
    res->seconds = now_s() - t0;
    progress(o, res, t0, total, 1);
    if (!err && (res->delivered < res->events || res->interrupted))
        err = report_undelivered(o, &x, total, errstr, n);
out_free:
    segd_seed_destroy(gen);
    segd_avro_codec_destroy(codec);
    segd_registry_destroy(reg);
    if (rk)
        rd_kafka_destroy(rk);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    return err;
}
