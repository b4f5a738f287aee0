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
#include "wire/member.h"
#include "base/clock.h"
#include "base/log.h"

#define BATCH 1000

struct segd_tail {
    segd_tail_opts_t o;
    segd_edge_t *edge;
    rd_kafka_t *rk;
    segd_klog_t *klog; /* its log route, cut when its destroy is left running */
    int32_t partitions;
    int64_t *position; /* next offset per partition, from the messages seen */
    int64_t *end;      /* high watermarks at start: ready once reached */
    uint8_t *begin;    /* started at the log start, not at a position */
    int caught_up;
    char gap[512];     /* set when a position fell below the log start */
    segd_change_t change;
    pthread_mutex_t mu; /* guards st */
    segd_tail_stats_t st;
};

void segd_tail_opts_default(segd_tail_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->topic = "segments.changes";
    o->schema_id = -1;
    o->member_schema_id = -1;
}


static segd_err_t make_consumer(segd_tail_t *t, char *errstr, size_t n)
{
    const char *defaults[] = {"bootstrap.servers", t->o.brokers,
                              /* a group id is required by the API, never joined */
                              "group.id", "segd-cache",
                              "enable.auto.commit", "false",
                              "enable.auto.offset.store", "false",
                              "enable.partition.eof", "false",
                              /* never skip to the end or the start: a
                               * position retention removed is a gap */
                              "auto.offset.reset", "error",
                              NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "cache tail", defaults, errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "cache tail", t->o.kafka_props, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    if (!(t->klog = segd_klog_new(t->o.log, t))) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "tail consumer: out of memory");
    }
    segd_klog_attach(t->klog, conf);
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

/* The offset from which the snapshot needs a partition's deltas. That is
 * the manifest's position for the partition, or 0 for a partition of its
 * change topic the manifest does not list, because no delta there was
 * acknowledged before the snapshot and so all of them came after it. It is
 * -1 when the manifest says nothing about this topic at all. */
static int64_t needed_offset(const segd_tail_t *t, const segd_manifest_t *m, int32_t p)
{
    if (!m || !m->changes_topic || strcmp(m->changes_topic, t->o.topic))
        return -1;
    for (size_t i = 0; i < m->n_changes; i++)
        if (m->changes[i].partition == p)
            return m->changes[i].offset;
    return 0;
}

/* Fails when retention already removed deltas the snapshot needs, or the
 * position lies beyond the end (the topic was recreated). */
static segd_err_t check_needed(segd_tail_t *t, int32_t p, int64_t need, int64_t low,
                               char *errstr, size_t n)
{
    if (need >= 0 && need < low)
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "%s/%d starts at offset %" PRId64 " but the snapshot needs it from %"
                         PRId64 ": snapshot older than the change topic's retention: load a "
                         "newer snapshot", t->o.topic, (int)p, low, need);
    if (need > t->end[p])
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "%s/%d ends at offset %" PRId64 " but the snapshot's position is %"
                         PRId64 ": the change topic is not the one the snapshot was taken "
                         "beside (recreated?)", t->o.topic, (int)p, t->end[p], need);
    return SEGD_OK;
}

static segd_err_t assign(segd_tail_t *t, const segd_manifest_t *m, char *errstr, size_t n)
{
    size_t np = (size_t)t->partitions;
    t->position = calloc(np, sizeof(*t->position));
    t->end = calloc(np, sizeof(*t->end));
    t->begin = calloc(np, 1);
    if (!t->position || !t->end || !t->begin)
        return SEGD_ERR_NOMEM;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(t->partitions);
    segd_err_t err = SEGD_OK;
    for (int32_t p = 0; p < t->partitions && !err; p++) {
        int64_t low = 0, need = needed_offset(t, m, p);
        rd_kafka_resp_err_t kerr =
            rd_kafka_query_watermark_offsets(t->rk, t->o.topic, p, &low, &t->end[p], 10000);
        if (kerr)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s/%d: %s", t->o.topic,
                            (int)p, rd_kafka_err2str(kerr));
        else
            err = check_needed(t, p, need, low, errstr, n);
        t->begin[p] = t->o.from_beginning || need < 0;
        int64_t off = t->begin[p] ? RD_KAFKA_OFFSET_BEGINNING : need;
        rd_kafka_topic_partition_list_add(parts, t->o.topic, p)->offset = off;
        t->position[p] = t->begin[p] ? low : off;
    }
    if (err) {
        rd_kafka_topic_partition_list_destroy(parts);
        return err;
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

static void free_tail(segd_tail_t *t)
{
    segd_change_free(&t->change);
    pthread_mutex_destroy(&t->mu);
    free(t->position);
    free(t->end);
    free(t->begin);
    segd_klog_free(t->klog); /* after the consumer's destroy: nothing logs through it */
    free(t);
}

/* librdkafka 2.0.2 can take minutes to destroy a consumer whose fetches were
 * just answered OFFSET_OUT_OF_RANGE (a gap; upstream #4514, #4724; seen in
 * test_tail under ASan), and a bidder shutting down must not hang on it. The
 * destroy runs on a thread of its own (segd_kdestroy_bounded); one not done
 * in destroy_wait_ms (default DESTROY_WAIT_MS) is left to finish there, and
 * that thread frees the tail when it does. */
#define DESTROY_WAIT_MS 10000

static void free_tail_cb(void *t) { free_tail(t); }

void segd_tail_destroy(segd_tail_t *t)
{
    if (!t)
        return;
    if (!t->rk) {
        free_tail(t);
        return;
    }
    rd_kafka_assign(t->rk, NULL);
    const segd_log_t *log = t->o.log; /* t may be freed once abandoned */
    int64_t wait_ms = t->o.destroy_wait_ms ? t->o.destroy_wait_ms : DESTROY_WAIT_MS;
    if (!segd_kdestroy_bounded(t->rk, 0, t->klog, wait_ms, free_tail_cb, t))
        segd_log(log, SEGD_LOG_WARN, "tail",
                 "the consumer's teardown is still running after %" PRId64 " ms: left to "
                 "finish on its own thread (librdkafka 2.0.2)", wait_ms);
}

/* Applies one message of the change topic, which carries ChangeEvents and
 * MemberEvents (DESIGN §5, §10.5); the framing says which. Returns 1 when
 * applied, with *committed_at_ms set to that event's own commit time. A
 * message that is not a change or member event is skipped, counted and
 * answered 0. An event that decodes but cannot be applied (out of memory)
 * is not skipped, since the cache would then silently lack it: it returns
 * -1, which stops the tail like a gap (SEGD_TAIL_GAP). */
static int apply_message(segd_tail_t *t, const rd_kafka_message_t *m, int64_t *committed_at_ms)
{
    const uint8_t *body;
    size_t blen;
    segd_frame_kind_t kind;
    segd_member_t mem;
    segd_err_t err = segd_change_unframe_kind(m->payload, m->len, t->o.schema_id,
                                              t->o.member_schema_id, &body, &blen, &kind);
    if (!err && kind == SEGD_FRAME_MEMBER) {
        if (!(err = segd_member_decode(body, blen, &mem)))
            err = segd_edge_apply_member(t->edge, &mem);
        *committed_at_ms = mem.committed_at_ms;
    } else if (!err) {
        err = segd_change_decode(body, blen, &t->change);
        if (!err && t->change.kind == SEGD_CHANGE_DELTA && t->change.user_id_len == 0)
            err = SEGD_ERR_CORRUPT;
        if (!err)
            err = segd_edge_apply(t->edge, &t->change);
        *committed_at_ms = t->change.committed_at_ms;
    }
    if (err == SEGD_ERR_NOMEM) {
        snprintf(t->gap, sizeof(t->gap),
                 "%s/%" PRId32 " at offset %" PRId64 ": out of memory applying a change: "
                 "restart the cache", rd_kafka_topic_name(m->rkt), m->partition, m->offset);
        segd_log(t->o.log, SEGD_LOG_ERROR, "cache", "%s", t->gap);
        return -1;
    }
    if (err) {
        segd_log_kv(t->o.log, SEGD_LOG_WARN, "cache", "skipped: not a change or member event",
                    "topic=%s partition=%" PRId32 " offset=%" PRId64,
                    rd_kafka_topic_name(m->rkt), m->partition, m->offset);
        return 0;
    }
    return 1;
}

/* auto.offset.reset=error: a fetch position retention removed (the cache
 * fell behind, or the snapshot was already too old) comes back as this
 * error instead of a silent jump. */
static void note_gap(segd_tail_t *t, const rd_kafka_message_t *m)
{
    snprintf(t->gap, sizeof(t->gap),
             "%s/%" PRId32 " at offset %" PRId64 ": %s: deltas the cache has not joined are "
             "gone: snapshot older than the change topic's retention: load a newer snapshot",
             m->rkt ? rd_kafka_topic_name(m->rkt) : t->o.topic, m->partition,
             m->partition >= 0 && m->partition < t->partitions ? t->position[m->partition]
                                                                : m->offset,
             rd_kafka_message_errstr(m));
    segd_log(t->o.log, SEGD_LOG_ERROR, "cache", "%s", t->gap);
}

/* Caught up once every partition reached the end it had at start. */
static void note_progress(segd_tail_t *t)
{
    if (t->caught_up)
        return;
    for (int32_t p = 0; p < t->partitions; p++)
        if (t->position[p] < t->end[p])
            return;
    t->caught_up = 1;
}


/* From librdkafka's cached high watermarks (no broker round trip); -1
 * until every partition has had a fetch response. */
static int64_t lag_messages(segd_tail_t *t)
{
    int64_t sum = 0;
    for (int32_t p = 0; p < t->partitions; p++) {
        int64_t lo, hi;
        if (rd_kafka_get_watermark_offsets(t->rk, t->o.topic, p, &lo, &hi) || hi < 0)
            return -1;
        sum += hi > t->position[p] ? hi - t->position[p] : 0;
    }
    return sum;
}

int segd_tail_poll(segd_tail_t *t, int timeout_ms)
{
    int applied = 0, skipped = 0, errors = 0;
    int64_t newest = 0;
    for (int i = 0; i < BATCH && !t->gap[0]; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(t->rk, i ? 0 : timeout_ms);
        if (!m)
            break;
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
            m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
            note_gap(t, m);
        } else if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                segd_log(t->o.log, SEGD_LOG_WARN, "cache", "%s", rd_kafka_message_errstr(m));
                errors++;
            }
        } else {
            int64_t committed_at = 0;
            int rc = apply_message(t, m, &committed_at);
            if (rc > 0) {
                applied++;
                /* the message's own time: a MemberEvent once took the last
                 * change event's, which could be much older */
                if (committed_at > newest)
                    newest = committed_at;
            } else if (rc == 0) {
                skipped++;
            }
            if (rc >= 0 && m->partition >= 0 && m->partition < t->partitions)
                t->position[m->partition] = m->offset + 1;
        }
        rd_kafka_message_destroy(m);
    }
    note_progress(t);
    int64_t lag = lag_messages(t);
    pthread_mutex_lock(&t->mu);
    t->st.lag_messages = lag;
    t->st.caught_up = t->caught_up;
    t->st.applied += (uint64_t)applied;
    t->st.skipped += (uint64_t)skipped;
    if (newest > t->st.newest_committed_ms)
        t->st.newest_committed_ms = newest;
    if (applied)
        t->st.last_applied_ms = segd_wall_ms();
    pthread_mutex_unlock(&t->mu);
    if (t->gap[0])
        return SEGD_TAIL_GAP;
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
        else if (t->begin[p] && t->position[p] < low) /* the log start moved on */
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
        else if (segd_tail_poll(t, 100) == SEGD_TAIL_GAP)
            err = segd_errf(SEGD_ERR_INVALID, errstr, n, "%s", t->gap);
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
