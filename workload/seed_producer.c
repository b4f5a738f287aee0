/* Seed workload -> Kafka; see seed_producer.h. */
#include "workload/seed_producer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "transport/kproducer.h"
#include "transport/registry.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static segd_err_t make_producer(const segd_seed_produce_opts_t *o, segd_kproducer_t **kp,
                                char *errstr, size_t n)
{
    static const char *const defaults[] = {
        "compression.codec", "lz4", "linger.ms", "20", "batch.num.messages", "10000",
        "queue.buffering.max.messages", "1000000", "enable.idempotence", "true",
        /* keyed as the Java clients do: segd's default input.partitioner */
        "partitioner", "murmur2_random", NULL};
    segd_kproducer_opts_t ko = {.brokers = o->brokers,
                                .what = "producer",
                                .defaults = defaults,
                                .kafka_props = o->kafka_props,
                                .delivery_timeout_ms = o->delivery_timeout_ms,
                                .log = o->log};
    return segd_kproducer_new(kp, &ko, errstr, n);
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
                     const segd_kproducer_t *kp, double t0, uint64_t total, int final)
{
    if (!o->progress)
        return;
    segd_kproducer_counts_t c;
    segd_kproducer_counts(kp, &c);
    double dt = now_s() - t0;
    fprintf(stderr, "\rqueued %llu/%llu events (%llu segments), %llu delivered, %.0f events/s%s",
            (unsigned long long)r->events, (unsigned long long)total,
            (unsigned long long)r->segments, (unsigned long long)c.delivered,
            dt > 0 ? (double)r->events / dt : 0.0, final ? "\n" : "");
}

static int stopped(volatile sig_atomic_t *stop) { return stop && *stop; }

segd_err_t segd_seed_produce(const segd_seed_produce_opts_t *o, volatile sig_atomic_t *stop,
                             segd_seed_produce_result_t *res, char *errstr, size_t n)
{
    memset(res, 0, sizeof(*res));
    segd_kproducer_t *kp = NULL;
    segd_registry_t *reg = NULL;
    segd_avro_codec_t *codec = NULL;
    segd_seed_t *gen = NULL;
    segd_event_t ev;
    segd_buf_t buf = {0};
    int32_t schema_id;
    segd_event_init(&ev);
    segd_err_t err = make_producer(o, &kp, errstr, n);
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
            (err = segd_kproducer_send(kp, o->topic, ev.user_id, ev.user_id_len, buf.data,
                                       buf.len, stop, errstr, n)))
            break;
        res->events++;
        res->segments += ev.n_segments;
        res->bytes += buf.len;
        segd_kproducer_poll(kp);
        /* A paced run measures the latency of what follows its producer's
         * start: the first event is acknowledged before the pace's clock
         * starts, so the producer's connection and its idempotence PID (a
         * second or more on a cluster that has just started) are not in
         * every event of the first second. */
        if (o->rate > 0 && res->events == 1) {
            segd_kproducer_flush(kp, 30000, stop);
            t0 = last = now_s();
        }
        pace(o, t0, res->events);
        if (now_s() - last > 0.5) {
            progress(o, res, kp, t0, total, 0);
            last = now_s();
        }
    }
    /* an error above leaves what was queued before it to be reported */
    if (err == SEGD_ERR_ABORTED)
        err = SEGD_OK;
    if (stopped(stop) && res->events < total)
        segd_kproducer_interrupted(kp);
    segd_kproducer_drain(kp, stop);
    res->seconds = now_s() - t0;
    progress(o, res, kp, t0, total, 1);
    if (!err)
        err = segd_kproducer_report(kp, o->topic, "events", total, errstr, n);
out_free:
    if (kp) {
        segd_kproducer_counts_t c;
        segd_kproducer_counts(kp, &c);
        res->delivered = c.delivered;
        res->failed = c.failed;
        res->interrupted = c.interrupted;
    }
    segd_seed_destroy(gen);
    segd_avro_codec_destroy(codec);
    segd_registry_destroy(reg);
    segd_kproducer_destroy(kp);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    return err;
}
