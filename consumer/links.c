/* Links topic -> identity graph; see links.h. */
#include "consumer/links.h"
#include "transport/kmeta.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "consumer/dlq.h"
#include "consumer/fetch_conf.h"
#include "consumer/fetch_nudge.h"
#include "consumer/ingest.h"
#include "consumer/member_outbox.h"
#include "transport/kconf.h"
#include "transport/registry.h"
#include "wire/link_event.h"

struct segd_links {
    const segd_config_t *cfg;
    segd_store_t *store;
    volatile sig_atomic_t *stop;
    segd_backoff_t *backoff;
    rd_kafka_t *rk;
    segd_registry_t *registry;
    segd_link_codec_t *codec;
    segd_ident_t *ident;
    segd_batch_t *batch;
    segd_dlq_t *dlq;
    int32_t n_parts;
    int64_t *next;  /* per partition: the offset after the last message taken */
    uint8_t *dirty; /* per partition: next moved in this batch */
    uint8_t *eof;   /* per partition: its end was reported (opts.catch_up) */
    segd_member_outbox_t members; /* the batch's membership changes (DESIGN §10.6); zeroed
                                   * is initialised */
    segd_links_opts_t o;
    segd_links_stats_t st;
    segd_fetch_nudge_t nudge; /* a catch-up: wake the fetcher after a full queue */
};

void segd_links_get_stats(const segd_links_t *l, segd_links_stats_t *st) { *st = l->st; }

static segd_err_t make_consumer(segd_links_t *l, char *errstr, size_t n)
{
    const segd_config_t *cfg = l->cfg;
    /* assign() only, offsets in the store: librdkafka wants a group.id for
     * assign all the same, and uses it for nothing without subscribe or
     * commit (librdkafka issue 3261), so a name of our own that joins no group */
    char group[300];
    snprintf(group, sizeof(group), "%s.links-assign", cfg->group ? cfg->group : "segd");
    const char *const defaults[] = {"bootstrap.servers", cfg->brokers, "group.id", group,
                                    "enable.auto.commit", "false", "enable.auto.offset.store",
                                    "false", "enable.partition.eof",
                                    l->o.catch_up ? "true" : "false", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "links", defaults, errstr, n);
    if (!err) /* beside the ingest consumer, within the budget's headroom */
        err = segd_fetch_conf_apply(conf, "links", cfg, SEGD_FETCH_SIDE, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].key, "group.id") && strcmp(cfg->kafka[i].key, "group.instance.id"))
            err = segd_kconf_set(conf, "links", cfg->kafka[i].key, cfg->kafka[i].value, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    segd_kconf_set_logger(conf, cfg->log);
    if (!(l->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf)))) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "links consumer: %s", errbuf);
    }
    rd_kafka_poll_set_consumer(l->rk);
    return SEGD_OK;
}

static segd_err_t partition_count(segd_links_t *l, int32_t *count, char *errstr, size_t n)
{
    const char *topic = l->cfg->identity_links_topic;
    segd_err_t err = segd_kmeta_partitions(l->rk, topic, 10000, count, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "identity.links.topic %s does not exist (identity.enable = 1)", topic);
    return err;
}

/* Every partition, from its stored offset or the beginning. */
static segd_err_t assign_all(segd_links_t *l, char *errstr, size_t n)
{
    segd_err_t err = partition_count(l, &l->n_parts, errstr, n);
    if (err)
        return err;
    if (!(l->next = calloc((size_t)l->n_parts + 1, sizeof(*l->next))) ||
        !(l->dirty = calloc((size_t)l->n_parts + 1, 1)) ||
        !(l->eof = calloc((size_t)l->n_parts + 1, 1)))
        return SEGD_ERR_NOMEM;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(l->n_parts);
    for (int32_t p = 0; !err && p < l->n_parts; p++) {
        int64_t off = RD_KAFKA_OFFSET_BEGINNING;
        err = segd_store_offset_get(l->store, l->cfg->identity_links_topic, p, &off, errstr, n);
        if (err == SEGD_ERR_NOTFOUND) {
            off = RD_KAFKA_OFFSET_BEGINNING;
            err = SEGD_OK;
        }
        rd_kafka_topic_partition_list_add(parts, l->cfg->identity_links_topic, p)->offset = off;
    }
    rd_kafka_resp_err_t kerr = err ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_assign(l->rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    if (kerr)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "assign %s: %s", l->cfg->identity_links_topic,
                        rd_kafka_err2str(kerr));
    return err;
}

static segd_err_t make_codec(segd_links_t *l, char *errstr, size_t n)
{
    const segd_config_t *cfg = l->cfg;
    if (cfg->registry_url) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = cfg->registry_auth;
        ro.ca_file = cfg->registry_ca;
        segd_err_t err = segd_registry_new(&l->registry, cfg->registry_url, &ro, errstr, n);
        if (err)
            return err;
    }
    segd_schema_source_t src = {segd_registry_lookup, l->registry};
    return segd_link_codec_new(&l->codec, l->registry ? &src : NULL, errstr, n);
}

segd_err_t segd_links_new(segd_links_t **out, const segd_config_t *cfg, segd_store_t *store,
                          volatile sig_atomic_t *stop, segd_backoff_t *backoff, char *errstr,
                          size_t n)
{
    return segd_links_new_opts(out, cfg, store, NULL, stop, backoff, errstr, n);
}

segd_err_t segd_links_new_opts(segd_links_t **out, const segd_config_t *cfg,
                               segd_store_t *store, const segd_links_opts_t *o,
                               volatile sig_atomic_t *stop, segd_backoff_t *backoff,
                               char *errstr, size_t n)
{
    segd_links_t *l = calloc(1, sizeof(*l));
    if (!l)
        return SEGD_ERR_NOMEM;
    if (o)
        l->o = *o;
    l->o.dlq_file = NULL; /* read here only: not kept */
    l->cfg = cfg;
    l->store = store;
    l->stop = stop;
    l->backoff = backoff;
    segd_ident_opts_t io = {cfg->identity_min_weight, (uint32_t)cfg->identity_max_component,
                            (uint32_t)cfg->identity_max_links};
    segd_err_t err = segd_ident_new(store, &io, &l->ident, errstr, n);
    if (!err)
        err = segd_batch_new(store, &l->batch);
    if (!err)
        err = make_codec(l, errstr, n);
    if (!err)
        err = o && o->dlq_file ? segd_dlq_new_file(&l->dlq, o->dlq_file, errstr, n)
                               : segd_dlq_new_topic(&l->dlq, cfg, stop, backoff, errstr, n);
    if (!err)
        err = make_consumer(l, errstr, n);
    if (!err)
        err = assign_all(l, errstr, n);
    if (err) {
        segd_links_destroy(l);
        return err;
    }
    *out = l;
    return SEGD_OK;
}

void segd_links_destroy(segd_links_t *l)
{
    if (!l)
        return;
    if (l->rk) {
        rd_kafka_consumer_close(l->rk);
        rd_kafka_destroy(l->rk);
    }
    segd_dlq_destroy(l->dlq);
    segd_link_codec_destroy(l->codec);
    segd_registry_destroy(l->registry);
    segd_batch_destroy(l->batch);
    segd_ident_destroy(l->ident);
    segd_member_outbox_free(&l->members);
    free(l->next);
    free(l->dirty);
    free(l->eof);
    free(l);
}

/* ---------- one message ---------- */

/* A membership change goes into the batch's outbox entries (the change
 * stream's MemberEvents, written with the graph they describe). */
static int change_cb(void *ctx, const segd_ident_change_t *c)
{
    segd_links_t *l = ctx;
    return segd_member_outbox_add(&l->members, l->batch, c) != SEGD_OK;
}

/* The checks of DESIGN §10.1 after decoding; 0 = ok, else the DLQ reason. */
static int check_link(segd_links_t *l, const rd_kafka_message_t *m, const segd_wire_link_t *w,
                      char *why, size_t n)
{
    if (w->id_a_len > l->cfg->limits.max_user_id || w->id_b_len > l->cfg->limits.max_user_id) {
        snprintf(why, n, "an id is longer than %zu bytes", l->cfg->limits.max_user_id);
        return SEGD_DLQ_LIMIT;
    }
    if (!segd_utf8_valid(w->id_a, w->id_a_len) || !segd_utf8_valid(w->id_b, w->id_b_len)) {
        snprintf(why, n, "an id is not strict UTF-8");
        return SEGD_DLQ_BAD_UTF8;
    }
    if (m->key) {
        int a_first = w->id_a_len < w->id_b_len
                          ? memcmp(w->id_a, w->id_b, w->id_a_len) <= 0
                          : memcmp(w->id_a, w->id_b, w->id_b_len) < 0;
        const char *lo = a_first ? w->id_a : w->id_b;
        size_t lo_len = a_first ? w->id_a_len : w->id_b_len;
        if (m->key_len != lo_len || memcmp(m->key, lo, lo_len)) {
            snprintf(why, n, "key is not the smaller id");
            return SEGD_DLQ_KEY_MISMATCH;
        }
    }
    return 0;
}

/* Decodes, waiting while the registry is down; 1 decoded, 0 dead letter
 * (*reason), -1 stopped. */
static int decode(segd_links_t *l, const rd_kafka_message_t *m, segd_wire_link_t *w,
                  int *reason, char *why, size_t n)
{
    if (m->len > l->cfg->limits.max_message) {
        snprintf(why, n, "message of %zu bytes exceeds %zu", m->len, l->cfg->limits.max_message);
        *reason = SEGD_DLQ_OVERSIZE;
        return 0;
    }
    int64_t wait = 100;
    for (;;) {
        segd_err_t err = segd_link_decode(l->codec, l->cfg->framing, m->payload, m->len, w, why, n);
        if (!err)
            return 1;
        if (err != SEGD_ERR_HTTP) {
            *reason = err == SEGD_ERR_SCHEMA ? SEGD_DLQ_UNKNOWN_SCHEMA : SEGD_DLQ_DECODE;
            return 0;
        }
        if (*l->stop)
            return -1;
        wait = segd_backoff_wait(l->backoff, wait, l->cfg->retry_max_ms, why);
    }
}

/* handle()'s "stopped before deciding": positive, because SEGD_ERR_NOMEM is
 * -1 and an allocation failure must never pass for a stop (the batch would
 * be written with half an event in it, and the event applied again). */
#define UNDECIDED 1

/* 0 handled, UNDECIDED (the message comes again), or a segd_err_t on a store
 * or memory failure. */
static int handle(segd_links_t *l, const rd_kafka_message_t *m, char *errstr, size_t n)
{
    char why[256] = "";
    int reason = -1;
    segd_wire_link_t w;
    int ok = decode(l, m, &w, &reason, why, sizeof(why));
    if (ok < 0)
        return UNDECIDED;
    if (ok && (reason = check_link(l, m, &w, why, sizeof(why))) == 0) {
        segd_link_event_t ev = {w.id_a, w.id_a_len, w.id_b, w.id_b_len,
                                w.op == SEGD_WIRE_LINK ? SEGD_LINK : SEGD_UNLINK, w.ts_ms,
                                w.weight};
        segd_ident_result_t res = SEGD_IDENT_APPLIED;
        segd_err_t err = segd_link_event_check(&ev, why, sizeof(why));
        if (err)
            reason = SEGD_DLQ_INVALID;
        else if ((err = segd_ident_apply(l->ident, l->batch, &ev,
                                         l->o.no_changes ? NULL : change_cb, l, &res, errstr, n)))
            return err;
        else if (res != SEGD_IDENT_APPLIED) {
            reason = SEGD_DLQ_SUPERNODE;
            snprintf(why, sizeof(why), res == SEGD_IDENT_SUPERNODE_LINKS
                                 ? "supernode: an id already has identity.max.links edges"
                                 : "supernode: the component would exceed identity.max.component");
            l->st.supernode++;
        } else {
            reason = -1;
            l->st.applied++;
        }
    }
    if (reason >= 0) {
        if (segd_dlq_add(l->dlq, l->cfg->identity_links_topic, m->partition, m->offset,
                         m->key_len ? m->key : NULL, m->key_len, m->len ? m->payload : NULL,
                         m->len, segd_dlq_reason_name(reason), why))
            return SEGD_ERR_NOMEM;
        l->st.dlq++;
    }
    return 0;
}

/* ---------- one batch ---------- */

static segd_err_t write_batch(segd_links_t *l, char *errstr, size_t n)
{
    int any = 0;
    for (int32_t p = 0; p < l->n_parts; p++)
        if (l->dirty[p]) {
            segd_batch_set_offset(l->batch, l->cfg->identity_links_topic, p, l->next[p]);
            any = 1;
        }
    if (!any)
        return SEGD_OK;
    segd_err_t err;
    /* The membership changes still gathered become this batch's last outbox
     * entry, so the publisher sends their MemberEvents only once the links
     * they follow from are stored. It happens once, before the retry loop,
     * because a failed write leaves the batch as it was, that entry included:
     * the retry writes the same batch again. */
    if ((err = segd_member_outbox_flush(&l->members, l->batch)))
        return err;
    int64_t wait = 100;
    while ((err = segd_dlq_deliver(l->dlq, errstr, n)) ||
           (err = segd_store_write(l->store, l->batch, errstr, n))) {
        if (*l->stop || err == SEGD_ERR_ABORTED)
            return err;
        wait = segd_backoff_wait(l->backoff, wait, l->cfg->retry_max_ms, errstr);
    }
    segd_batch_clear(l->batch);
    segd_ident_reset(l->ident);
    segd_dlq_clear(l->dlq);
    memset(l->dirty, 0, (size_t)l->n_parts);
    l->st.member_changes += l->members.appended;
    l->members.appended = 0;
    l->st.batches++;
    return SEGD_OK;
}

segd_err_t segd_links_step(segd_links_t *l, int wait_ms, char *errstr, size_t n)
{
    for (int64_t taken = 0; taken < l->cfg->batch_max_messages && !*l->stop; taken++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(l->rk, taken ? 0 : wait_ms);
        if (!m)
            break;
        if (!m->err)
            segd_fetch_nudge_seen(&l->nudge, l->rk, m->len);
        if (m->err || m->partition < 0 || m->partition >= l->n_parts) {
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && m->partition >= 0 &&
                m->partition < l->n_parts)
                l->eof[m->partition] = 1;
            rd_kafka_message_destroy(m); /* partitions added later: at the next start */
            continue;
        }
        l->st.messages++;
        int rc = handle(l, m, errstr, n);
        if (rc == 0) {
            l->next[m->partition] = m->offset + 1;
            l->dirty[m->partition] = 1;
        } else { /* undecided: read it again after what was taken is written */
            rd_kafka_topic_partition_list_t *pos = rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(pos, l->cfg->identity_links_topic, m->partition)
                ->offset = m->offset;
            rd_kafka_error_t *e = rd_kafka_seek_partitions(l->rk, pos, 5000);
            if (e)
                rd_kafka_error_destroy(e);
            rd_kafka_topic_partition_list_destroy(pos);
        }
        rd_kafka_message_destroy(m);
        if (rc < 0) { /* the batch may hold half an event: drop it, and segd run stops
                        * (a restart reads the links from their stored offsets) */
            segd_batch_clear(l->batch);
            segd_ident_reset(l->ident);
            segd_dlq_clear(l->dlq);
            segd_member_outbox_reset(&l->members);
            memset(l->dirty, 0, (size_t)l->n_parts);
            return (segd_err_t)rc;
        }
        if (rc)
            break;
    }
    return write_batch(l, errstr, n);
}

segd_err_t segd_links_catch_up(segd_links_t *l, char *errstr, size_t n)
{
    if (!l->o.catch_up)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "links consumer made without catch_up");
    for (;;) {
        int32_t behind = 0;
        for (int32_t p = 0; p < l->n_parts; p++)
            behind += !l->eof[p];
        if (!behind)
            return SEGD_OK;
        if (*l->stop)
            return segd_errf(SEGD_ERR_ABORTED, errstr, n, "stopped with %" PRId32 " of %" PRId32
                             " partitions of %s not read to their end", behind, l->n_parts,
                             l->cfg->identity_links_topic);
        segd_err_t err = segd_links_step(l, 500, errstr, n);
        if (err)
            return err;
    }
}
