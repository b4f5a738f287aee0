/* The daemon's wiring (`segd run`, the demo, the ingest benchmark): one
 * object owns the ingest pipeline (consumer/) and the change publisher
 * (publisher/) over one store and connects them, so neither includes the
 * other: a written batch kicks the publisher, and the publisher's outbox
 * depth drives the pipeline's back-pressure.
 *
 * Threads: the pipeline is stepped on the caller's thread; the publisher
 * runs its own thread. new/close/destroy from the owning thread only. */
#ifndef SEGD_DAEMON_H
#define SEGD_DAEMON_H

#include <signal.h>

#include "config/config.h"
#include "consumer/pipeline.h"
#include "publisher/publisher.h"
#include "store/store.h"

typedef struct segd_daemon segd_daemon_t;

/* cfg, store and stop are borrowed and must outlive the daemon. With
 * changes.enable = 1, refuses (SEGD_ERR_CONFIG) a change topic with fewer
 * partitions than an input topic, then starts the publisher thread before
 * the consumer joins its group, so what an earlier run left in the outbox
 * goes out meanwhile. */
segd_err_t segd_daemon_new(segd_daemon_t **out, const segd_config_t *cfg, segd_store_t *store,
                           volatile sig_atomic_t *stop, char *errstr, size_t errstr_size);

/* Borrowed; valid until destroy. The publisher is NULL without changes. */
segd_pipeline_t *segd_daemon_pipeline(segd_daemon_t *d);
segd_publisher_t *segd_daemon_publisher(segd_daemon_t *d);

/* Writes the pending batch and leaves the group, then gives the publisher up
 * to 5 s to drain (what is left is published at the next start). Idempotent. */
void segd_daemon_close(segd_daemon_t *d);
void segd_daemon_destroy(segd_daemon_t *d);

/* The publisher options that cfg describes (borrowing cfg's strings and
 * props, an array of 2 * SEGD_MAX_KAFKA_PROPS + 1 filled here). */
void segd_daemon_publisher_opts(const segd_config_t *cfg, segd_publisher_opts_t *o,
                                const char **props);

#endif
