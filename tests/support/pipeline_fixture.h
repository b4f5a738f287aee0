/* The shared fixture of the pipeline tests (tests/unit/consumer/test_ingest,
 * test_ingest_faults, test_replay, test_route, tests/unit/publisher/
 * test_publish): a fresh temporary directory and an in-process mock Kafka
 * cluster with the test's topics, removed after each test; stores opened at
 * the fixture's clock; a pipeline configuration with the tests' defaults;
 * the seed produced to the input topic and applied straight to a reference
 * store, the comparison of stores against that reference, and a count of
 * a store's outbox.
 *
 * What differs between the tests is a field of fx_opts_t (the directory's
 * name, the partition count, the topics, the horizon), never a choice made
 * here. Helpers that assert do so with cmocka: call them from a test's body,
 * not from a setup (fx_seed_produce is the one that does not assert). */
#ifndef SEGD_TEST_PIPELINE_FIXTURE_H
#define SEGD_TEST_PIPELINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "store/store.h"
#include "workload/dev_broker.h"

/* The tests' clock: every store and seed of the fixture runs at it. The
 * seed's events are up to 30 days older. */
#define FX_NOW_S 1800000000LL

/* How many stores fx_users_missing joins at the most. */
#define FX_MAX_STORES 8

typedef struct fx_opts {
    const char *name;          /* the directory is /tmp/segd-test-NAME-XXXXXX */
    int partitions;            /* of each of topics */
    const char *const *topics; /* NULL-terminated; the first is the input topic */
    /* 0: the default horizon. Otherwise the horizon of the stores that
     * fx_open_store and fx_reference_store open and the store.horizon.s of
     * fx_config, kept together so that members and stores agree. */
    int64_t horizon_s;
} fx_opts_t;

typedef struct fx {
    segd_dev_broker_t *broker;
    rd_kafka_mock_cluster_t *mcl; /* the broker's, to inject errors and delays */
    char dir[64];
    const char *topic; /* the input topic: fx_opts_t's topics[0] */
    int partitions;
    int64_t horizon_s;
    /* A store a test keeps across its steps (test_publish), or NULL:
     * fx_teardown closes it before the cluster goes. */
    segd_store_t *store;
} fx_t;

/* A cmocka setup's body: *state becomes a new fx_t. Returns 0, or -1 (with
 * nothing left behind) when the directory or the cluster cannot be made. */
int fx_setup(void **state, const fx_opts_t *o);

/* A cmocka teardown: closes fx_t's store, stops the cluster, removes the
 * directory (what `rm -rf` returned is the result). */
int fx_teardown(void **state);

/* "127.0.0.1:PORT": the cluster's bootstrap list, borrowed until teardown. */
const char *fx_bootstraps(const fx_t *f);

/* Opens DIR/NAME at FX_NOW_S with an 8 MiB block cache and horizon_ms as
 * its horizon (0: the default), failing the test if it cannot. */
segd_store_t *fx_open_store_in(const char *dir, const char *name, int64_t horizon_ms);

/* fx_open_store_in in the fixture's directory, with its horizon. */
segd_store_t *fx_open_store(const fx_t *f, const char *name);

/* The tests' configuration of a pipeline reading the input topic into db as
 * a member of group: retry.max.ms 200 (retries that fit a test),
 * store.horizon.s where the fixture has a horizon, then kv (key, value, ...,
 * NULL; may be NULL) over those, and -X session.timeout.ms=6000 so that a
 * member that left is noticed within a test's bounds. */
void fx_config(segd_config_t *cfg, const fx_t *f, const char *group, const char *db,
               const char *const *kv);

/* Produces the seed (`users` users, 50 events each, seeded with `seed`, at
 * FX_NOW_S) to the input topic; *events is how many it produced. Does not
 * assert, for a setup. */
segd_err_t fx_seed_produce(const fx_t *f, uint64_t users, uint64_t seed, uint64_t *events);

/* fx_seed_produce, failing the test unless every event was produced. */
void fx_produce_seed(const fx_t *f, uint64_t users, uint64_t seed);

/* The same seed events applied straight to a store, DIR/reference, opened
 * with the fixture's horizon: what ingest must end equal to. */
segd_store_t *fx_reference_store(const fx_t *f, const char *dir, uint64_t users,
                                 uint64_t seed);

/* Users of the reference (each of which must hold something) whose state
 * the union of the n stores `got` lacks or differs from. The first two that
 * differ are printed, for the log of a failure. */
uint64_t fx_users_missing(segd_store_t *ref, segd_store_t **got, size_t n, uint64_t users);

/* Fails the test unless every user of the reference reads the same from the
 * union of the n stores. */
void fx_assert_stores_equal(segd_store_t *ref, segd_store_t **got, size_t n, uint64_t users);

/* The outbox entries of s, counted by scanning: independent of the store's
 * own depth counter, which the tests check against it. */
uint64_t fx_outbox_entries(segd_store_t *s);

#endif
