/* Configuration parsing and validation; see config.h. The key table is the
 * documented surface: each entry names its key, type and bounds. */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/kconf.h"

typedef enum { K_STR, K_INT, K_TOPICS, K_FRAMING, K_RESET, K_PARTITIONER, K_SNAPFMT,
               K_FALLBACK, K_LOGFMT, K_LOGLEVEL, K_STORELOG, K_WEIGHT } key_type_t;

typedef struct key_def {
    const char *key;
    key_type_t type;
    size_t offset;
    int64_t lo, hi;
} key_def_t;

#define OFF(f) offsetof(segd_config_t, f)
static const key_def_t keys[] = {
    {"brokers", K_STR, OFF(brokers), 0, 0},
    {"topics", K_TOPICS, 0, 0, 0},
    {"group", K_STR, OFF(group), 0, 0},
    {"group.instance.id", K_STR, OFF(group_instance_id), 0, 0},
    {"db", K_STR, OFF(db), 0, 0},
    {"dlq.topic", K_STR, OFF(dlq_topic), 0, 0},
    {"input.format", K_FRAMING, 0, 0, 0},
    {"input.schema.registry.url", K_STR, OFF(registry_url), 0, 0},
    {"input.schema.registry.auth", K_STR, OFF(registry_auth), 0, 0},
    {"input.schema.registry.ca", K_STR, OFF(registry_ca), 0, 0},
    {"input.offset.reset", K_RESET, 0, 0, 0},
    {"input.partitioner", K_PARTITIONER, 0, 0, 0},
    {"batch.max.messages", K_INT, OFF(batch_max_messages), 1, 1000000},
    {"batch.max.ms", K_INT, OFF(batch_max_ms), 1, 60000},
    {"ingest.writer.thread", K_INT, OFF(writer_thread), 0, 1},
    {"commit.interval.ms", K_INT, OFF(commit_interval_ms), 0, 600000},
    {"retry.max.ms", K_INT, OFF(retry_max_ms), 10, 600000},
    {"limits.max.segments", K_INT, OFF(limits.max_segments), 1, 1 << 20},
    {"limits.max.user.id", K_INT, OFF(limits.max_user_id), 1, SEGD_MAX_USER_ID},
    {"limits.max.message.bytes", K_INT, OFF(limits.max_message), 64, 64 << 20},
    {"limits.max.clock.skew.ms", K_INT, OFF(limits.max_clock_skew_ms), 0, 100LL * 365 * 86400000},
    {"store.granularity.s", K_INT, OFF(granularity_s), 1, 86400},
    {"store.horizon.s", K_INT, OFF(horizon_s), 0, 90 * 86400},
    {"store.gc.grace.s", K_INT, OFF(gc_grace_s), 0, 90 * 86400},
    {"store.block.cache.mb", K_INT, OFF(block_cache_mb), 8, 1 << 20},
    {"store.min.free.mb", K_INT, OFF(min_free_mb), 0, 1 << 30},
    {"compaction.rate.mb", K_INT, OFF(compaction_rate_mb), 0, 1 << 20},
    {"compaction.periodic.s", K_INT, OFF(periodic_compaction_s), 0, 365 * 86400},
    {"changes.enable", K_INT, OFF(changes_enable), 0, 1},
    {"changes.topic", K_STR, OFF(changes_topic), 0, 0},
    {"changes.format", K_STR, OFF(changes_format), 0, 0},
    {"changes.schema.registry.url", K_STR, OFF(changes_registry_url), 0, 0},
    {"changes.compression", K_STR, OFF(changes_compression), 0, 0},
    {"changes.max.outbox", K_INT, OFF(changes_max_outbox), 0, 100000000},
    {"snapshot.buckets", K_INT, OFF(snapshot_buckets), 1, 1 << 16},
    {"snapshot.interval", K_INT, OFF(snapshot_interval_s), 0, 30 * 86400},
    {"snapshot.upload.retries", K_INT, OFF(snapshot_upload_retries), 0, 100},
    {"snapshot.upload.backoff.ms", K_INT, OFF(snapshot_upload_backoff_ms), 1, 600000},
    {"snapshot.to", K_STR, OFF(snapshot_to), 0, 0},
    {"snapshot.format", K_SNAPFMT, 0, 0, 0},
    {"restore.from", K_STR, OFF(restore_from), 0, 0},
    {"restore.fallback", K_FALLBACK, 0, 0, 0},
    {"restore.retries", K_INT, OFF(restore_retries), 1, 1000},
    {"memory.limit.mb", K_INT, OFF(memory_limit_mb), SEGD_MEMORY_MIN_MB, SEGD_MEMORY_MAX_MB},
    {"sweep.after.s", K_INT, OFF(sweep_after_s), 0, 365LL * 86400},
    {"sweep.records.per.s", K_INT, OFF(sweep_records_per_s), 1, 1000000000},
    {"log.format", K_LOGFMT, 0, 0, 0},
    {"log.level", K_LOGLEVEL, 0, 0, 0},
    {"store.log.level", K_STORELOG, 0, 0, 0},
    {"metrics.listen", K_STR, OFF(metrics_listen), 0, 0},
    {"ready.max.lag", K_INT, OFF(ready_max_lag), 0, INT64_MAX / 2},
    {"identity.enable", K_INT, OFF(identity_enable), 0, 1},
    {"identity.links.topic", K_STR, OFF(identity_links_topic), 0, 0},
    {"identity.min.weight", K_WEIGHT, OFF(identity_min_weight), 0, 1},
    {"identity.max.component", K_INT, OFF(identity_max_component), 2, 1000000},
    {"identity.max.links", K_INT, OFF(identity_max_links), 1, 100000000},
};

/* store.log.level's names, indexed by RocksDB's InfoLogLevel */
static const char *const store_log_names[] = {"debug", "info", "warn", "error", "off"};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

/* Keys the memory budget sizes unless the operator sets them. */
static const struct { size_t offset; unsigned bit; } budgeted[] = {
    {OFF(block_cache_mb), 1u}, {OFF(batch_max_messages), 2u}};

static void note_explicit(segd_config_t *c, size_t offset)
{
    for (size_t i = 0; i < sizeof(budgeted) / sizeof(budgeted[0]); i++)
        if (budgeted[i].offset == offset)
            c->explicit_keys |= budgeted[i].bit;
}

static int is_explicit(const segd_config_t *c, size_t offset)
{
    for (size_t i = 0; i < sizeof(budgeted) / sizeof(budgeted[0]); i++)
        if (budgeted[i].offset == offset)
            return (c->explicit_keys & budgeted[i].bit) != 0;
    return 0;
}

/* Splits memory.limit.mb; the shares of keys set explicitly stay theirs. */
static void apply_budget(segd_config_t *c)
{
    int explicit_batch = is_explicit(c, OFF(batch_max_messages));
    segd_memory_split(c->memory_limit_mb, explicit_batch ? c->batch_max_messages : 0,
                      &c->memory);
    if (!is_explicit(c, OFF(block_cache_mb)))
        c->block_cache_mb = c->memory.block_cache_mb;
    if (!explicit_batch)
        c->batch_max_messages = c->memory.batch_max_messages;
}

void segd_config_init(segd_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->framing = SEGD_FRAMING_AUTO;
    c->offset_reset = strdup("earliest");
    c->batch_max_ms = 50;
    c->writer_thread = 0; /* bench/RESULTS.md, issue 31: no gain measured yet */
    c->commit_interval_ms = 1000;
    c->retry_max_ms = 5000;
    segd_limits_default(&c->limits);
    c->granularity_s = 0; /* the store's (3600 for a new store) */
    c->horizon_s = 7 * 86400; /* Kafka's default retention: see docs/design.md §3.1 */
    c->gc_grace_s = 2 * 86400;
    c->min_free_mb = 256;
    c->periodic_compaction_s = 86400;
    c->changes_enable = 1;
    c->changes_max_outbox = 100000;
    c->snapshot_buckets = 32;
    c->snapshot_upload_retries = 5;
    c->snapshot_upload_backoff_ms = 200;
    c->restore_fallback_replay = 1;
    c->restore_retries = 5;
    c->memory_limit_mb = SEGD_MEMORY_DEFAULT_MB;
    apply_budget(c); /* block cache and batch size; finish splits again */
    c->sweep_after_s = 3600;
    c->sweep_records_per_s = 20000;
    c->log_format = SEGD_LOG_LOGFMT;
    c->log_level = SEGD_LOG_INFO;
    c->store_log_level = 4; /* off: see store.c (a full disk would abort RocksDB 7.8) */
    c->metrics_listen = strdup("127.0.0.1:9464");
    c->ready_max_lag = 1000;
    c->identity_links_topic = strdup("segments.links");
    c->identity_min_weight = 0.5;
    c->identity_max_component = 1000;
    c->identity_max_links = 10000;
}

void segd_config_free(segd_config_t *c)
{
    free(c->brokers);
    free(c->group);
    free(c->group_instance_id);
    free(c->db);
    free(c->dlq_topic);
    free(c->registry_url);
    free(c->registry_auth);
    free(c->registry_ca);
    free(c->offset_reset);
    free(c->changes_topic);
    free(c->changes_format);
    free(c->changes_registry_url);
    free(c->changes_compression);
    free(c->snapshot_to);
    free(c->restore_from);
    free(c->metrics_listen);
    free(c->identity_links_topic);
    for (size_t i = 0; i < c->n_topics; i++)
        free(c->topics[i]);
    for (size_t i = 0; i < c->n_kafka; i++) {
        free(c->kafka[i].key);
        free(c->kafka[i].value);
    }
    memset(c, 0, sizeof(*c));
}

static segd_err_t set_topics(segd_config_t *c, const char *v, char *errstr, size_t n)
{
    for (size_t i = 0; i < c->n_topics; i++)
        free(c->topics[i]);
    c->n_topics = 0;
    const char *p = v;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len > 249 || c->n_topics == SEGD_MAX_TOPICS)
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "topics: bad topic list '%s'", v);
        c->topics[c->n_topics++] = strndup(p, len);
        p += len + (p[len] == ',');
    }
    return c->n_topics ? SEGD_OK
                       : segd_errf(SEGD_ERR_CONFIG, errstr, n, "topics: empty topic list");
}

static segd_err_t set_int(const key_def_t *k, void *field, const char *v, char *errstr,
                          size_t n)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < k->lo || x > k->hi)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "%s: '%s' is not an integer in [%lld, %lld]", k->key, v,
                         (long long)k->lo, (long long)k->hi);
    if (k->offset == OFF(limits.max_segments) || k->offset == OFF(limits.max_user_id) ||
        k->offset == OFF(limits.max_message))
        *(size_t *)field = (size_t)x;
    else
        *(int64_t *)field = x;
    return SEGD_OK;
}

static segd_err_t set_weight(const key_def_t *k, double *field, const char *v, char *errstr,
                             size_t n)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !(x >= (double)k->lo && x <= (double)k->hi))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: '%s' is not a number in [%lld, %lld]",
                         k->key, v, (long long)k->lo, (long long)k->hi);
    *field = x;
    return SEGD_OK;
}

static segd_err_t set_framing(segd_config_t *c, const char *v, char *errstr, size_t n)
{
    static const struct { const char *name; segd_framing_t f; } names[] = {
        {"confluent", SEGD_FRAMING_CONFLUENT}, {"single-object", SEGD_FRAMING_SINGLE_OBJECT},
        {"raw", SEGD_FRAMING_RAW}, {"auto", SEGD_FRAMING_AUTO}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(v, names[i].name)) {
            c->framing = names[i].f;
            return SEGD_OK;
        }
    return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                     "input.format: '%s' is not confluent, single-object, raw or auto", v);
}

segd_err_t segd_config_set_kafka(segd_config_t *c, const char *key, const char *value,
                                 char *errstr, size_t n)
{
    for (size_t i = 0; i < c->n_kafka; i++)
        if (!strcmp(c->kafka[i].key, key)) {
            free(c->kafka[i].value);
            c->kafka[i].value = strdup(value);
            return SEGD_OK;
        }
    if (c->n_kafka == SEGD_MAX_KAFKA_PROPS)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "too many kafka.* settings");
    c->kafka[c->n_kafka].key = strdup(key);
    c->kafka[c->n_kafka++].value = strdup(value);
    return SEGD_OK;
}

/* A string key's value. An empty name (dlq.topic = "") is refused here
 * because it would otherwise fail only when first used; an empty
 * metrics.listen turns the server off as "off" does, and an empty
 * group.instance.id turns static membership off (DESIGN §4), so those two
 * may be empty. */
static segd_err_t set_str(segd_config_t *c, const key_def_t *k, const char *key,
                          const char *value, char *errstr, size_t n)
{
    if (!*value && k->offset != OFF(metrics_listen) && k->offset != OFF(group_instance_id))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s: empty value", key);
    char **f = (char **)((char *)c + k->offset);
    free(*f);
    *f = strdup(value);
    return *f ? SEGD_OK : SEGD_ERR_NOMEM;
}

static segd_err_t set_store_log(segd_config_t *c, const char *value, char *errstr, size_t n)
{
    for (int64_t lv = 0; lv < 5; lv++)
        if (!strcmp(value, store_log_names[lv])) {
            c->store_log_level = lv;
            return SEGD_OK;
        }
    return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                     "store.log.level: '%s' is not off, error, warn, info or debug", value);
}

/* Parses value as key k's type into c; key is k's name, for messages. */
static segd_err_t set_key(segd_config_t *c, const key_def_t *k, const char *key,
                          const char *value, char *errstr, size_t n)
{
    switch (k->type) {
    case K_STR: return set_str(c, k, key, value, errstr, n);
    case K_INT: {
        segd_err_t err = set_int(k, (char *)c + k->offset, value, errstr, n);
        if (!err)
            note_explicit(c, k->offset);
        return err;
    }
    case K_WEIGHT: return set_weight(k, (double *)((char *)c + k->offset), value, errstr, n);
    case K_TOPICS: return set_topics(c, value, errstr, n);
    case K_FRAMING: return set_framing(c, value, errstr, n);
    case K_RESET:
        if (strcmp(value, "earliest") && strcmp(value, "latest"))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "input.offset.reset: '%s' is not earliest or latest", value);
        free(c->offset_reset);
        c->offset_reset = strdup(value);
        return SEGD_OK;
    case K_PARTITIONER:
        if (segd_partitioner_parse(value, &c->partitioner))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "input.partitioner: '%s' is not murmur2_random, "
                             "consistent_random or fnv1a_random",
                             value);
        return SEGD_OK;
    case K_SNAPFMT:
        if (!strcmp(value, "avro"))
            c->snapshot_native = 0;
        else if (!strcmp(value, "native"))
            c->snapshot_native = 1;
        else
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "snapshot.format: '%s' is not avro or native", value);
        return SEGD_OK;
    case K_FALLBACK:
        if (strcmp(value, "replay") && strcmp(value, "wait"))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "restore.fallback: '%s' is not replay or wait", value);
        c->restore_fallback_replay = !strcmp(value, "replay");
        return SEGD_OK;
    case K_LOGFMT:
        if (segd_log_format_parse(value, &c->log_format))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "log.format: '%s' is not logfmt or json", value);
        return SEGD_OK;
    case K_LOGLEVEL:
        if (segd_log_level_parse(value, &c->log_level))
            return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                             "log.level: '%s' is not debug, info, warn or error", value);
        return SEGD_OK;
    case K_STORELOG: return set_store_log(c, value, errstr, n);
    }
    return segd_errf(SEGD_ERR_CONFIG, errstr, n, "unknown configuration key '%s'", key);
}

segd_err_t segd_config_set(segd_config_t *c, const char *key, const char *value,
                           char *errstr, size_t n)
{
    if (!strncmp(key, "kafka.", 6) && key[6])
        return segd_config_set_kafka(c, key + 6, value, errstr, n);
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].key, key))
            return set_key(c, &keys[i], key, value, errstr, n);
    return segd_errf(SEGD_ERR_CONFIG, errstr, n, "unknown configuration key '%s'", key);
}

static void env_name(const char *key, char *out, size_t cap);

segd_err_t segd_config_set_x(segd_config_t *c, const char *kv, char *errstr, size_t n)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "-X %s: want key=value", kv);
    char key[256];
    snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
    /* librdkafka would say only "No such configuration property" */
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].key, key)) {
            char env[300];
            env_name(key, env, sizeof(env));
            return segd_errf(SEGD_ERR_CONFIG, errstr, n, "-X %s: '%s' is a segd key, not a "
                             "Kafka property (-X sets librdkafka properties); set it in the "
                             "--config file (%s = ...) or as %s=...", kv, key, key, env);
        }
    return segd_config_set_kafka(c, key, eq + 1, errstr, n);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

segd_err_t segd_config_load_file(segd_config_t *c, const char *path, char *errstr,
                                 size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "cannot read config file %s", path);
    char line[4096], msg[512];
    int lineno = 0;
    segd_err_t err = SEGD_OK;
    /* a key set twice in one file is a mistake (which one did they mean?) */
    char *seen[256];
    int seen_line[256];
    size_t nseen = 0;
    while (!err && fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            err = segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s:%d: expected key = value", path,
                            lineno);
            break;
        }
        *eq = 0;
        const char *key = trim(s);
        for (size_t i = 0; i < nseen && !err; i++)
            if (!strcmp(seen[i], key))
                err = segd_errf(SEGD_ERR_CONFIG, errstr, n,
                                "%s:%d: '%s' is already set on line %d", path, lineno, key,
                                seen_line[i]);
        if (!err && nseen < sizeof(seen) / sizeof(seen[0])) {
            seen_line[nseen] = lineno;
            if (!(seen[nseen++] = strdup(key)))
                err = SEGD_ERR_NOMEM;
        }
        if (!err && (err = segd_config_set(c, key, trim(eq + 1), msg, sizeof(msg))))
            segd_errf(err, errstr, n, "%s:%d: %s", path, lineno, msg);
    }
    for (size_t i = 0; i < nseen; i++)
        free(seen[i]);
    fclose(f);
    return err;
}

/* SEGD_<KEY>: the key upper-cased with '.' and '-' as '_'. */
static void env_name(const char *key, char *out, size_t cap)
{
    size_t i = snprintf(out, cap, "SEGD_");
    for (; *key && i + 1 < cap; key++)
        out[i++] = (*key == '.' || *key == '-') ? '_' : (char)toupper((unsigned char)*key);
    out[i] = 0;
}

/* SEGD_* variables that are not configuration keys: read where they are
 * used (transport/dest.c), so a command that loads the environment must not
 * refuse them as unknown. */
static int env_not_a_key(const char *var, size_t len)
{
    static const char *const names[] = {"SEGD_S3_ENDPOINT"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == len && !strncmp(names[i], var, len))
            return 1;
    return 0;
}

segd_err_t segd_config_load_env(segd_config_t *c, char *const *envp, char *errstr,
                                size_t n)
{
    char name[128], msg[512];
    for (char *const *e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || strncmp(*e, "SEGD_", 5) != 0 || env_not_a_key(*e, (size_t)(eq - *e)))
            continue;
        size_t nlen = (size_t)(eq - *e);
        segd_err_t err = SEGD_ERR_CONFIG;
        if (nlen > 11 && !strncmp(*e, "SEGD_KAFKA_", 11)) {
            char key[128];
            size_t k = 0;
            for (const char *p = *e + 11; p < eq && k + 1 < sizeof(key); p++)
                key[k++] = *p == '_' ? '.' : (char)tolower((unsigned char)*p);
            key[k] = 0;
            err = segd_config_set_kafka(c, key, eq + 1, msg, sizeof(msg));
        } else {
            for (size_t i = 0; i < N_KEYS; i++) {
                env_name(keys[i].key, name, sizeof(name));
                if (strlen(name) == nlen && !strncmp(name, *e, nlen)) {
                    err = segd_config_set(c, keys[i].key, eq + 1, msg, sizeof(msg));
                    break;
                }
                snprintf(msg, sizeof(msg), "unknown variable %.*s", (int)nlen, *e);
            }
        }
        if (err)
            return segd_errf(err, errstr, n, "environment: %s", msg);
    }
    return SEGD_OK;
}

static segd_err_t default_str(char **f, const char *v)
{
    if (*f)
        return SEGD_OK;
    *f = strdup(v);
    return *f ? SEGD_OK : SEGD_ERR_NOMEM;
}

/* The change stream and snapshot settings. */
static segd_err_t finish_outputs(segd_config_t *c, char *errstr, size_t n)
{
    if (default_str(&c->changes_topic, "segments.changes") ||
        default_str(&c->changes_format, "single-object") ||
        default_str(&c->changes_compression, "lz4") ||
        (c->registry_url && default_str(&c->changes_registry_url, c->registry_url)))
        return SEGD_ERR_NOMEM;
    if (!*c->changes_topic)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "changes.topic: empty");
    if (strcmp(c->changes_format, "single-object") && strcmp(c->changes_format, "confluent"))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.format: '%s' is not single-object or confluent",
                         c->changes_format);
    if (!strcmp(c->changes_format, "confluent") && !c->changes_registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.format = confluent needs changes.schema.registry.url");
    if (strcmp(c->changes_compression, "lz4") && strcmp(c->changes_compression, "zstd"))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.compression: '%s' is not lz4 or zstd", c->changes_compression);
    if (c->snapshot_buckets & (c->snapshot_buckets - 1))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "snapshot.buckets: %lld is not a power of two",
                         (long long)c->snapshot_buckets);
    if (c->snapshot_interval_s > 0 && !c->snapshot_to)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "snapshot.interval needs snapshot.to");
    return SEGD_OK;
}

static int connection_prop(const char *key)
{
    return !strncmp(key, "security.", 9) || !strncmp(key, "sasl.", 5) ||
           !strncmp(key, "ssl.", 4) || !strcmp(key, "client.id");
}

void segd_config_connection_props(const segd_config_t *c, const char **props)
{
    size_t np = 0;
    for (size_t i = 0; i < c->n_kafka; i++)
        if (connection_prop(c->kafka[i].key)) {
            props[np++] = c->kafka[i].key;
            props[np++] = c->kafka[i].value;
        }
    props[np] = NULL;
}

segd_err_t segd_config_apply_connection(const segd_config_t *c, rd_kafka_conf_t *conf,
                                        const char *who, char *errstr, size_t n)
{
    const char *props[2 * SEGD_MAX_KAFKA_PROPS + 1];
    segd_config_connection_props(c, props);
    return segd_kconf_apply(conf, who, props, errstr, n);
}

segd_err_t segd_config_default_dlq(segd_config_t *c)
{
    if (c->dlq_topic || !c->n_topics)
        return SEGD_OK;
    size_t len = strlen(c->topics[0]) + 5;
    c->dlq_topic = malloc(len);
    if (!c->dlq_topic)
        return SEGD_ERR_NOMEM;
    snprintf(c->dlq_topic, len, "%s.dlq", c->topics[0]);
    return SEGD_OK;
}

segd_err_t segd_config_finish(segd_config_t *c, char *errstr, size_t n)
{
    const char *missing = !c->brokers ? "brokers (--brokers)"
                          : !c->n_topics ? "topics (--topic)"
                          : !c->group ? "group (--group)"
                          : !c->db ? "db (--db)"
                                   : NULL;
    if (missing)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "missing required setting %s", missing);
    if (c->framing == SEGD_FRAMING_CONFLUENT && !c->registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "input.format = confluent needs input.schema.registry.url");
    segd_err_t err = finish_outputs(c, errstr, n);
    if (err)
        return err;
    apply_budget(c);
    return segd_config_default_dlq(c);
}

/* ---- the key table read back: documentation, --print-config ---- */

static const char *type_name(key_type_t t)
{
    switch (t) {
    case K_INT: return "integer";
    case K_TOPICS: return "topic list";
    case K_STR: return "string";
    case K_WEIGHT: return "number";
    default: return "enum";
    }
}

static const char *enum_values(key_type_t t)
{
    switch (t) {
    case K_FRAMING: return "auto|confluent|single-object|raw";
    case K_RESET: return "earliest|latest";
    case K_PARTITIONER: return "murmur2_random|consistent_random|fnv1a_random";
    case K_SNAPFMT: return "avro|native";
    case K_FALLBACK: return "replay|wait";
    case K_LOGFMT: return "logfmt|json";
    case K_LOGLEVEL: return "debug|info|warn|error";
    case K_STORELOG: return "off|error|warn|info|debug";
    default: return NULL;
    }
}

size_t segd_config_key_count(void) { return N_KEYS; }

void segd_config_key_at(size_t i, segd_config_key_info_t *out)
{
    const key_def_t *k = &keys[i];
    out->key = k->key;
    out->type = type_name(k->type);
    out->values = enum_values(k->type);
    out->lo = k->lo;
    out->hi = k->hi;
}

static const char *framing_name(segd_framing_t f)
{
    switch (f) {
    case SEGD_FRAMING_CONFLUENT: return "confluent";
    case SEGD_FRAMING_SINGLE_OBJECT: return "single-object";
    case SEGD_FRAMING_RAW: return "raw";
    default: return "auto";
    }
}

static void topics_value(const segd_config_t *c, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (size_t i = 0; i < c->n_topics && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", c->topics[i]);
}

static int64_t int_value(const segd_config_t *c, const key_def_t *k)
{
    if (k->offset == OFF(limits.max_segments) || k->offset == OFF(limits.max_user_id) ||
        k->offset == OFF(limits.max_message))
        return (int64_t)*(const size_t *)((const char *)c + k->offset);
    return *(const int64_t *)((const char *)c + k->offset);
}

segd_err_t segd_config_value(const segd_config_t *c, const char *key, char *out, size_t cap)
{
    const key_def_t *k = NULL;
    for (size_t i = 0; i < N_KEYS && !k; i++)
        if (!strcmp(keys[i].key, key))
            k = &keys[i];
    if (!k)
        return SEGD_ERR_NOTFOUND;
    const char *s = NULL;
    switch (k->type) {
    case K_STR: s = *(char *const *)((const char *)c + k->offset); break;
    case K_INT: { /* out of bounds = unset (store.granularity.s 0: the store's) */
        int64_t x = int_value(c, k);
        if (x < k->lo || x > k->hi)
            out[0] = 0;
        else
            snprintf(out, cap, "%lld", (long long)x);
        return SEGD_OK;
    }
    case K_TOPICS: topics_value(c, out, cap); return SEGD_OK;
    case K_WEIGHT: snprintf(out, cap, "%g", *(const double *)((const char *)c + k->offset));
        return SEGD_OK;
    case K_FRAMING: s = framing_name(c->framing); break;
    case K_RESET: s = c->offset_reset; break;
    case K_PARTITIONER: s = segd_partitioner_name(c->partitioner); break;
    case K_SNAPFMT: s = c->snapshot_native ? "native" : "avro"; break;
    case K_FALLBACK: s = c->restore_fallback_replay ? "replay" : "wait"; break;
    case K_LOGFMT: s = segd_log_format_name(c->log_format); break;
    case K_LOGLEVEL: s = segd_log_level_name(c->log_level); break;
    case K_STORELOG: s = store_log_names[c->store_log_level]; break;
    }
    snprintf(out, cap, "%s", s ? s : "");
    return SEGD_OK;
}

int segd_config_is_secret(const char *key)
{
    static const char *const words[] = {"password", "secret", "auth", "key.pem", "jaas",
                                        "token", "credential", "private", "oauthbearer.config"};
    char low[256];
    size_t i = 0;
    for (; key[i] && i + 1 < sizeof(low); i++)
        low[i] = (char)tolower((unsigned char)key[i]);
    low[i] = 0;
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
        if (strstr(low, words[w]))
            return 1;
    return 0;
}

void segd_config_mask_url(const char *v, char *out, size_t cap)
{
    const char *scheme = strstr(v, "://");
    const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *slash = scheme ? strchr(scheme + 3, '/') : NULL;
    const char *colon = scheme ? memchr(scheme + 3, ':', at ? (size_t)(at - scheme - 3) : 0)
                               : NULL;
    if (!at || !colon || (slash && slash < at)) {
        snprintf(out, cap, "%s", v);
        return;
    }
    snprintf(out, cap, "%.*s***%s", (int)(colon + 1 - v), v, at);
}

static void print_line(FILE *f, const char *key, const char *prefix, const char *v)
{
    char masked[1024];
    char full[300];
    snprintf(full, sizeof(full), "%s%s", prefix, key);
    if (!*v)
        fprintf(f, "# %s = (unset)\n", full);
    else if (segd_config_is_secret(full))
        fprintf(f, "%s = ***\n", full);
    else {
        segd_config_mask_url(v, masked, sizeof(masked));
        fprintf(f, "%s = %s\n", full, masked);
    }
}

void segd_config_print(const segd_config_t *c, FILE *f)
{
    char v[4096];
    for (size_t i = 0; i < N_KEYS; i++) {
        segd_config_value(c, keys[i].key, v, sizeof(v));
        print_line(f, keys[i].key, "", v);
    }
    for (size_t i = 0; i < c->n_kafka; i++)
        print_line(f, c->kafka[i].key, "kafka.", c->kafka[i].value);
}
