/* The history a rebuild starts with; see rebuild_history.h. The first
 * message of each partition is read with a group-less consumer assigned at
 * the log start (nothing committed), within FIRST_WAIT_MS in all. */
#include "app/rebuild_history.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "consumer/fetch_conf.h"
#include "load/restore.h"
#include "transport/dest.h"
#include "transport/kconf.h"

#define QUERY_TIMEOUT_MS 10000
#define FIRST_WAIT_MS 15000 /* for the first messages of all partitions together */

static segd_err_t make_consumer(const segd_config_t *cfg, rd_kafka_t **rk, char *errstr,
                                size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", cfg->brokers, "group.id",
                                    "segd-rebuild-history", NULL};
    /* the first message held: a start deleted meanwhile moves to the new one */
    const char *const forced[] = {"enable.auto.commit", "false", "enable.partition.eof",
                                  "true", "auto.offset.reset", "earliest", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "rebuild history", defaults, errstr, n);
    if (!err) /* it reads one message per partition: a side consumer's queue */
        err = segd_fetch_conf_apply(conf, "rebuild history", cfg, SEGD_FETCH_SIDE, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++)
        err = segd_kconf_set(conf, "rebuild history", cfg->kafka[i].key, cfg->kafka[i].value,
                             errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "rebuild history", forced, errstr, n);
    if (!err)
        segd_kconf_set_logger(conf, cfg->log);
    if (!err && !(*rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf))))
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "rebuild history: consumer: %s", errbuf);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_poll_set_consumer(*rk);
    return SEGD_OK;
}

static segd_err_t read_partitions(rd_kafka_t *rk, segd_history_t *h, char *errstr, size_t n)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, h->topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rkt ? rd_kafka_metadata(rk, 0, rkt, &md, QUERY_TIMEOUT_MS)
                                   : rd_kafka_last_error();
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (!kerr && (md->topic_cnt != 1 || md->topics[0].err))
        kerr = md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    segd_err_t err = SEGD_OK;
    if (kerr)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "metadata for %s: %s", h->topic,
                        rd_kafka_err2str(kerr));
    else if (!(h->p = calloc((size_t)md->topics[0].partition_cnt + 1, sizeof(*h->p))))
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    for (int i = 0; !err && i < md->topics[0].partition_cnt; i++) {
        segd_history_part_t *p = &h->p[i];
        p->partition = md->topics[0].partitions[i].id;
        p->first_offset = p->first_ts_ms = p->base_offset = -1;
        kerr = rd_kafka_query_watermark_offsets(rk, h->topic, p->partition, &p->log_start,
                                                &p->high, QUERY_TIMEOUT_MS);
        if (kerr)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s [%" PRId32 "]: %s",
                            h->topic, p->partition, rd_kafka_err2str(kerr));
        h->partitions = i + 1;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    return err;
}

static segd_history_part_t *find(segd_history_t *h, int32_t partition)
{
    for (int32_t i = 0; i < h->partitions; i++)
        if (h->p[i].partition == partition)
            return &h->p[i];
    return NULL;
}

/* The first message at or after each log start above 0. A partition whose
 * log is empty now keeps -1: nothing is held to date the gone part by. */
static segd_err_t read_first(rd_kafka_t *rk, segd_history_t *h, char *errstr, size_t n)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(h->partitions);
    for (int32_t i = 0; i < h->partitions; i++)
        if (h->p[i].log_start > 0 && h->p[i].log_start < h->p[i].high)
            rd_kafka_topic_partition_list_add(l, h->topic, h->p[i].partition)->offset =
                h->p[i].log_start;
    int left = l->cnt;
    rd_kafka_resp_err_t kerr = left ? rd_kafka_assign(rk, l) : RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_partition_list_destroy(l);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "assign: %s", rd_kafka_err2str(kerr));
    int64_t deadline = segd_mono_ms() + FIRST_WAIT_MS;
    while (left > 0 && segd_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        segd_history_part_t *p = m->rkt ? find(h, m->partition) : NULL;
        if (p && p->first_offset < 0 && (!m->err || m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)) {
            rd_kafka_timestamp_type_t tstype;
            p->first_offset = m->offset;
            p->first_ts_ms = m->err ? -1 : rd_kafka_message_timestamp(m, &tstype);
            left--;
        }
        rd_kafka_message_destroy(m);
    }
    if (left > 0)
        fprintf(stderr, "segd rebuild: %s: the first message of %d partitions could not be "
                "read in %d s: their gone history is not dated\n", h->topic, left,
                FIRST_WAIT_MS / 1000);
    return SEGD_OK;
}

segd_err_t segd_history_probe(const segd_config_t *cfg, const char *topic, segd_history_t *h,
                              char *errstr, size_t n)
{
    rd_kafka_t *rk = NULL;
    memset(h, 0, sizeof(*h));
    h->topic = topic;
    segd_err_t err = make_consumer(cfg, &rk, errstr, n);
    if (!err)
        err = read_partitions(rk, h, errstr, n);
    if (!err)
        err = read_first(rk, h, errstr, n);
    if (rk) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    return err;
}

void segd_history_destroy(segd_history_t *h)
{
    free(h->p);
    h->p = NULL;
    h->partitions = 0;
}

segd_err_t segd_history_load_base(const segd_config_t *cfg, const char *base,
                                  segd_store_t *store, segd_history_t *h, size_t *loaded,
                                  char *errstr, size_t n)
{
    segd_dest_opts_t dest;
    segd_dest_opts_default(&dest);
    *loaded = 0;
    for (int32_t i = 0; i < h->partitions; i++) {
        segd_history_part_t *p = &h->p[i];
        segd_unit_load_t u = {.from = base, .topic = h->topic, .partition = p->partition,
                              .partitions = h->partitions, .partitioner = cfg->partitioner,
                              .dest = &dest,
                              .memory_bytes = (uint64_t)cfg->memory.restore_mb << 20};
        segd_unit_load_stats_t st;
        char why[512] = "";
        segd_err_t err = segd_unit_load(store, &u, &st, why, sizeof(why));
        if (err == SEGD_ERR_NOTFOUND) {
            fprintf(stderr, "segd rebuild: %s [%" PRId32 "]: no unit in the base: %s\n",
                    h->topic, p->partition, why);
            continue;
        }
        if (err)
            return segd_errf(err, errstr, n, "base %s: %s [%" PRId32 "]: %s", base, h->topic,
                             p->partition, why);
        p->base_offset = st.next_offset;
        (*loaded)++;
        fprintf(stderr, "segd rebuild: %s [%" PRId32 "]: base unit loaded: %" PRIu64 " users, "
                "offset %" PRId64 " (log start %" PRId64 ")\n", h->topic, p->partition,
                st.users, st.next_offset, p->log_start);
    }
    return SEGD_OK;
}

int segd_history_gone(const segd_history_t *h, size_t i, int64_t *from)
{
    const segd_history_part_t *p = &h->p[i];
    *from = p->base_offset >= 0 ? p->base_offset : 0;
    return *from < p->log_start;
}

int64_t segd_history_replay_from(const segd_history_t *h, size_t i)
{
    const segd_history_part_t *p = &h->p[i];
    return p->base_offset > p->log_start ? p->base_offset : p->log_start;
}

segd_err_t segd_history_record(segd_store_t *store, const segd_history_t *h, char *errstr,
                               size_t n)
{
    segd_batch_t *b = NULL;
    if (segd_batch_new(store, &b))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    for (int32_t i = 0; i < h->partitions; i++) {
        int64_t from;
        segd_batch_set_position(b, SEGD_POS_REBUILD_LOG_START, h->topic, h->p[i].partition,
                                h->p[i].log_start);
        if (segd_history_gone(h, (size_t)i, &from))
            segd_batch_set_position(b, SEGD_POS_REBUILD_GONE_FROM, h->topic,
                                    h->p[i].partition, from);
        else /* a rebuild run again with a base that covers it */
            segd_batch_delete_position(b, SEGD_POS_REBUILD_GONE_FROM, h->topic,
                                       h->p[i].partition);
    }
    segd_err_t err = segd_store_write_sync(store, b, errstr, n);
    segd_batch_destroy(b);
    return err;
}

/* "<ms> (<UTC time>)" of a message timestamp. */
static void say_ts(char *out, size_t cap, int64_t ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&s, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(out, cap, "%" PRId64 " (%s)", ms, when);
}

size_t segd_history_say(FILE *f, const char *prefix, const segd_history_t *h)
{
    size_t gone = 0;
    for (int32_t i = 0; i < h->partitions; i++) {
        const segd_history_part_t *p = &h->p[i];
        int64_t from;
        char ts[80];
        if (!segd_history_gone(h, (size_t)i, &from))
            continue;
        gone++;
        fprintf(f, "%s%s [%" PRId32 "]: offsets [%" PRId64 ", %" PRId64 ") are gone (%" PRId64
                " messages deleted by retention or delete-records before the rebuild); ",
                prefix, h->topic, p->partition, from, p->log_start, p->log_start - from);
        if (p->base_offset >= 0)
            fprintf(f, "the base unit stands at offset %" PRId64 "; ", p->base_offset);
        if (p->first_ts_ms >= 0) {
            say_ts(ts, sizeof(ts), p->first_ts_ms);
            fprintf(f, "the first message still held, offset %" PRId64 ", has timestamp %s: "
                    "everything gone is older\n", p->first_offset, ts);
        } else {
            fprintf(f, "the partition holds no message now to date them by\n");
        }
    }
    return gone;
}
