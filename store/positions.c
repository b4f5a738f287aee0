/* Positions and counters in the meta family, written in the same batch as
 * the data they describe so that they stay exact across crashes. Per
 * (topic, partition): the input offset (offset/), the change topic's
 * position (changes/), the sweep's mark (sweep/) and what history a rebuild
 * began with (rebuild_log_start/, rebuild_gone_from/). Per name: counters
 * (count/). Per input topic: its partition count (partitions/). Values are
 * 8-byte big-endian. The pipeline, the publisher, the sweep and the CLI's
 * offline readers use them. */
#define _GNU_SOURCE /* memrchr */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/store_impl.h"

static size_t position_key(char *buf, size_t cap, const char *kind, const char *topic,
                           int32_t partition)
{
    int n = snprintf(buf, cap, "%s/%s/%" PRId32, kind, topic, partition);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

static void batch_set_position(segd_batch_t *b, const char *kind, const char *topic,
                               int32_t partition, int64_t next_offset)
{
    char key[512], val[8];
    size_t klen = position_key(key, sizeof(key), kind, topic, partition);
    put_be64(val, (uint64_t)next_offset);
    rocksdb_writebatch_put_cf(b->wb, b->store->cf[CF_META], key, klen, val, 8);
}

void segd_batch_set_offset(segd_batch_t *b, const char *topic, int32_t partition,
                           int64_t next_offset)
{
    batch_set_position(b, "offset", topic, partition, next_offset);
}

void segd_batch_set_change_position(segd_batch_t *b, const char *topic, int32_t partition,
                                    int64_t next_offset)
{
    batch_set_position(b, "changes", topic, partition, next_offset);
}

static void batch_delete_position(segd_batch_t *b, const char *kind, const char *topic,
                                  int32_t partition)
{
    char key[512];
    size_t klen = position_key(key, sizeof(key), kind, topic, partition);
    rocksdb_writebatch_delete_cf(b->wb, b->store->cf[CF_META], key, klen);
}

void segd_batch_delete_offset(segd_batch_t *b, const char *topic, int32_t partition)
{
    batch_delete_position(b, "offset", topic, partition);
}

void segd_batch_set_sweep_mark(segd_batch_t *b, const char *topic, int32_t partition,
                               int64_t since_ms)
{
    batch_set_position(b, "sweep", topic, partition, since_ms);
}

void segd_batch_clear_sweep_mark(segd_batch_t *b, const char *topic, int32_t partition)
{
    batch_delete_position(b, "sweep", topic, partition);
}

segd_err_t segd_store_offset_get(segd_store_t *s, const char *topic, int32_t partition,
                                 int64_t *next_offset, char *errstr, size_t n)
{
    char key[512];
    size_t klen = position_key(key, sizeof(key), "offset", topic, partition);
    if (segd_store_fault_hit(s, SEGD_FAULT_OFFSET_GET))
        return segd_errf(SEGD_ERR_IO, errstr, n, "read meta: injected fault");
    segd_err_t err = segd_store_meta_get_be64(s, s->ropts, key, klen, next_offset, errstr, n);
    if (err == SEGD_ERR_CORRUPT)
        segd_errf(err, errstr, n, "bad stored offset for %s", key);
    return err;
}

void segd_batch_set_position(segd_batch_t *b, const char *kind, const char *topic,
                             int32_t partition, int64_t value)
{
    batch_set_position(b, kind, topic, partition, value);
}

void segd_batch_delete_position(segd_batch_t *b, const char *kind, const char *topic,
                                int32_t partition)
{
    batch_delete_position(b, kind, topic, partition);
}

segd_err_t segd_store_position_get(segd_store_t *s, const char *kind, const char *topic,
                                   int32_t partition, int64_t *value, char *errstr, size_t n)
{
    char key[512];
    size_t klen = position_key(key, sizeof(key), kind, topic, partition);
    segd_err_t err = segd_store_meta_get_be64(s, s->ropts, key, klen, value, errstr, n);
    if (err == SEGD_ERR_CORRUPT)
        segd_errf(err, errstr, n, "bad stored position %s", key);
    return err;
}

static void batch_put_i64(segd_batch_t *b, const char *key, int64_t v)
{
    char val[8];
    put_be64(val, (uint64_t)v);
    rocksdb_writebatch_put_cf(b->wb, b->store->cf[CF_META], key, strlen(key), val, 8);
}

/* The key of a named counter or of a topic's partition count, in buf. */
static const char *named_key(char *buf, size_t cap, const char *kind, const char *name)
{
    snprintf(buf, cap, "%s/%s", kind, name);
    return buf;
}

void segd_batch_set_counter(segd_batch_t *b, const char *name, int64_t value)
{
    char key[256];
    batch_put_i64(b, named_key(key, sizeof(key), "count", name), value);
}

static segd_err_t counter_at(segd_store_t *s, const rocksdb_readoptions_t *ro,
                             const char *name, int64_t *value, char *errstr, size_t n)
{
    char key[256];
    named_key(key, sizeof(key), "count", name);
    return segd_store_meta_get_i64_at(s, ro, key, value, errstr, n);
}

segd_err_t segd_store_counter_get(segd_store_t *s, const char *name, int64_t *value,
                                  char *errstr, size_t n)
{
    return counter_at(s, s->ropts, name, value, errstr, n);
}

segd_err_t segd_store_view_counter(segd_store_view_t *v, const char *name, int64_t *value,
                                   char *errstr, size_t n)
{
    return counter_at(v->store, v->ropts, name, value, errstr, n);
}

void segd_batch_set_partition_count(segd_batch_t *b, const char *topic, int32_t count)
{
    char key[512];
    batch_put_i64(b, named_key(key, sizeof(key), "partitions", topic), count);
}

segd_err_t segd_store_partition_count(segd_store_t *s, const char *topic, int32_t *count,
                                      char *errstr, size_t n)
{
    char key[512];
    int64_t c = 0;
    named_key(key, sizeof(key), "partitions", topic);
    segd_err_t err = segd_store_meta_get_be64(s, s->ropts, key, strlen(key), &c, errstr, n);
    if (err && err != SEGD_ERR_CORRUPT)
        return err;
    if (err || c <= 0 || c > INT32_MAX)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad %s in meta", key);
    *count = (int32_t)c;
    return SEGD_OK;
}

/* The suffix is "<topic>/<partition>". A topic may contain '/' and a
 * partition cannot, so the last slash splits them. */
static int position_entry(void *ctx, const char *suffix, size_t slen, const char *val,
                          size_t vlen)
{
    segd_meta_walk_t *w = ctx;
    char topic[512];
    const char *slash = memrchr(suffix, '/', slen);
    if (!slash || vlen != 8 || (size_t)(slash - suffix) >= sizeof(topic))
        return 0;
    memcpy(topic, suffix, (size_t)(slash - suffix));
    topic[slash - suffix] = 0;
    char part[16];
    size_t plen = slen - (size_t)(slash - suffix) - 1;
    if (plen == 0 || plen >= sizeof(part))
        return 0;
    memcpy(part, slash + 1, plen);
    part[plen] = 0;
    return w->cb.position(w->ctx, topic, (int32_t)strtol(part, NULL, 10), (int64_t)get_be64(val));
}

segd_err_t segd_store_view_positions(segd_store_view_t *v, const char *kind,
                                     segd_position_cb cb, void *ctx, char *errstr, size_t n)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "%s/", kind);
    segd_meta_walk_t w = {.cb.position = cb, .ctx = ctx};
    return segd_store_view_meta(v, prefix, position_entry, &w, errstr, n);
}
