/* Input message checks shared by segd run and segd replay; see ingest.h.
 * Moved out of pipeline.c unchanged, so both read the input the same way. */
#define _GNU_SOURCE
#include "consumer/ingest.h"
#include "consumer/apply.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "transport/registry.h"

struct segd_ingest {
    const segd_config_t *cfg;
    segd_store_t *store;
    volatile sig_atomic_t *stop;
    segd_backoff_t *backoff;
    segd_registry_t *registry;
    segd_avro_codec_t *codec;
    segd_event_t ev;
};

static const char *const reason_names[SEGD_DLQ_REASONS] = {
    "decode", "unknown_schema", "oversize", "limit", "invalid", "key_mismatch", "bad_utf8",
    "too_late", "from_future", "supernode"};

const char *segd_dlq_reason_name(int reason)
{
    return reason >= 0 && reason < SEGD_DLQ_REASONS ? reason_names[reason] : "?";
}

static segd_err_t make_codec(segd_ingest_t *g, char *errstr, size_t n)
{
    const segd_config_t *cfg = g->cfg;
    if (cfg->registry_url) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = cfg->registry_auth;
        ro.ca_file = cfg->registry_ca;
        segd_err_t err = segd_registry_new(&g->registry, cfg->registry_url, &ro, errstr, n);
        if (err)
            return err;
    }
    segd_schema_source_t src = {segd_registry_lookup, g->registry};
    segd_err_t err =
        segd_avro_codec_new(&g->codec, NULL, g->registry ? &src : NULL, errstr, n);
    if (!err) /* stop decoding an oversized array early, not after allocating it */
        segd_avro_codec_set_limits(g->codec, &cfg->limits);
    return err;
}

segd_err_t segd_ingest_new(segd_ingest_t **out, const segd_config_t *cfg, segd_store_t *store,
                           volatile sig_atomic_t *stop, segd_backoff_t *backoff, char *errstr,
                           size_t n)
{
    segd_ingest_t *g = calloc(1, sizeof(*g));
    if (!g)
        return SEGD_ERR_NOMEM;
    g->cfg = cfg;
    g->store = store;
    g->stop = stop;
    g->backoff = backoff;
    segd_event_init(&g->ev);
    segd_err_t err = make_codec(g, errstr, n);
    if (err) {
        segd_ingest_destroy(g);
        return err;
    }
    *out = g;
    return SEGD_OK;
}

void segd_ingest_destroy(segd_ingest_t *g)
{
    if (!g)
        return;
    segd_avro_codec_destroy(g->codec);
    segd_registry_destroy(g->registry);
    segd_event_free(&g->ev);
    free(g);
}

static int classify_decode_error(segd_err_t err)
{
    if (err == SEGD_ERR_LIMIT)
        return SEGD_DLQ_LIMIT;
    return err == SEGD_ERR_SCHEMA ? SEGD_DLQ_UNKNOWN_SCHEMA : SEGD_DLQ_DECODE;
}

/* Decodes, retrying while the registry is unreachable (not bad input).
 * Returns 1 when the message was decoded, 0 when it is to be dead-lettered
 * with *reason set, -1 when a stop interrupted the wait. */
static int decode_message(segd_ingest_t *g, const void *value, size_t vlen, int *reason,
                          char *why, size_t n)
{
    int64_t wait = 100;
    for (;;) {
        segd_err_t err =
            segd_avro_decode(g->codec, g->cfg->framing, value, vlen, &g->ev, why, n);
        if (err == SEGD_OK)
            return 1;
        if (err != SEGD_ERR_HTTP) {
            *reason = classify_decode_error(err);
            return 0;
        }
        if (*g->stop)
            return -1;
        wait = segd_backoff_wait(g->backoff, wait, g->cfg->retry_max_ms, why);
    }
}

/* DESIGN §3: an event older than W + grace could need an entry a compaction
 * already dropped, and one from the future would win for ever. */
static int check_event_time(segd_ingest_t *g, const char *topic, int32_t partition,
                            int *reason, char *why, size_t n)
{
    segd_policy_t *pol = segd_store_policy(g->store);
    /* a partition restored from a unit also has that unit's floor (§7) */
    int64_t imported = topic ? segd_store_import_floor(g->store, topic, partition) : 0;
    switch (segd_policy_check_ts_floor(pol, g->ev.ts_ms, g->cfg->limits.max_clock_skew_ms,
                                       imported)) {
    case SEGD_TS_TOO_LATE: {
        /* A retirement marker only ever removes, so applying it late cannot
         * bring back what a compaction dropped; refused, it would leave the
         * retired entries live on the stores of a fleet whose floor is above
         * the marker's time while the others drop them. */
        if (segd_event_is_control(&g->ev))
            return 1;
        char floor[160];
        segd_policy_floor_explain(pol, imported, floor, sizeof(floor));
        snprintf(why, n, "too_late: ts_ms %" PRId64 " is below the ingest floor %s",
                 g->ev.ts_ms, floor);
        *reason = SEGD_DLQ_TOO_LATE;
        return 0;
    }
    case SEGD_TS_FROM_FUTURE:
        snprintf(why, n, "from_future: ts_ms %" PRId64 " is more than %" PRId64
                 " ms after now (limits.max.clock.skew.ms)", g->ev.ts_ms,
                 g->cfg->limits.max_clock_skew_ms);
        *reason = SEGD_DLQ_FROM_FUTURE;
        return 0;
    default:
        return 1;
    }
}

static int check_event(segd_ingest_t *g, const char *topic, int32_t partition,
                       const void *key, size_t klen, int *reason, char *why, size_t n)
{
    segd_err_t err = segd_event_validate(&g->ev, &g->cfg->limits, why, n);
    if (err) {
        *reason = err == SEGD_ERR_LIMIT ? SEGD_DLQ_LIMIT
                  : segd_utf8_valid(g->ev.user_id, g->ev.user_id_len) ? SEGD_DLQ_INVALID
                                                                      : SEGD_DLQ_BAD_UTF8;
        return 0;
    }
    if (key && (klen != g->ev.user_id_len || memcmp(key, g->ev.user_id, klen) != 0)) {
        snprintf(why, n, "key does not match user_id");
        *reason = SEGD_DLQ_KEY_MISMATCH;
        return 0;
    }
    return check_event_time(g, topic, partition, reason, why, n);
}

int segd_ingest_check(segd_ingest_t *g, const char *topic, int32_t partition, const void *key,
                      size_t klen, const void *value, size_t vlen, const segd_event_t **ev,
                      int *reason, char *why, size_t n)
{
    if (vlen > g->cfg->limits.max_message) {
        snprintf(why, n, "message of %zu bytes exceeds %zu", vlen, g->cfg->limits.max_message);
        *reason = SEGD_DLQ_OVERSIZE;
        return 0;
    }
    int ok = decode_message(g, value, vlen, reason, why, n);
    if (ok == 1)
        ok = check_event(g, topic, partition, key, klen, reason, why, n);
    if (ok == 1)
        *ev = &g->ev;
    return ok;
}

int64_t segd_ingest_last_ts(const segd_ingest_t *g)
{
    return g->ev.ts_ms;
}
