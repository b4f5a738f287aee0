/* segd run's configuration: `key = value` files (# comments), SEGD_* environment
 * overrides and command-line flags, in that order of precedence (lowest
 * first). kafka.* keys pass straight to librdkafka, as kcat's -X does.
 * Unknown keys and bad values fail at start with a message naming the key. */
#ifndef SEGD_CONFIG_H
#define SEGD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <librdkafka/rdkafka.h>

#include "base/log.h"
#include "wire/avro_codec.h"
#include "core/event.h"
#include "core/partition.h"
#include "config/memory.h"

#define SEGD_MAX_TOPICS 16
#define SEGD_MAX_KAFKA_PROPS 64

typedef struct segd_kv {
    char *key;   /* without the "kafka." prefix */
    char *value;
} segd_kv_t;

typedef struct segd_config {
    char *brokers;
    char *topics[SEGD_MAX_TOPICS];
    size_t n_topics;
    char *group;
    char *group_instance_id;  /* default: the store's (meta "instance_id"); "" = off */
    char *db;
    char *dlq_topic;          /* default "<first input topic>.dlq" */
    char *registry_url;       /* input.schema.registry.url */
    char *registry_auth;      /* user:password */
    char *registry_ca;        /* CA file for https */
    segd_framing_t framing;   /* input.format */
    char *offset_reset;       /* earliest | latest */
    segd_partitioner_t partitioner; /* input.partitioner: how producers key users
                                     * to partitions (default murmur2_random) */
    int64_t batch_max_messages;
    int64_t batch_max_ms;
    int64_t writer_thread;      /* ingest.writer.thread: batches written on a thread
                                 * of their own while the next is built */
    int64_t commit_interval_ms; /* group commits of written offsets, at most this often */
    int64_t retry_max_ms;     /* cap of the backoff on store/broker/registry faults */
    segd_limits_t limits;
    int64_t granularity_s;
    int64_t horizon_s;
    int64_t gc_grace_s;       /* store.gc.grace.s: bound on unmerged operands */
    int64_t block_cache_mb;
    int64_t min_free_mb;         /* store writes wait below this much free disk */
    int64_t compaction_rate_mb;
    int64_t periodic_compaction_s;
    int64_t changes_enable;      /* publish the change stream (DESIGN §5) */
    char *changes_topic;         /* default "segments.changes" */
    char *changes_format;        /* single-object (default) | confluent */
    char *changes_registry_url;  /* default: input.schema.registry.url */
    char *changes_compression;   /* lz4 (default) | zstd */
    int64_t changes_max_outbox;  /* ingest waits while more entries are unpublished */
    int64_t snapshot_buckets;    /* power of two, default 32 */
    int64_t snapshot_interval_s; /* periodic export from run; 0 = off */
    int64_t snapshot_upload_retries;    /* per http(s)/s3 request, default 5 */
    int64_t snapshot_upload_backoff_ms; /* first retry's wait, doubling; default 200 */
    char *snapshot_to;           /* directory, http(s):// or s3:// */
    int64_t snapshot_native;     /* snapshot.format: 0 = avro (default), 1 = native */
    char *restore_from;          /* restore a partition assigned without an offset
                                  * from DEST/<topic>/p-PPPPP (DESIGN §7); NULL = off */
    int64_t restore_fallback_replay; /* restore.fallback: replay (1, default) | wait */
    int64_t restore_retries;     /* failed attempts before the fallback; default 5 */
    int64_t memory_limit_mb;     /* memory.limit.mb: the one budget (config/memory.h) */
    unsigned explicit_keys;      /* budgeted keys the operator set (config.c) */
    segd_memory_split_t memory;  /* the budget's split, as init/finish left it */
    int64_t sweep_after_s;       /* a revoked partition's users are deleted after it
                                  * stayed away this long; 0 = never (consumer/sweep.h) */
    int64_t sweep_records_per_s; /* records the sweep examines a second */
    segd_log_format_t log_format; /* log.format: logfmt (default) | json */
    segd_log_level_t log_level;   /* log.level: debug | info (default) | warn | error */
    int64_t store_log_level;      /* store.log.level as RocksDB's InfoLogLevel
                                   * (0 debug .. 3 error, 4 = off, the default) */
    char *metrics_listen;        /* /metrics, /healthz, /readyz of segd run: HOST:PORT,
                                  * default 127.0.0.1:9464; "" or "off" = none */
    int64_t ready_max_lag;       /* /readyz: messages behind the high watermark a
                                  * partition may be and count as caught up; 1000 */
    segd_kv_t kafka[SEGD_MAX_KAFKA_PROPS];
    size_t n_kafka;
    /* Not a key: the logger of the program that owns this config (segd run
     * makes it from log.*), borrowed by every component given the config;
     * NULL = info and up, logfmt, on stderr. */
    segd_log_t *log;
    int64_t identity_enable;        /* consume the links topic (DESIGN §10); default 0 */
    char *identity_links_topic;     /* default "segments.links" */
    double identity_min_weight;     /* a LINK at or above joins; default 0.5 */
    int64_t identity_max_component; /* super-node guard: ids per component; default 1000 */
    int64_t identity_max_links;     /* edges per id; default 10000 */
} segd_config_t;

/* One row of the key table, for documentation and --print-config. */
typedef struct segd_config_key_info {
    const char *key;
    const char *type;   /* "string", "integer", "topic list" or "enum" */
    const char *values; /* an enum's values, "a|b|c"; NULL otherwise */
    int64_t lo, hi;     /* an integer's bounds (inclusive) */
} segd_config_key_info_t;

/* The keys segd_config_set knows (kafka.* aside), in the table's order. */
size_t segd_config_key_count(void);
void segd_config_key_at(size_t i, segd_config_key_info_t *out);

/* A key's value as a config file would spell it, in out; "" when unset.
 * SEGD_ERR_NOTFOUND for an unknown key. */
segd_err_t segd_config_value(const segd_config_t *c, const char *key, char *out,
                             size_t out_size);

/* Whether a key's value is a secret (registry credentials, SASL and TLS
 * passwords, private keys, tokens): --print-config masks it. kafka.* keys
 * are judged by their librdkafka name. */
int segd_config_is_secret(const char *key);

/* v with the password of a URL's user:password@ as *** (scheme://user:***@host...),
 * for anything printed or logged; other values are copied. */
void segd_config_mask_url(const char *v, char *out, size_t out_size);

/* Writes every key as `key = value` lines, defaults filled in, then the
 * kafka.* pass-through; unset keys as comments, secrets and the password
 * of URLs' user:password@ as ***. The output is a valid config file except
 * for masked values. */
void segd_config_print(const segd_config_t *c, FILE *f);

void segd_config_init(segd_config_t *c);
void segd_config_free(segd_config_t *c);

/* Sets one key (as in the file; "kafka.X" or bare librdkafka names via -X go
 * through segd_config_set_kafka). SEGD_ERR_CONFIG names the key on error. */
segd_err_t segd_config_set(segd_config_t *c, const char *key, const char *value,
                           char *errstr, size_t errstr_size);
segd_err_t segd_config_set_kafka(segd_config_t *c, const char *key, const char *value,
                                 char *errstr, size_t errstr_size);
/* Parses a -X argument "key=value" (librdkafka property). */
segd_err_t segd_config_set_x(segd_config_t *c, const char *kv, char *errstr,
                             size_t errstr_size);

segd_err_t segd_config_load_file(segd_config_t *c, const char *path, char *errstr,
                                 size_t errstr_size);
/* Applies SEGD_<KEY> variables (dots and dashes as underscores, upper case);
 * SEGD_KAFKA_<NAME> sets kafka.<name> with underscores as dots. */
segd_err_t segd_config_load_env(segd_config_t *c, char *const *envp, char *errstr,
                                size_t errstr_size);
/* Sets dlq.topic to the first topic + ".dlq" unless it is set or no topic
 * is (finish calls it; segd replay calls it before --topic replaces the
 * topics, so its dead letters go where segd run's do). */
segd_err_t segd_config_default_dlq(segd_config_t *c);

/* The kafka.* settings that concern the connection, not the consumer
 * (security.*, sasl.*, ssl.*, client.id): every producer segd makes beside
 * the ingest consumer (changes, dead letters) needs them on a secured
 * cluster, and consumer-only settings would make a producer warn. Fills
 * props (room for 2 * SEGD_MAX_KAFKA_PROPS + 1) with key, value, ..., NULL;
 * the strings are cfg's, borrowed for as long as cfg is unchanged. */
void segd_config_connection_props(const segd_config_t *c, const char **props);
/* Applies those connection settings of c to conf, after the client's own
 * defaults, so that every Kafka client segd opens (producers, consumers,
 * admin-only clients) reaches a secured cluster the same way. who names the
 * client in a refused setting's error; nothing is logged, as sasl.password
 * and ssl.key.password are among the values. */
segd_err_t segd_config_apply_connection(const segd_config_t *c, rd_kafka_conf_t *conf,
                                        const char *who, char *errstr, size_t errstr_size);
/* Final checks (required keys, derived defaults). */
segd_err_t segd_config_finish(segd_config_t *c, char *errstr, size_t errstr_size);

#endif
