/* Erasure through the log (erase_live.h): the operator's ERASE_USER goes
 * where a producer's would, so ordering with the user's other events,
 * exactness, the outbox and caches work as for any event; the running
 * segd run applies it. The wait reads the store read-only beside it. */
#include "cli/erase_live.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "consumer/apply.h"
#include "config/config.h"
#include "core/partition.h"
#include "transport/kconf.h"
#include "transport/registry.h"
#include "wire/avro_codec.h"

extern char **environ;

#define QUERY_TIMEOUT_MS 10000

typedef struct live {
    const segd_erase_live_t *a;
    const char *cmd; /* "erase" or "segments retire", for messages */
    segd_config_t cfg;
    const char *topic;
    segd_framing_t framing;
    int32_t schema_id, partitions;
    rd_kafka_t *rk;
    segd_avro_codec_t *codec;
    segd_registry_t *reg;
    int failed; /* delivery reports with an error */
    int retire; /* a retirement: taken below the ingest floor */
} live_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    live_t *l = opaque;
    if (m->err) {
        l->failed++;
        fprintf(stderr, "segd %s: delivery failed: %s\n", l->cmd, rd_kafka_err2str(m->err));
    }
}

/* segd run dead-letters an event framed otherwise than its input.format
 * says (issue 29 #6), and the default differs from what a deployment may
 * set: the framing must come from --framing, segd run's --config or
 * SEGD_INPUT_FORMAT, never from a guess. */
static int known_framing(const live_t *l, char *err, size_t n)
{
    const segd_erase_live_t *a = l->a;
    if (a->framing || a->config || getenv("SEGD_INPUT_FORMAT"))
        return 0;
    return snprintf(err, n, "which framing does segd run read? give --config FILE (segd "
                    "run's configuration, its input.format) or --framing "
                    "raw|single-object|confluent; nothing produced"), -1;
}

static int load_config(live_t *l, char *err, size_t n)
{
    const segd_erase_live_t *a = l->a;
    if (known_framing(l, err, n))
        return -1;
    if ((a->config && segd_config_load_file(&l->cfg, a->config, err, n)) ||
        segd_config_load_env(&l->cfg, environ, err, n) ||
        (a->brokers && segd_config_set(&l->cfg, "brokers", a->brokers, err, n)))
        return -1;
    if (a->framing && segd_config_set(&l->cfg, "input.format", a->framing, err, n))
        return snprintf(err, n, "bad --framing '%.100s': raw, single-object, confluent or "
                        "auto", a->framing), -1;
    l->topic = a->topic ? a->topic : l->cfg.n_topics ? l->cfg.topics[0] : NULL;
    if (!l->cfg.brokers || !l->topic)
        return snprintf(err, n, "need --brokers and --topic (or a --config naming them)"), -1;
    /* auto-detection reads single-object; confluent needs the registry's id */
    l->framing = l->cfg.framing == SEGD_FRAMING_AUTO ? SEGD_FRAMING_SINGLE_OBJECT
                                                     : l->cfg.framing;
    return 0;
}

static int make_producer(live_t *l, char *err, size_t n)
{
    const char *const defaults[] = {"bootstrap.servers", l->cfg.brokers, "enable.idempotence",
                                    "true", NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* the config's connection settings (TLS, SASL), not its consumer ones */
    if (segd_kconf_apply(conf, "marker producer", defaults, err, n) ||
        segd_config_apply_connection(&l->cfg, conf, "marker producer", err, n)) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, l);
    l->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, n);
    if (!l->rk)
        rd_kafka_conf_destroy(conf);
    return l->rk ? 0 : -1;
}

/* The topic's partition count: each user goes to the partition segd's
 * input.partitioner gives it, the one whose consumer owns the user. */
static int count_partitions(live_t *l, char *err, size_t n)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(l->rk, l->topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rkt ? rd_kafka_metadata(l->rk, 0, rkt, &md, QUERY_TIMEOUT_MS)
                                   : rd_kafka_last_error();
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (!kerr && (md->topic_cnt != 1 || md->topics[0].err || !md->topics[0].partition_cnt))
        kerr = md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    if (!kerr)
        l->partitions = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    if (kerr || l->partitions <= 0)
        return snprintf(err, n, "topic %s: %s", l->topic,
                        kerr ? rd_kafka_err2str(kerr) : "no partitions"), -1;
    return 0;
}

static int schema_id(live_t *l, char *err, size_t n)
{
    if (segd_avro_codec_new(&l->codec, NULL, NULL, err, n))
        return -1;
    if (l->framing != SEGD_FRAMING_CONFLUENT)
        return 0;
    if (!l->cfg.registry_url)
        return snprintf(err, n, "input.format confluent needs input.schema.registry.url"), -1;
    char subject[300];
    snprintf(subject, sizeof(subject), "%s-value", l->topic);
    return segd_registry_new(&l->reg, l->cfg.registry_url, NULL, err, n) ||
                   segd_registry_register(l->reg, subject, segd_avro_codec_reader_json(l->codec),
                                          &l->schema_id, err, n)
               ? -1
               : 0;
}

static int produce_user(live_t *l, segd_event_t *ev, const char *user, segd_buf_t *buf,
                        char *err, size_t n)
{
    segd_event_reset(ev);
    ev->op = SEGD_OP_ERASE_USER;
    ev->ts_ms = l->a->at_ms;
    if (segd_event_set_user(ev, user, strlen(user)) ||
        segd_event_validate(ev, &l->cfg.limits, err, n))
        return snprintf(err, n, "user '%.300s': invalid", user), 2;
    buf->len = 0;
    if (segd_avro_encode(l->codec, l->framing, l->schema_id, ev, buf))
        return snprintf(err, n, "cannot encode the event of %s", user), 1;
    int32_t p = segd_partition_of(l->cfg.partitioner, user, strlen(user), l->partitions);
    rd_kafka_resp_err_t kerr;
    while ((kerr = rd_kafka_producev(l->rk, RD_KAFKA_V_TOPIC(l->topic),
                                     RD_KAFKA_V_PARTITION(p),
                                     RD_KAFKA_V_KEY(user, strlen(user)),
                                     RD_KAFKA_V_VALUE(buf->data, buf->len),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(l->rk, 10);
    if (kerr)
        return snprintf(err, n, "produce: %s", rd_kafka_err2str(kerr)), 1;
    return 0;
}

/* Every event validated before the first is produced: a bad id in the list
 * sends nothing. */
static int produce_all(live_t *l, char *const *users, int nusers, char *err, size_t n)
{
    segd_event_t ev;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    int rc = 0;
    for (int i = 0; !rc && i < nusers; i++) {
        segd_event_reset(&ev);
        ev.op = SEGD_OP_ERASE_USER;
        ev.ts_ms = l->a->at_ms;
        if (segd_event_set_user(&ev, users[i], strlen(users[i])) ||
            segd_event_validate(&ev, &l->cfg.limits, err, n))
            rc = 2, snprintf(err, n, "user '%.300s': not a valid user id", users[i]);
    }
    for (int i = 0; !rc && i < nusers; i++)
        rc = produce_user(l, &ev, users[i], &buf, err, n);
    rd_kafka_resp_err_t kerr = rd_kafka_flush(l->rk, 30000);
    if (!rc && (kerr || l->failed))
        rc = 1, snprintf(err, n, "%s", kerr ? "not every event was delivered within 30 s"
                                            : "delivery failed (said above)");
    segd_buf_free(&buf);
    segd_event_free(&ev);
    return rc;
}

/* How many users the store shows erased at at_ms or later; -1 when it cannot
 * be read. A fresh read-only open each time: one sees the store as of it. */
static int count_applied(const live_t *l, const void *items, int n)
{
    char *const *users = items;
    segd_store_t *s = segd_app_open_reader("erase", l->a->db, 0);
    if (!s)
        return -1;
    segd_profile_t p;
    segd_profile_init(&p);
    char err[256];
    int done = 0;
    for (int i = 0; i < n; i++)
        if (segd_store_get(s, users[i], strlen(users[i]), &p, err, sizeof(err)) == SEGD_OK &&
            p.erased_before_ms >= l->a->at_ms)
            done++;
    segd_profile_free(&p);
    segd_store_close(s);
    return done;
}

/* Reads count(l, items, n) every 200 ms until it says all n or --wait-s
 * has passed: the last count, or -1 when the store could not be read. */
static int poll_count(const live_t *l, int (*count)(const live_t *, const void *, int),
                      const void *items, int n)
{
    double deadline = segd_mono_s() + (double)l->a->wait_s;
    for (;;) {
        int done = count(l, items, n);
        if (done < 0 || done == n || segd_mono_s() >= deadline)
            return done;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int wait_applied(const live_t *l, char *const *users, int n)
{
    int done = poll_count(l, count_applied, users, n);
    if (done < 0)
        return SEGD_EXIT_FAIL;
    if (done == n) {
        printf("applied: %s shows all %d erasures\n", l->a->db, n);
        return SEGD_EXIT_OK;
    }
    fprintf(stderr, "segd erase: after %" PRId64 " s %s shows %d of %d erasures: is a segd run "
            "consuming %s into it (segd offsets show --db %s), and does it own these users' "
            "partitions? The events are in the topic and will apply when it does.\n",
            l->a->wait_s, l->a->db, done, n, l->topic, l->a->db);
    return SEGD_EXIT_FAIL;
}

/* The store's floor refuses an erasure below it, as offline (too_late), and
 * ingest one from the future: say so before producing an event segd run
 * would only dead-letter. A retirement is taken below the floor (it only
 * removes), so only its time's future is checked. */
static int check_floor(const live_t *l)
{
    int64_t skew = l->cfg.limits.max_clock_skew_ms;
    if (l->a->at_ms > segd_wall_ms() + skew) {
        fprintf(stderr, "segd %s: from_future: %" PRId64 " is more than %" PRId64
                " ms after now (limits.max.clock.skew.ms); nothing produced\n", l->cmd,
                l->a->at_ms, skew);
        return SEGD_EXIT_USAGE;
    }
    if (!l->a->db || l->retire)
        return 0;
    segd_store_t *s = segd_app_open_reader("erase", l->a->db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_policy_t *pol = segd_store_policy(s);
    char why[160];
    int64_t floor = segd_policy_floor_explain(pol, segd_policy_import_floor(pol), why,
                                              sizeof(why));
    segd_store_close(s);
    if (l->a->at_ms >= floor)
        return 0;
    fprintf(stderr, "segd %s: too_late: %" PRId64 " is below the ingest floor %s; "
            "nothing produced\n", l->cmd, l->a->at_ms, why);
    return SEGD_EXIT_USAGE;
}

/* The config, the floor check and the producer both live commands start
 * with: 0, or the exit code (said on stderr, prefixed by l->cmd). */
static int live_open(live_t *l, char *err, size_t n)
{
    if (load_config(l, err, n)) {
        fprintf(stderr, "segd %s: %s\n", l->cmd, err);
        return SEGD_EXIT_USAGE;
    }
    int rc = check_floor(l);
    if (rc)
        return rc;
    if (make_producer(l, err, n) || count_partitions(l, err, n) || schema_id(l, err, n)) {
        fprintf(stderr, "segd %s: %s\n", l->cmd, err);
        return SEGD_EXIT_FAIL;
    }
    return 0;
}

/* Without a store to watch, delivery is all that is known: whether segd run
 * applied the events (or dead-lettered them) is not, so this is no success. */
static int not_checked(const live_t *l)
{
    fprintf(stderr, "segd %s: sent; not checked: pass --db DIR (the store segd run writes) "
            "and --wait-s N to wait for the effect (exit %d)\n", l->cmd, SEGD_EXIT_UNCHECKED);
    return SEGD_EXIT_UNCHECKED;
}

int segd_erase_live(const segd_erase_live_t *a, char *const *users, int n)
{
    live_t l = {.a = a, .cmd = "erase"};
    char err[512] = "";
    int rc = SEGD_EXIT_FAIL;
    segd_config_init(&l.cfg);
    if ((rc = live_open(&l, err, sizeof(err))))
        goto out;
    int p = produce_all(&l, users, n, err, sizeof(err));
    if (p) {
        fprintf(stderr, "segd erase: %s%s\n", err, p == 2 ? "; nothing produced" : "");
        rc = p == 2 ? SEGD_EXIT_USAGE : SEGD_EXIT_FAIL;
        goto out;
    }
    printf("produced %d ERASE_USER events at ts_ms %" PRId64 " to %s\n", n, a->at_ms, l.topic);
    rc = a->db ? wait_applied(&l, users, n) : not_checked(&l);
out:
    if (l.rk)
        rd_kafka_destroy(l.rk);
    segd_avro_codec_destroy(l.codec);
    segd_registry_destroy(l.reg);
    segd_config_free(&l.cfg);
    return rc;
}

/* ---------- retirement through the log ---------- */

typedef struct retired_seen {
    const int64_t *ids;
    int n, found;
    int64_t before_ms;
} retired_seen_t;

static int seen_retired(void *ctx, int64_t segment_id, int64_t before_ms)
{
    retired_seen_t *r = ctx;
    for (int i = 0; i < r->n; i++)
        if (r->ids[i] == segment_id && before_ms >= r->before_ms)
            r->found++;
    return 0;
}

static int count_retired(const live_t *l, const void *items, int n)
{
    const int64_t *ids = items;
    segd_store_t *s = segd_app_open_reader("segments", l->a->db, 0);
    if (!s)
        return -1;
    retired_seen_t r = {ids, n, 0, l->a->at_ms};
    segd_store_view_t *v = NULL;
    char err[256];
    int bad = segd_store_view_open(s, &v, err, sizeof(err)) ||
              segd_store_view_retirements(v, seen_retired, &r, err, sizeof(err));
    segd_store_view_close(v);
    segd_store_close(s);
    return bad ? -1 : r.found;
}

static int produce_retire(live_t *l, const int64_t *ids, int n, char *err, size_t en)
{
    segd_event_t ev;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    ev.op = SEGD_OP_REMOVE;
    ev.ts_ms = l->a->at_ms;
    int32_t partner = 0;
    int partners = n > 0 && segd_retire_key_partner(ids[0], &partner);
    const char *key = partners ? SEGD_CONTROL_RETIRE_PARTNER_USER : SEGD_CONTROL_RETIRE_USER;
    int rc = segd_event_set_user(&ev, key, strlen(key)) ? 1 : 0;
    for (int i = 0; !rc && i < n; i++) {
        /* a partner's retirement names it in partner_id (core/event.h) */
        segd_seg_update_t u = {.segment_id = partners ? 0 : ids[i]};
        if (partners != segd_retire_key_partner(ids[i], &partner))
            rc = 2, snprintf(err, en, "segments and partners in one retirement");
        u.partner_id = partners ? partner : 0;
        rc = rc ? rc : segd_event_add_segment(&ev, &u) ? 1 : 0;
    }
    if (!rc && (segd_event_validate(&ev, &l->cfg.limits, err, en) ||
                segd_avro_encode(l->codec, l->framing, l->schema_id, &ev, &buf)))
        rc = 2;
    for (int32_t p = 0; !rc && p < l->partitions; p++) {
        rd_kafka_resp_err_t kerr;
        while ((kerr = rd_kafka_producev(l->rk, RD_KAFKA_V_TOPIC(l->topic),
                                         RD_KAFKA_V_PARTITION(p),
                                         RD_KAFKA_V_KEY(key, strlen(key)),
                                         RD_KAFKA_V_VALUE(buf.data, buf.len),
                                         RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                         RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(l->rk, 10);
        if (kerr)
            rc = 1, snprintf(err, en, "produce: %s", rd_kafka_err2str(kerr));
    }
    if (rd_kafka_flush(l->rk, 30000) && !rc)
        rc = 1, snprintf(err, en, "not every event was delivered within 30 s");
    else if (!rc && l->failed)
        rc = 1, snprintf(err, en, "delivery failed (said above)");
    segd_buf_free(&buf);
    segd_event_free(&ev);
    return rc;
}

static int wait_retired(const live_t *l, const int64_t *ids, int n)
{
    int done = poll_count(l, count_retired, ids, n);
    if (done < 0)
        return SEGD_EXIT_FAIL;
    if (done == n) {
        printf("applied: %s lists all %d retirements\n", l->a->db, n);
        return SEGD_EXIT_OK;
    }
    fprintf(stderr, "segd segments retire: after %" PRId64 " s %s lists %d of %d "
            "retirements: is a segd run consuming %s into it (segd offsets show --db %s)? "
            "The events are in the topic and will apply when it does.\n", l->a->wait_s,
            l->a->db, done, n, l->topic, l->a->db);
    return SEGD_EXIT_FAIL;
}

int segd_retire_live(const segd_erase_live_t *a, const int64_t *ids, int n)
{
    live_t l = {.a = a, .cmd = "segments retire", .retire = 1};
    char err[512] = "";
    int rc = SEGD_EXIT_FAIL;
    segd_config_init(&l.cfg);
    if ((rc = live_open(&l, err, sizeof(err))))
        goto out;
    int p = produce_retire(&l, ids, n, err, sizeof(err));
    if (p) {
        fprintf(stderr, "segd segments retire: %s%s\n", err, p == 2 ? "; nothing produced" : "");
        rc = p == 2 ? SEGD_EXIT_USAGE : SEGD_EXIT_FAIL;
        goto out;
    }
    int32_t partner;
    printf("produced a retirement of %d %s%s before ts_ms %" PRId64 " to all %" PRId32
           " partitions of %s\n", n, segd_retire_key_partner(ids[0], &partner) ? "partner"
           : "segment", n == 1 ? "" : "s", a->at_ms, l.partitions, l.topic);
    rc = a->db ? wait_retired(&l, ids, n) : not_checked(&l);
out:
    if (l.rk)
        rd_kafka_destroy(l.rk);
    segd_avro_codec_destroy(l.codec);
    segd_registry_destroy(l.reg);
    segd_config_free(&l.cfg);
    return rc;
}
