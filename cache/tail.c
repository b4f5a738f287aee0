/* Change topic -> edge table; see tail.h. */
#include "cache/tail.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "transport/kconf.h"
#include "wire/change_frame.h"
#include "base/clock.h"

#define BATCH 1000

struct segd_tail {
    segd_tail_opts_t o;
    segd_edge_t *edge;
    rd_kafka_t *rk;
    int32_t partitions;
    int64_t *position; /* next offset per partition, from the messages seen */
    segd_change_t change;
    pthread_mutex_t mu; /* guards st */
    segd_tail_stats_t st;
};

void segd_tail_opts_default(segd_tail_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->topic = "segments.changes";
    o->schema_id = -1;
}


static segd_err_t make_consumer(segd_tail_t *t, char *errstr, size_t n)
{
    const char *defaults[] = {"bootstrap.servers", t->o.brokers,
                              /* a group id is required by the API, never joined */
                              "group.id", "segd-cache",
                              "enable.auto.commit", "false",
                              "enable.auto.offset.store", "false",
                              "enable.partition.eof", "false",
                              NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "cache tail", defaults, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "cache tail", t->o.kafka_props, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    char e[512];
    t->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof(e));
    if (!t->rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "tail consumer: %s", e);
    }
    rd_kafka_poll_set_consumer(t->rk);
    return SEGD_OK;
}

static segd_err_t count_partitions(segd_tail_t *t, char *errstr, size_t n)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(t->rk, t->o.topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rd_kafka_metadata(t->rk, 0, rkt, &md, 10000);
    rd_kafka_topic_destroy(rkt);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "metadata of %s: %s", t->o.topic,
                         rd_kafka_err2str(kerr));
    segd_err_t err = SEGD_OK;
    if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "change topic %s: %s", t->o.topic,
                        md->topic_cnt ? rd_kafka_err2str(md->topics[0].err) : "not found");
    else
        t->partitions = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return err;
}

/* The manifest's position for a partition, or the beginning. */
static int64_t start_offset(const segd_tail_t *t, const segd_manifest_t *m, int32_t p)
{
    if (t->o.from_beginning || !m || !m->changes_topic || strcmp(m->changes_topic, t->o.topic))
        return RD_KAFKA_OFFSET_BEGINNING;
    for (size_t i = 0; i < m->n_changes; i++)
        if (m->changes[i].partition == p)
            return m->changes[i].offset;
    return RD_KAFKA_OFFSET_BEGINNING;
}

static segd_err_t assign(segd_tail_t *t, const segd_manifest_t *m, char *errstr, size_t n)
{
    t->position = calloc((size_t)t->partitions, sizeof(*t->position));
    if (!t->position)
        return SEGD_ERR_NOMEM;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(t->partitions);
    for (int32_t p = 0; p < t->partitions; p++) {
        int64_t off = start_offset(t, m, p);
        rd_kafka_topic_partition_list_add(parts, t->o.topic, p)->offset = off;
        t->position[p] = off >= 0 ? off : 0;
    }
    rd_kafka_resp_err_t kerr = rd_kafka_assign(t->rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    return kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "assign: %s", rd_kafka_err2str(kerr))
                : SEGD_OK;
}

segd_err_t segd_tail_new(segd_tail_t **out, segd_edge_t *edge, const segd_tail_opts_t *o,
                         const segd_manifest_t *manifest, char *errstr, size_t n)
{
    *out = NULL;
    if (!o->brokers || !o->topic)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "tail: brokers and topic are required");
    segd_tail_t *t = calloc(1, sizeof(*t));
    if (!t)
        return SEGD_ERR_NOMEM;
    t->o = *o;
    t->edge = edge;
    segd_change_init(&t->change);
    pthread_mutex_init(&t->mu, NULL);
    segd_err_t err = make_consumer(t, errstr, n);
    if (!err)
        err = count_partitions(t, errstr, n);
    if (!err)
        err = assign(t, manifest, errstr, n);
    if (err) {
        segd_tail_destroy(t);
        return err;
    }
    t->st.partitions = t->partitions;
    *out = t;
    return SEGD_OK;
}

void segd_tail_destroy(segd_tail_t *t)
{
    if (!t)
        return;
    if (t->rk) {
        rd_kafka_assign(t->rk, NULL);
        rd_kafka_destroy(t->rk);
    }
    segd_change_free(&t->change);
    pthread_mutex_destroy(&t->mu);
    free(t->position);
    free(t);
}

/* Returns 1 when applied, 0 when skipped (bad message). */
static int apply_message(segd_tail_t *t, const rd_kafka_message_t *m)
{
    const uint8_t *body;
    size_t blen;
    if (segd_change_unframe(m->payload, m->len, t->o.schema_id, &body, &blen) ||
        segd_change_decode(body, blen, &t->change) ||
        (t->change.kind == SEGD_CHANGE_DELTA && t->change.user_id_len == 0) ||
        segd_edge_apply(t->edge, &t->change)) {
        fprintf(stderr, "segd cache: skipped %s/%" PRId32 "/%" PRId64 ": not a change event\n",
                rd_kafka_topic_name(m->rkt), m->partition, m->offset);
        return 0;
    }
    return 1;
}

int segd_tail_poll(segd_tail_t *t, int timeout_ms)
{
    int applied = 0, skipped = 0, errors = 0;
    int64_t newest = 0;
    for (int i = 0; i < BATCH; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(t->rk, i ? 0 : timeout_ms);
        if (!m)
            break;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                fprintf(stderr, "segd cache: %s\n", rd_kafka_message_errstr(m));
                errors++;
            }
        } else {
            if (apply_message(t, m)) {
                applied++;
                if (t->change.committed_at_ms > newest)
                    newest = t->change.committed_at_ms;
            } else {
                skipped++;
            }
            if (m->partition >= 0 && m->partition < t->partitions)
                t->position[m->partition] = m->offset + 1;
        }
        rd_kafka_message_destroy(m);
    }
    pthread_mutex_lock(&t->mu);
    t->st.applied += (uint64_t)applied;
    t->st.skipped += (uint64_t)skipped;
    if (newest > t->st.newest_committed_ms)
        t->st.newest_committed_ms = newest;
    if (applied)
        t->st.last_applied_ms = segd_wall_ms();
    pthread_mutex_unlock(&t->mu);
    return errors && !applied ? -1 : applied;
}

segd_err_t segd_tail_catch_up(segd_tail_t *t, int64_t timeout_ms, char *errstr, size_t n)
{
    int64_t *high = calloc((size_t)t->partitions, sizeof(*high));
    if (!high)
        return SEGD_ERR_NOMEM;
    segd_err_t err = SEGD_OK;
    for (int32_t p = 0; p < t->partitions && !err; p++) {
        int64_t low;
        rd_kafka_resp_err_t kerr =
            rd_kafka_query_watermark_offsets(t->rk, t->o.topic, p, &low, &high[p], 10000);
        if (kerr)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s/%d: %s", t->o.topic,
                            (int)p, rd_kafka_err2str(kerr));
        else if (t->position[p] < low) /* retention removed what lies before low */
            t->position[p] = low;
    }
    int64_t deadline = segd_wall_ms() + timeout_ms;
    while (!err) {
        int behind = 0;
        for (int32_t p = 0; p < t->partitions; p++)
            behind |= t->position[p] < high[p];
        if (!behind)
            break;
        if (segd_wall_ms() > deadline)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "not caught up within %" PRId64 " ms",
                            timeout_ms);
        else
            segd_tail_poll(t, 100);
    }
    free(high);
    return err;
}

void segd_tail_get_stats(segd_tail_t *t, segd_tail_stats_t *st)
{
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    pthread_mutex_unlock(&t->mu);
}
