/* The publisher's construction and teardown (publisher.h): the options'
 * defaults and the change positions already recorded in the store; the
 * change producer itself is publisher_producer.c's. One producer serves one
 * thread at a time (the background thread, or the caller of cycle/drain),
 * and its delivery reports run inside rd_kafka_flush on that thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher/publisher_int.h"

void segd_publisher_opts_default(segd_publisher_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->topic = SEGD_DEFAULT_CHANGES_TOPIC;
    o->framing = SEGD_CHANGE_SINGLE_OBJECT;
    o->compression = "lz4";
    o->partitioner = SEGD_PARTITIONER_MURMUR2;
    o->max_entries = 64;
    o->retry_max_ms = 5000;
    o->ack_timeout_ms = 30000;
    o->max_delta_entries = 32768; /* ~16 B each: well under 1 MB messages */
}

int32_t segd_publisher_partitions(const segd_publisher_t *p) { return p->partitions; }

static int load_known(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    segd_publisher_t *p = ctx;
    if (!strcmp(topic, p->o.topic) && partition >= 0 && partition < MAX_PARTITIONS)
        p->known[partition] = next;
    return 0;
}

static segd_err_t load_positions(segd_publisher_t *p, char *errstr, size_t n)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = segd_store_view_open(p->store, &v, errstr, n);
    if (!err)
        err = segd_store_view_positions(v, "changes", load_known, p, errstr, n);
    segd_store_view_close(v);
    return err;
}

segd_err_t segd_publisher_new(segd_publisher_t **out, segd_store_t *store,
                              const segd_publisher_opts_t *o, char *errstr, size_t n)
{
    *out = NULL;
    if (!o->brokers || !o->topic || !*o->topic)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "changes: brokers and topic are required");
    if (o->framing == SEGD_CHANGE_CONFLUENT && !o->registry_url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "changes.format = confluent needs a schema registry URL");
    segd_publisher_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->o = *o;
    if (!p->o.max_entries)
        p->o.max_entries = 64;
    if (!p->o.max_delta_entries)
        p->o.max_delta_entries = 32768;
    p->store = store;
    p->schema_id = -1;
    p->member_schema_id = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    segd_profile_init(&p->acc);
    segd_profile_init(&p->tmp);
    segd_profile_init(&p->joined);
    segd_change_init(&p->change);
    p->lat = calloc(LAT_BUCKETS, sizeof(*p->lat));
    segd_err_t err = p->lat ? segd_batch_new(store, &p->batch) : SEGD_ERR_NOMEM;
    if (!err)
        err = load_positions(p, errstr, n);
    if (!err && o->framing == SEGD_CHANGE_CONFLUENT) {
        segd_registry_opts_t ro;
        segd_registry_opts_default(&ro);
        ro.userpass = o->registry_auth;
        ro.ca_file = o->registry_ca;
        err = segd_registry_new(&p->registry, o->registry_url, &ro, errstr, n);
    }
    if (!err)
        err = segd_publisher_renew_producer(p, errstr, n); /* none yet: made */
    /* A missing change topic is refused now. Unreachable brokers are not an
     * error yet, because every cycle asks again and the outbox keeps the
     * deltas meanwhile, and brokers known not to answer are not waited for. */
    if (!err && !o->brokers_down &&
        segd_publisher_ensure_partitions(p, 0, errstr, n) == SEGD_ERR_NOTFOUND)
        err = SEGD_ERR_NOTFOUND;
    if (err) {
        segd_publisher_destroy(p);
        return err;
    }
    *out = p;
    return SEGD_OK;
}

void segd_publisher_destroy(segd_publisher_t *p)
{
    if (!p)
        return;
    segd_publisher_stop(p, 0);
    segd_publisher_destroy_producer(p);
    segd_publisher_clear_cycle(p);
    for (size_t i = 0; i < p->cap_entries; i++)
        segd_buf_free(&p->values[i]);
    free(p->values);
    free(p->entries);
    free(p->refs);
    free(p->lat);
    segd_profile_free(&p->acc);
    segd_profile_free(&p->tmp);
    segd_profile_free(&p->joined);
    segd_change_free(&p->change);
    segd_buf_free(&p->msg);
    segd_batch_destroy(p->batch);
    segd_registry_destroy(p->registry);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
