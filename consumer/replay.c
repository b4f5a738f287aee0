/* segd replay's engine; see replay.h. Set-up (partitions, ranges, assign),
 * then batches: poll up to batch.max.messages or batch.max.ms, check each
 * message (consumer/ingest), deliver the batch's dead letters, write the
 * batch without offsets. A partition is done when a message or the end of
 * its log reaches its end offset, and is paused so nothing more is fetched. */
#define _GNU_SOURCE
#include "consumer/replay.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/apply.h"
#include "core/partition.h"
#include "consumer/backoff.h"
#include "consumer/dlq.h"
#include "consumer/fetch_conf.h"
#include "consumer/fetch_nudge.h"
#include "consumer/ingest_step.h"
#include "transport/kconf.h"

#define QUERY_TIMEOUT_MS 10000
/* "Out of range" answers for an offset the log holds are asked again with a
 * backoff (a leader change gives them until a follower catches up) for this
 * long since the partition last moved, then the replay gives up. */
#define RESET_GIVE_UP_MS 60000

typedef struct part {
    int32_t partition;
    int64_t start, end; /* [start, end) */
    int64_t next;       /* first offset not yet passed */
    int done;
    int seeking;        /* --from-time: skipping messages until one at or after it */
    int64_t reset_since;  /* monotonic ms of the first out-of-range answer since
                           * next last moved; 0 = none */
    int64_t reset_wait;   /* the backoff before asking again */
} part_t;


/* What a batch did, added to the stats only once it is written. */
typedef struct pending {
    uint64_t messages, events, segments, dead, done, misrouted;
    uint64_t dlq[SEGD_DLQ_REASONS];
} pending_t;

typedef struct replay {
    const segd_replay_opts_t *o;
    const char *topic;
    segd_store_t *store;
    volatile sig_atomic_t *stop;
    rd_kafka_t *rk;
    segd_backoff_t bo;
    segd_ingest_t *ingest;
    segd_dlq_t *dlq;
    segd_applier_t ap;
    part_t parts[SEGD_REPLAY_MAX_PARTITIONS];
    size_t nparts, active;
    int32_t topic_partitions; /* the topic's partition count, for misrouted */
    pending_t pend;
    segd_replay_stats_t *st;
    int outbox; /* batches carry outbox entries */
    segd_fetch_nudge_t nudge; /* a catch-up: wake the fetcher after a full queue */
} replay_t;

/* ---------- set-up ---------- */

static segd_err_t make_consumer(replay_t *r, char *errstr, size_t n)
{
    const segd_config_t *cfg = r->o->cfg;
    /* librdkafka's KafkaConsumer API wants a group.id even for assign(); no
     * group is joined and nothing is committed to it */
    const char *const defaults[] = {"bootstrap.servers", cfg->brokers, "group.id", "segd-replay",
                                    NULL};
    /* applied last: whatever the operator's file says, replay never commits,
     * must see where each partition ends, and must hear of an offset that
     * retention deleted under it (offset_reset) rather than have librdkafka
     * jump to either end of the log without a word */
    const char *const forced[] = {"enable.auto.commit", "false", "enable.auto.offset.store",
                                  "false", "enable.partition.eof", "true",
                                  "auto.offset.reset", "error", NULL};
    char errbuf[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t err = segd_kconf_apply(conf, "replay consumer", defaults, errstr, n);
    if (!err) /* replay and rebuild are a catch-up: the whole fetch share */
        err = segd_fetch_conf_apply(conf, "replay consumer", cfg, SEGD_FETCH_MAIN, errstr, n);
    for (size_t i = 0; !err && i < cfg->n_kafka; i++)
        err = segd_kconf_set(conf, "replay consumer", cfg->kafka[i].key, cfg->kafka[i].value,
                             errstr, n);
    if (!err)
        err = segd_kconf_apply(conf, "replay consumer", forced, errstr, n);
    if (err) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf));
    if (!r->rk) {
        rd_kafka_conf_destroy(conf);
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "consumer: %s", errbuf);
    }
    rd_kafka_poll_set_consumer(r->rk);
    return SEGD_OK;
}

/* The topic's partition ids, from the brokers' metadata. */
static segd_err_t topic_partitions(replay_t *r, int32_t *ids, size_t *nids, char *errstr,
                                   size_t n)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(r->rk, r->topic, NULL);
    if (!rkt)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s: %s", r->topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rd_kafka_metadata(r->rk, 0, rkt, &md, QUERY_TIMEOUT_MS);
    rd_kafka_topic_destroy(rkt);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "metadata for %s: %s", r->topic,
                         rd_kafka_err2str(kerr));
    segd_err_t err = SEGD_OK;
    if (md->topic_cnt != 1 || md->topics[0].err)
        err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "topic %s: %s", r->topic,
                        rd_kafka_err2str(md->topic_cnt ? md->topics[0].err
                                                       : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    else if (md->topics[0].partition_cnt > SEGD_REPLAY_MAX_PARTITIONS)
        err = segd_errf(SEGD_ERR_LIMIT, errstr, n, "topic %s has more than %d partitions",
                        r->topic, SEGD_REPLAY_MAX_PARTITIONS);
    for (int i = 0; !err && i < md->topics[0].partition_cnt; i++)
        ids[i] = md->topics[0].partitions[i].id;
    *nids = err ? 0 : (size_t)md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return err;
}

static int has_id(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

static const segd_replay_pos_t *find_pos(const segd_replay_pos_t *p, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].partition == id)
            return &p[i];
    return NULL;
}

/* The partitions replayed: --partitions, else those --from-offset names,
 * else all; each must exist, and --from-offset / --to-offset may name only
 * replayed partitions (a typo would otherwise be ignored silently). */
static segd_err_t choose_partitions(replay_t *r, char *errstr, size_t n)
{
    const segd_replay_opts_t *o = r->o;
    int32_t ids[SEGD_REPLAY_MAX_PARTITIONS];
    size_t nids = 0;
    segd_err_t err = topic_partitions(r, ids, &nids, errstr, n);
    if (err)
        return err;
    r->topic_partitions = (int32_t)nids;
    const int32_t *want = ids;
    size_t nwant = nids;
    int32_t named[SEGD_REPLAY_MAX_PARTITIONS];
    if (o->partitions) {
        want = o->partitions;
        nwant = o->n_partitions;
    } else if (o->from == SEGD_REPLAY_OFFSETS) {
        for (size_t i = 0; i < o->n_from && i < SEGD_REPLAY_MAX_PARTITIONS; i++)
            named[i] = o->from_offsets[i].partition;
        want = named;
        nwant = o->n_from < SEGD_REPLAY_MAX_PARTITIONS ? o->n_from : SEGD_REPLAY_MAX_PARTITIONS;
    }
    for (size_t i = 0; i < nwant; i++) {
        if (!has_id(ids, nids, want[i]))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "topic %s has no partition %" PRId32
                             " (it has %zu)", r->topic, want[i], nids);
        if (has_id(want, i, want[i]))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "partition %" PRId32 " named twice",
                             want[i]);
        if (o->from == SEGD_REPLAY_OFFSETS && !find_pos(o->from_offsets, o->n_from, want[i]))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "--from-offset has no offset for partition %" PRId32, want[i]);
        r->parts[r->nparts++].partition = want[i];
    }
    for (size_t i = 0; o->from == SEGD_REPLAY_OFFSETS && i < o->n_from; i++)
        if (!has_id(want, nwant, o->from_offsets[i].partition))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "--from-offset names partition %"
                             PRId32 ", which is not replayed", o->from_offsets[i].partition);
    for (size_t i = 0; o->to == SEGD_REPLAY_TO_OFFSETS && i < o->n_to; i++)
        if (!has_id(want, nwant, o->to_offsets[i].partition))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "--to-offset names partition %" PRId32
                             ", which is not replayed", o->to_offsets[i].partition);
    return SEGD_OK;
}

/* The first offset of each partition whose timestamp is >= ms, as the
 * broker answers; -1 where it knows none. */
static segd_err_t offsets_for_time(replay_t *r, int64_t ms, int64_t *out, char *errstr,
                                   size_t n)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)r->nparts);
    for (size_t i = 0; i < r->nparts; i++)
        rd_kafka_topic_partition_list_add(l, r->topic, r->parts[i].partition)->offset = ms;
    rd_kafka_resp_err_t kerr = rd_kafka_offsets_for_times(r->rk, l, QUERY_TIMEOUT_MS);
    segd_err_t err = kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "offsets for time %" PRId64
                                      ": %s", ms, rd_kafka_err2str(kerr))
                          : SEGD_OK;
    for (size_t i = 0; !err && i < r->nparts; i++) {
        rd_kafka_topic_partition_t *tp =
            rd_kafka_topic_partition_list_find(l, r->topic, r->parts[i].partition);
        if (!tp || tp->err)
            err = segd_errf(SEGD_ERR_KAFKA, errstr, n, "offsets for time %" PRId64
                            " of %s [%" PRId32 "]: %s", ms, r->topic, r->parts[i].partition,
                            rd_kafka_err2str(tp ? tp->err : RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION));
        else
            out[i] = tp->offset < 0 ? -1 : tp->offset;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

/* Start and end as asked, then held inside [log start, high watermark]: the
 * part of a range below the log start was deleted or compacted away, the
 * part above the watermark does not exist yet. Both are said. */
static void clamp_range(replay_t *r, part_t *pt, int64_t lo, int64_t hi)
{
    if (pt->end < lo || (pt->start < pt->end && pt->end == lo)) {
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: end offset %" PRId64 " is at or below "
                "the log start %" PRId64 " (deleted or compacted away): nothing to replay\n",
                r->topic, pt->partition, pt->end, lo);
        pt->start = pt->end = pt->next = lo;
        return;
    }
    if (pt->start > hi) {
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: offset %" PRId64 " is beyond the end "
                "of the log %" PRId64 ": nothing to replay\n", r->topic, pt->partition,
                pt->start, hi);
        pt->start = pt->end = pt->next = hi;
        return;
    }
    if (pt->start < lo) {
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: offset %" PRId64 " is below the log "
                "start %" PRId64 " (deleted or compacted away): starting at %" PRId64 "\n",
                r->topic, pt->partition, pt->start, lo, lo);
        r->st->clamped += (uint64_t)((pt->end < lo ? pt->end : lo) - pt->start);
        pt->start = lo;
    }
    if (pt->end > hi) {
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: end offset %" PRId64 " is beyond the "
                "end of the log %" PRId64 ": stopping there\n", r->topic, pt->partition,
                pt->end, hi);
        pt->end = hi;
    }
    if (pt->start > pt->end)
        pt->start = pt->end;
    pt->next = pt->start;
}

/* Where --from-time starts each partition. A broker answers -1 both for "no
 * message at or after the time" and, when it cannot look times up (the dev
 * broker), for every time; asking for time 0, which any message with a
 * timestamp satisfies, tells them apart on a partition that holds messages.
 * Without lookups the partition is read from its start and read_batch skips
 * the messages before the time. */
static segd_err_t time_starts(replay_t *r, const int64_t *lo, const int64_t *hi, int64_t *start,
                              char *errstr, size_t n)
{
    int64_t t[SEGD_REPLAY_MAX_PARTITIONS], any[SEGD_REPLAY_MAX_PARTITIONS];
    segd_err_t err = offsets_for_time(r, r->o->from_ms, t, errstr, n);
    int probe = 0;
    for (size_t i = 0; !err && i < r->nparts; i++)
        probe |= t[i] < 0 && lo[i] < hi[i];
    if (!err && probe)
        err = offsets_for_time(r, 0, any, errstr, n);
    for (size_t i = 0; !err && i < r->nparts; i++) {
        start[i] = t[i] >= 0 ? t[i] : lo[i];
        if (t[i] < 0 && lo[i] < hi[i] && any[i] >= 0) {
            fprintf(stderr, "segd replay: %s [%" PRId32 "]: no message at or after %" PRId64
                    ": nothing to replay\n", r->topic, r->parts[i].partition,
                    r->o->from_ms);
            start[i] = hi[i];
        }
    }
    return err;
}

static segd_err_t set_ranges(replay_t *r, char *errstr, size_t n)
{
    const segd_replay_opts_t *o = r->o;
    int64_t lo[SEGD_REPLAY_MAX_PARTITIONS], hi[SEGD_REPLAY_MAX_PARTITIONS];
    int64_t t[SEGD_REPLAY_MAX_PARTITIONS];
    for (size_t i = 0; i < r->nparts; i++) {
        rd_kafka_resp_err_t kerr = rd_kafka_query_watermark_offsets(
            r->rk, r->topic, r->parts[i].partition, &lo[i], &hi[i], QUERY_TIMEOUT_MS);
        if (kerr)
            return segd_errf(SEGD_ERR_KAFKA, errstr, n, "watermarks of %s [%" PRId32 "]: %s",
                             r->topic, r->parts[i].partition, rd_kafka_err2str(kerr));
    }
    segd_err_t err =
        o->from == SEGD_REPLAY_TIME ? time_starts(r, lo, hi, t, errstr, n) : SEGD_OK;
    for (size_t i = 0; !err && i < r->nparts; i++) {
        part_t *pt = &r->parts[i];
        pt->seeking = o->from == SEGD_REPLAY_TIME;
        pt->start = o->from == SEGD_REPLAY_BEGINNING ? lo[i]
                    : o->from == SEGD_REPLAY_TIME
                        ? t[i]
                        : find_pos(o->from_offsets, o->n_from, pt->partition)->offset;
    }
    if (!err && o->to == SEGD_REPLAY_TO_TIME)
        err = offsets_for_time(r, o->to_ms, t, errstr, n);
    for (size_t i = 0; !err && i < r->nparts; i++) {
        part_t *pt = &r->parts[i];
        const segd_replay_pos_t *to =
            o->to == SEGD_REPLAY_TO_OFFSETS ? find_pos(o->to_offsets, o->n_to, pt->partition)
                                            : NULL;
        /* the first message at or after --to-time also ends it (read_batch) */
        pt->end = o->to == SEGD_REPLAY_TO_TIME && t[i] >= 0 ? t[i] : to ? to->offset : hi[i];
        if (to && o->from == SEGD_REPLAY_OFFSETS && to->offset < pt->start)
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "partition %" PRId32 ": --to-offset %"
                             PRId64 " is below --from-offset %" PRId64, pt->partition,
                             to->offset, pt->start);
        clamp_range(r, pt, lo[i], hi[i]);
        r->st->total += (uint64_t)(pt->end - pt->start);
    }
    r->st->partitions = r->nparts;
    return err;
}

/* The partitions not done, each at its next offset (at first its start):
 * also after an offset reset, which leaves librdkafka's fetcher of that
 * partition stopped until it is assigned again. */
static segd_err_t assign_active(replay_t *r, char *errstr, size_t n)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)r->nparts);
    for (size_t i = 0; i < r->nparts; i++)
        if (!r->parts[i].done)
            rd_kafka_topic_partition_list_add(l, r->topic, r->parts[i].partition)->offset =
                r->parts[i].next;
    r->active = (size_t)l->cnt;
    rd_kafka_resp_err_t kerr = l->cnt ? rd_kafka_assign(r->rk, l) : RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_partition_list_destroy(l);
    return kerr ? segd_errf(SEGD_ERR_KAFKA, errstr, n, "assign: %s", rd_kafka_err2str(kerr))
                : SEGD_OK;
}

/* Partitions with something to read are assigned at their start; the
 * others are done at once. */
static segd_err_t assign(replay_t *r, char *errstr, size_t n)
{
    for (size_t i = 0; i < r->nparts; i++)
        r->parts[i].done = r->parts[i].start >= r->parts[i].end;
    return assign_active(r, errstr, n);
}

/* ---------- batches ---------- */

static part_t *find_part(replay_t *r, const rd_kafka_message_t *m)
{
    if (!m->rkt || strcmp(rd_kafka_topic_name(m->rkt), r->topic))
        return NULL;
    for (size_t i = 0; i < r->nparts; i++)
        if (r->parts[i].partition == m->partition)
            return &r->parts[i];
    return NULL;
}

/* Offsets up to next are behind us (a compacted topic's gaps included). */
static void pass(replay_t *r, part_t *pt, int64_t next)
{
    if (pt->done || next <= pt->next)
        return;
    if (next > pt->end)
        next = pt->end;
    r->pend.done += (uint64_t)(next - pt->next);
    pt->next = next;
    pt->reset_since = 0;
    if (next < pt->end)
        return;
    pt->done = 1;
    r->active--;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, r->topic, pt->partition);
    rd_kafka_pause_partitions(r->rk, l); /* nothing past its end is fetched */
    rd_kafka_topic_partition_list_destroy(l);
}

/* A count-only pass (replay.h): what the message would do, nothing more. */
static int count_message(replay_t *r, const rd_kafka_message_t *m, const segd_event_t *ev,
                         int reason)
{
    if (ev) {
        r->pend.events++;
        r->pend.segments += ev->n_segments;
    } else {
        r->pend.dead++;
        r->pend.dlq[reason]++;
        if (reason == SEGD_DLQ_TOO_LATE && r->o->below_floor)
            r->o->below_floor(r->o->below_floor_ctx, m->partition,
                              segd_ingest_last_ts(r->ingest));
    }
    r->pend.messages++;
    return 0;
}

/* 0 done, -1 a stop interrupted a registry wait, -2 out of memory: in both
 * the message is neither applied nor passed. */
static int handle_message(replay_t *r, const rd_kafka_message_t *m)
{
    char why[256];
    int reason = 0;
    const segd_event_t *ev = NULL;
    /* the DLQ topic gets an empty key or value as none, as segd run sends it;
     * the file tells null from empty */
    int ok = segd_ingest_step(r->ingest, r->o->count_only ? NULL : &r->ap, r->dlq,
                              r->o->dlq_file != NULL, m, &ev, &reason, why, sizeof(why), NULL);
    if (ok < 0)
        return ok;
    if (r->o->count_only)
        return count_message(r, m, ev, reason);
    if (ok) {
        r->pend.events++;
        r->pend.segments += ev->n_segments;
        /* counted for the summary only: the store's counter is segd run's
         * (a replay re-reads what run already counted) */
        if (r->topic_partitions > 0 &&
            segd_partition_of(r->o->cfg->partitioner, ev->user_id, ev->user_id_len,
                              r->topic_partitions) != m->partition)
            r->pend.misrouted++;
    } else {
        r->pend.dead++;
        r->pend.dlq[reason]++;
    }
    r->pend.messages++;
    return 0;
}

/* The next offset of a partition is out of range (auto.offset.reset=error):
 * retention deleted it under the replay, or the log was truncated. From the
 * log's watermarks now: the deleted part is skipped with a note (those
 * messages cannot be replayed), the partition ends if nothing of its range
 * is left, and it is assigned again where it can go on. An offset inside
 * the log is asked for again after a backoff, for RESET_GIVE_UP_MS at most. */
static segd_err_t offset_reset(replay_t *r, const rd_kafka_message_t *m, char *errstr,
                               size_t n)
{
    part_t *pt = find_part(r, m);
    if (!pt || pt->done)
        return SEGD_OK;
    int64_t lo, hi, at = pt->next;
    rd_kafka_resp_err_t kerr = rd_kafka_query_watermark_offsets(
        r->rk, r->topic, pt->partition, &lo, &hi, QUERY_TIMEOUT_MS);
    if (kerr)
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "%s [%" PRId32 "]: offset %" PRId64
                         " is out of range and the watermarks cannot be read: %s", r->topic,
                         pt->partition, at, rd_kafka_err2str(kerr));
    if (lo > at) {
        int64_t to = lo < pt->end ? lo : pt->end;
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: offsets %" PRId64 "..%" PRId64
                " were deleted while replaying (the log starts at %" PRId64 " now): messages "
                "lost to retention cannot be replayed; %" PRId64 " offsets skipped%s\n",
                r->topic, pt->partition, at, to - 1, lo, to - at,
                to == pt->end ? ", nothing of the range is left" : "");
        r->st->lost += (uint64_t)(to - at);
        pass(r, pt, to);
    } else if (at >= hi) {
        fprintf(stderr, "segd replay: %s [%" PRId32 "]: offset %" PRId64 " is beyond the end "
                "of the log %" PRId64 " now (truncated): stopping there\n", r->topic,
                pt->partition, at, hi);
        r->st->lost += (uint64_t)(pt->end - at);
        pass(r, pt, pt->end);
    } else if (pt->reset_since &&
               segd_mono_ms() - pt->reset_since > RESET_GIVE_UP_MS) {
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "%s [%" PRId32 "]: offset %" PRId64
                         " is out of range though the log holds [%" PRId64 ", %" PRId64 "): %s",
                         r->topic, pt->partition, at, lo, hi, rd_kafka_message_errstr(m));
    } else {
        char why[256];
        snprintf(why, sizeof(why), "%s [%" PRId32 "]: offset %" PRId64 " was refused as out "
                 "of range though the log holds [%" PRId64 ", %" PRId64 "): asking again",
                 r->topic, pt->partition, at, lo, hi);
        if (!pt->reset_since) {
            pt->reset_since = segd_mono_ms();
            pt->reset_wait = 100;
        }
        pt->reset_wait = segd_backoff_wait(&r->bo, pt->reset_wait, r->o->cfg->retry_max_ms, why);
    }
    return pt->done ? SEGD_OK : assign_active(r, errstr, n);
}

/* Errors that no wait cures end the replay; the others (a broker away) are
 * said and librdkafka retries them. */
static segd_err_t consumer_event(replay_t *r, const rd_kafka_message_t *m, char *errstr,
                                 size_t n)
{
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        part_t *pt = find_part(r, m);
        if (pt)
            pass(r, pt, m->offset);
        return SEGD_OK;
    }
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
        return offset_reset(r, m, errstr, n);
    switch (m->err) {
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR__FATAL:
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "consumer: %s",
                         rd_kafka_message_errstr(m));
    default:
        fprintf(stderr, "segd replay: consumer: %s\n", rd_kafka_message_errstr(m));
        return SEGD_OK;
    }
}

/* The time bounds on the messages themselves, so that a range is exact
 * whatever the broker's time lookup answered: before the first message at
 * or after --from-time nothing applies, and the first at or after
 * --to-time ends its partition. 0: the message is outside (passed). */
static int in_time(replay_t *r, part_t *pt, const rd_kafka_message_t *m)
{
    const segd_replay_opts_t *o = r->o;
    if (!pt->seeking && o->to != SEGD_REPLAY_TO_TIME)
        return 1;
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    if (pt->seeking && ts < o->from_ms)
        return 0;
    pt->seeking = 0;
    if (o->to == SEGD_REPLAY_TO_TIME && ts >= o->to_ms) {
        pass(r, pt, pt->end);
        return 0;
    }
    return 1;
}

/* Polls one batch. Returns 0, -1 (stopped inside a registry wait), -2 (out
 * of memory) or -3 (*errstr: a consumer error no wait cures). */
static int read_batch(replay_t *r, char *errstr, size_t n)
{
    const segd_config_t *cfg = r->o->cfg;
    int64_t deadline = segd_mono_ms() + cfg->batch_max_ms;
    int64_t taken = 0;
    while (taken < cfg->batch_max_messages && r->active && !*r->stop) {
        int64_t left = deadline - segd_mono_ms();
        if (left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, (int)left);
        if (!m)
            continue;
        if (!m->err)
            segd_fetch_nudge_seen(&r->nudge, r->rk, m->len);
        int rc = 0;
        part_t *pt = m->err ? NULL : find_part(r, m);
        if (m->err)
            rc = consumer_event(r, m, errstr, n) ? -3 : 0;
        else if (pt && !pt->done && m->offset >= pt->next && m->offset < pt->end &&
                 in_time(r, pt, m))
            rc = handle_message(r, m);
        if (!rc && pt) {
            pass(r, pt, m->offset + 1);
            taken++;
        }
        rd_kafka_message_destroy(m);
        if (rc)
            return rc;
    }
    return 0;
}

/* Dead letters first (on the DLQ topic or fsync'd in the file), then the
 * data in one WriteBatch with its outbox entry and no offsets. A failure
 * leaves both pending: after a store fault the write is retried until it
 * succeeds or a stop. */
static segd_err_t flush_batch(replay_t *r, char *errstr, size_t n)
{
    segd_err_t err = r->dlq ? segd_dlq_deliver(r->dlq, errstr, n) : SEGD_OK;
    if (err)
        return err;
    if (r->o->write_offsets && !r->o->count_only) {
        for (size_t i = 0; i < r->nparts; i++)
            segd_batch_set_offset(r->ap.batch, r->topic, r->parts[i].partition,
                                  r->parts[i].next);
        segd_batch_set_partition_count(r->ap.batch, r->topic, r->topic_partitions);
    }
    int64_t wait = 100;
    while (!r->o->count_only && (err = segd_applier_flush(&r->ap, errstr, n)) != SEGD_OK) {
        if (*r->stop || err == SEGD_ERR_ABORTED)
            return err;
        wait = segd_backoff_wait(&r->bo, wait, r->o->cfg->retry_max_ms, errstr);
    }
    segd_backoff_cleared(&r->bo);
    if (r->dlq)
        segd_dlq_clear(r->dlq);
    segd_replay_stats_t *st = r->st;
    st->messages += r->pend.messages;
    st->events += r->pend.events;
    st->segments += r->pend.segments;
    st->dead += r->pend.dead;
    st->done += r->pend.done;
    st->misrouted += r->pend.misrouted;
    for (int i = 0; i < SEGD_DLQ_REASONS; i++)
        st->dlq[i] += r->pend.dlq[i];
    if (r->pend.messages)
        st->batches++;
    memset(&r->pend, 0, sizeof(r->pend));
    return SEGD_OK;
}

static void report(replay_t *r)
{
    r->st->retries = r->bo.retries;
    if (r->o->progress)
        r->o->progress(r->o->progress_ctx, r->st);
}

/* As segd run's ingest waits while its publisher is behind, replay stops
 * before a batch once the outbox holds more than changes.max.outbox entries:
 * no publisher runs to drain it. Everything before is written. */
static segd_err_t outbox_full(replay_t *r, char *errstr, size_t n)
{
    int64_t max = r->o->cfg->changes_max_outbox;
    if (!r->outbox || max <= 0 || r->o->count_only) /* 0: no bound, as for segd run */
        return SEGD_OK;
    uint64_t depth = segd_store_outbox_depth(r->store);
    if (depth <= (uint64_t)max)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_LIMIT, errstr, n, "the outbox holds %" PRIu64 " entries, over "
                     "changes.max.outbox %" PRId64 ": run `segd run` to publish them, or "
                     "replay with --no-changes", depth, max);
}

static segd_err_t replay_loop(replay_t *r, char *errstr, size_t n)
{
    /* the offsets alone first (write_offsets): also those of partitions
     * with nothing to read, which no batch would otherwise store */
    segd_err_t err = r->o->write_offsets ? flush_batch(r, errstr, n) : SEGD_OK;
    report(r);
    while (!err && r->active && !*r->stop && !(err = outbox_full(r, errstr, n))) {
        int rc = read_batch(r, errstr, n);
        char ferr[512] = "";
        /* what was read before a stop or a failure is still written */
        segd_err_t fe = flush_batch(r, ferr, sizeof(ferr));
        if (rc == -3 || rc == -2) { /* errstr says why; a failed write comes second */
            if (rc == -2)
                segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
            if (fe)
                fprintf(stderr, "segd replay: last batch not written: %s\n", ferr);
            err = rc == -2 ? SEGD_ERR_NOMEM : SEGD_ERR_KAFKA;
        } else if (fe) {
            err = segd_errf(fe, errstr, n, "%s", ferr);
        }
        report(r);
    }
    if (!err && r->active)
        err = segd_errf(SEGD_ERR_ABORTED, errstr, n, "stopped by a signal");
    return err;
}

segd_err_t segd_replay_run(const segd_replay_opts_t *o, segd_store_t *store,
                           volatile sig_atomic_t *stop, segd_replay_stats_t *st, char *errstr,
                           size_t n)
{
    memset(st, 0, sizeof(*st));
    replay_t *r = calloc(1, sizeof(*r));
    if (!r)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    r->o = o;
    r->topic = o->cfg->topics[0];
    r->store = store;
    r->stop = stop;
    r->st = st;
    segd_err_t err = segd_applier_init(&r->ap, store);
    if (err) {
        segd_errf(err, errstr, n, "out of memory");
        goto out_free;
    }
    r->outbox = !o->no_changes && o->cfg->changes_enable;
    if (r->outbox)
        segd_applier_enable_outbox(&r->ap);
    if ((err = segd_ingest_new(&r->ingest, o->cfg, store, stop, &r->bo, errstr, n)))
        goto out_applier;
    /* a count writes no dead letters */
    err = o->count_only ? SEGD_OK
          : o->dlq_file ? segd_dlq_new_file(&r->dlq, o->dlq_file, errstr, n)
                        : segd_dlq_new_topic(&r->dlq, o->cfg, stop, &r->bo, errstr, n);
    if (err)
        goto out_ingest;
    if ((err = make_consumer(r, errstr, n)))
        goto out_dlq;
    if (!(err = choose_partitions(r, errstr, n)) && !(err = set_ranges(r, errstr, n)) &&
        !(err = assign(r, errstr, n)))
        err = replay_loop(r, errstr, n);
    rd_kafka_consumer_close(r->rk); /* no group was joined: nothing to commit or revoke */
    rd_kafka_destroy(r->rk);
out_dlq:
    segd_dlq_destroy(r->dlq);
out_ingest:
    segd_ingest_destroy(r->ingest);
out_applier:
    segd_applier_free(&r->ap);
out_free:
    free(r);
    return err;
}
