/* libsegd-tail's public API (include/segd/tail.h): a facade over the
 * change-topic tail (cache/tail.h) that `segd cache` runs, fed from the
 * segd_cache_t's table and the manifest of the snapshot it loaded last.
 * Built into libsegd-tail only, with hidden visibility like lib/api.c. */
#include "segd/tail.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cache/tail.h"
#include "lib/cache_int.h"

struct segd_cache_tail {
    segd_cache_t *cache; /* its changes count what the tail applies too */
    segd_tail_t *tail;
    segd_log_t *log;
};

SEGD_CACHE_API unsigned segd_cache_tail_version(void) { return SEGD_TAIL_VERSION; }

/* The tail's codes: a snapshot the topic cannot continue (retention, or a
 * recreated topic) is SEGD_ERR_INVALID there. */
static int tail_status(segd_err_t err)
{
    return err == SEGD_ERR_INVALID ? SEGD_CACHE_EGAP
           : err == SEGD_ERR_KAFKA ? SEGD_CACHE_EKAFKA
                                   : segd_cache_status_of(err);
}

SEGD_CACHE_API int segd_cache_tail_new(segd_cache_tail_t **out, segd_cache_t *c,
                                       const segd_cache_tail_opts_t *o, char *why,
                                       size_t why_size)
{
    char scratch[1];
    if (!why || !why_size) {
        why = scratch;
        why_size = sizeof(scratch);
    }
    why[0] = 0;
    if (!out || !c || !o || !o->brokers)
        return SEGD_CACHE_EINVAL;
    *out = NULL;
    segd_cache_tail_t *t = calloc(1, sizeof(*t));
    if (!t)
        return SEGD_CACHE_ENOMEM;
    segd_err_t err = segd_log_new(&t->log, o->log ? o->log : stderr, SEGD_LOG_WARN,
                                  SEGD_LOG_LOGFMT);
    segd_tail_opts_t to;
    segd_tail_opts_default(&to);
    to.brokers = o->brokers;
    if (o->topic)
        to.topic = o->topic;
    to.from_beginning = o->from_beginning;
    to.kafka_props = o->kafka_props;
    to.log = t->log;
    t->cache = c;
    if (!err)
        err = segd_tail_new(&t->tail, c->edge, &to, c->loaded ? &c->manifest : NULL, why,
                            why_size);
    if (err) {
        segd_cache_tail_destroy(t);
        return tail_status(err);
    }
    *out = t;
    return SEGD_CACHE_OK;
}

SEGD_CACHE_API int segd_cache_tail_poll(segd_cache_tail_t *t, int timeout_ms,
                                        uint64_t *applied)
{
    if (!t || timeout_ms < 0)
        return SEGD_CACHE_EINVAL;
    int n = segd_tail_poll(t->tail, timeout_ms);
    if (n > 0)
        atomic_fetch_add(&t->cache->changes, (uint64_t)n);
    if (applied)
        *applied = n > 0 ? (uint64_t)n : 0;
    return n == SEGD_TAIL_GAP ? SEGD_CACHE_EGAP : n < 0 ? SEGD_CACHE_EKAFKA : SEGD_CACHE_OK;
}

SEGD_CACHE_API int segd_cache_tail_catch_up(segd_cache_tail_t *t, int64_t timeout_ms)
{
    if (!t || timeout_ms < 0)
        return SEGD_CACHE_EINVAL;
    char why[512];
    return tail_status(segd_tail_catch_up(t->tail, timeout_ms, why, sizeof(why)));
}

SEGD_CACHE_API void segd_cache_tail_stats(segd_cache_tail_t *t, segd_cache_tail_stats_t *st)
{
    segd_tail_stats_t s;
    segd_tail_get_stats(t->tail, &s);
    st->applied = s.applied;
    st->skipped = s.skipped;
    st->partitions = s.partitions;
    st->caught_up = s.caught_up;
    st->lag_messages = s.lag_messages;
}

SEGD_CACHE_API void segd_cache_tail_destroy(segd_cache_tail_t *t)
{
    if (!t)
        return;
    segd_tail_destroy(t->tail);
    segd_log_destroy(t->log);
    free(t);
}
