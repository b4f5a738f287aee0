/* librdkafka configuration from key/value lists, shared by every Kafka client
 * segd makes (ingest consumer, dead-letter producer, change publisher, cache
 * tail): a refused setting is SEGD_ERR_CONFIG naming the client and key. */
#ifndef SEGD_KCONF_H
#define SEGD_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "base/err.h"
#include "base/log.h"

segd_err_t segd_kconf_set(rd_kafka_conf_t *c, const char *who, const char *key,
                          const char *value, char *errstr, size_t errstr_size);
/* kv is a NULL-terminated list of key, value pairs; a NULL kv applies
 * nothing. */
segd_err_t segd_kconf_apply(rd_kafka_conf_t *c, const char *who, const char *const *kv,
                            char *errstr, size_t errstr_size);

/* librdkafka's log_cb body: one line of component "kafka" with the
 * client's name and the facility as fields, the syslog level mapped
 * (0-3 error, 4 warn, 5-6 info, 7 debug). For clients whose opaque is
 * something else, their own log_cb finds log there and calls this. */
void segd_kconf_log(const segd_log_t *log, const rd_kafka_t *rk, int level, const char *fac,
                    const char *buf);
/* Routes the client's logs to log through the opaque pointer, so it is only
 * for clients that use no other opaque. log is borrowed and must outlive
 * the client. */
void segd_kconf_set_logger(rd_kafka_conf_t *c, const segd_log_t *log);

/* A log route that its owner can cut, for clients that may outlive the owner
 * or its logger: librdkafka logs from its own threads at any moment, and a
 * handle segd leaves to process exit (librdkafka 2.0.2 cannot destroy it
 * after a fatal error or before the first assignment) or destroys on a thread
 * of its own keeps logging after the owner is gone. The route is the client's
 * opaque and carries the owner for the client's other callbacks, which
 * librdkafka serves only on the thread that polls. */
typedef struct segd_klog segd_klog_t;
/* NULL when out of memory. log is borrowed until segd_klog_cut. */
segd_klog_t *segd_klog_new(const segd_log_t *log, void *owner);
/* Makes k the client's log_cb route and opaque. */
void segd_klog_attach(segd_klog_t *k, rd_kafka_conf_t *c);
/* The owner given to segd_klog_new, from a callback's opaque. */
void *segd_klog_owner(void *opaque);
/* After it returns, no line reaches the logger and none is being written:
 * a line in progress on another thread is waited for. */
void segd_klog_cut(segd_klog_t *k);
/* Only once the client is destroyed; a leaked client keeps its route. */
void segd_klog_free(segd_klog_t *k);

/* Destroys rk (rd_kafka_destroy_flags with flags) on a thread of its own,
 * waiting up to wait_ms: librdkafka 2.0.2 can take minutes to destroy a
 * consumer (a fenced one, or one whose fetches were just answered
 * OFFSET_OUT_OF_RANGE: upstream #4514, #4724), and neither a bidder shutting
 * down nor a pipeline rebuilding its consumer may hang on it. done(ctx) (may
 * be NULL) runs exactly once, after the destroy returned: on the caller's
 * thread before this returns 1, or, once the wait ran out, on the destroy's
 * thread, and this returns 0 at once after cutting klog (may be NULL), so
 * that no line of the client reaches a logger its owner may free. Without
 * memory or a thread the destroy runs here. */
int segd_kdestroy_bounded(rd_kafka_t *rk, int flags, segd_klog_t *klog, int64_t wait_ms,
                          void (*done)(void *ctx), void *ctx);

#endif
