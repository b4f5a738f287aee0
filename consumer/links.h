/* The links topic into the identity graph (DESIGN §10.1, §10.3): its own
 * librdkafka consumer outside the group, assigned every partition of
 * identity.links.topic from the offsets stored in the store (the beginning
 * when none: each store holds the whole graph); each step decodes and
 * checks a batch of link events, applies them with store/identity.h,
 * dead-letters refusals and bad messages, and writes the graph, the
 * offsets, the supernode counter and one outbox entry of the batch's
 * membership changes (the change stream's MemberEvents) in one WriteBatch. Runs in the
 * pipeline's thread (segd_pipeline_step calls it), so the store keeps one
 * outbox appender. cfg, store, stop and the backoff are borrowed. */
#ifndef SEGD_LINKS_H
#define SEGD_LINKS_H

#include <signal.h>
#include <stdint.h>

#include "consumer/backoff.h"
#include "config/config.h"
#include "store/identity.h"
#include "store/store.h"

typedef struct segd_links segd_links_t;

typedef struct segd_links_stats {
    uint64_t messages, applied, dlq, supernode, batches;
    uint64_t member_changes; /* membership changes put in the outbox */
} segd_links_stats_t;

/* What sets a links consumer other than segd run's apart; zeroed: segd run's. */
typedef struct segd_links_opts {
    const char *dlq_file; /* dead letters appended to this file (consumer/dlq.h), not sent
                           * to the DLQ topic (a rebuild: the topic already holds them) */
    int no_changes;       /* no membership outbox entries (a rebuild: none is published,
                           * caches load a snapshot taken after the swap) */
    int catch_up;         /* the consumer reports each partition's end, for
                           * segd_links_catch_up */
} segd_links_opts_t;

/* SEGD_ERR_CONFIG when the links topic does not exist. o may be NULL
 * (segd run's); it is read during the call only. */
segd_err_t segd_links_new_opts(segd_links_t **out, const segd_config_t *cfg,
                               segd_store_t *store, const segd_links_opts_t *o,
                               volatile sig_atomic_t *stop, segd_backoff_t *backoff,
                               char *errstr, size_t errstr_size);
/* segd run's: segd_links_new_opts with o NULL. */
segd_err_t segd_links_new(segd_links_t **out, const segd_config_t *cfg, segd_store_t *store,
                          volatile sig_atomic_t *stop, segd_backoff_t *backoff, char *errstr,
                          size_t errstr_size);
void segd_links_destroy(segd_links_t *l);

/* Applies what the consumer has, up to batch.max.messages, waiting at most
 * wait_ms for the first message. A failed store write is retried with
 * backoff until it succeeds or stop is set. */
segd_err_t segd_links_step(segd_links_t *l, int wait_ms, char *errstr, size_t errstr_size);

/* Steps until every partition of the topic has reached its end once since
 * the consumer was made (librdkafka's partition EOF, so at least the end
 * each had then), every batch written: for `segd rebuild`, whose fresh
 * store then holds the graph of the whole topic. Needs opts.catch_up.
 * SEGD_ERR_ABORTED when stop is set first. */
segd_err_t segd_links_catch_up(segd_links_t *l, char *errstr, size_t errstr_size);

void segd_links_get_stats(const segd_links_t *l, segd_links_stats_t *st);

#endif
