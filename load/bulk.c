/* Bulk load: sort, then SST files for new users, the merge path for present
 * ones, outbox entries before the ingest; see bulk.h. */
#define _GNU_SOURCE /* mkdtemp */
#include "load/bulk.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "core/event.h"
#include "core/policy.h"
#include "core/record.h"
#include "load/extsort.h"
#include "load/handoff.h"
#include "store/sst.h"
#include "wire/outbox.h"

#define TMP_PREFIX "bulk-"
#define BATCH_ITEMS 1000           /* users per WriteBatch, as backfill's batches */
#define BATCH_BYTES (1u << 20)     /* or fewer when their deltas are large */
#define PROGRESS_EVERY 4096
#define DIRECT_CHECK_BYTES (4u << 20) /* direct: free space checked every 4 MiB */

struct segd_bulk {
    segd_store_t *store;
    segd_bulk_opts_t o;
    char *dir;
    segd_extsort_t *sort;
    segd_bulk_stats_t st;
    double t0;
    /* finish */
    segd_prune_t rule;
    segd_batch_t *batch;
    segd_outbox_builder_t ob;
    segd_buf_t obval, operand, record;
    uint64_t outbox_unflushed; /* outbox bytes written since its last flush */
    uint64_t committed;        /* store writes that carried outbox entries: from the
                                * first on, a stop no longer ends the load before its
                                * ingest (the deltas announce users that only the
                                * ingest brings); present users' merges alone are
                                * exact by themselves */
    segd_sst_writer_t *w;
    char **ssts;
    size_t nssts, ssts_cap;
    segd_buf_t last; /* direct: the last user added */
    uint64_t direct_bytes, direct_checked; /* written, and when the disk was checked */
};

const char *segd_bulk_phase_name(segd_bulk_phase_t phase)
{
    switch (phase) {
    case SEGD_BULK_SORT: return "sort";
    case SEGD_BULK_WRITE: return "write";
    case SEGD_BULK_INGEST: return "ingest";
    }
    return "?";
}

void segd_bulk_opts_default(segd_bulk_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->memory_bytes = 1024ull << 20;
    o->changes = 1;
    o->sst_target_bytes = 256ull << 20;
}

/* The directory holds only files this module made. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path))
                unlink(path);
        closedir(d);
    }
    rmdir(dir);
}

/* A load killed mid-way leaves its directory; none can be in use now. */
void segd_bulk_remove_stale(segd_store_t *store)
{
    const char *store_dir = segd_store_path(store);
    DIR *d = opendir(store_dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) &&
            snprintf(path, sizeof(path), "%s/%s", store_dir, e->d_name) < (int)sizeof(path)) {
            struct stat sb;
            if (!lstat(path, &sb) && S_ISDIR(sb.st_mode))
                remove_tree(path);
        }
    closedir(d);
}

static segd_err_t make_dir(segd_bulk_t *b, char *errstr, size_t n)
{
    const char *base = b->o.tmp_dir ? b->o.tmp_dir : segd_store_path(b->store);
    size_t len = strlen(base) + sizeof("/" TMP_PREFIX "XXXXXX");
    if (!(b->dir = malloc(len)))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    snprintf(b->dir, len, "%s/" TMP_PREFIX "XXXXXX", base);
    if (!mkdtemp(b->dir)) {
        segd_err_t err = segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", b->dir, strerror(errno));
        free(b->dir);
        b->dir = NULL;
        return err;
    }
    return SEGD_OK;
}

segd_err_t segd_bulk_new(segd_bulk_t **out, segd_store_t *store, const segd_bulk_opts_t *o,
                         char *errstr, size_t n)
{
    *out = NULL;
    segd_err_t err = segd_store_reserve_check(store, 0, errstr, n);
    if (err)
        return err;
    segd_bulk_t *b = calloc(1, sizeof(*b));
    if (!b)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    b->store = store;
    b->o = *o;
    if (!b->o.sst_target_bytes)
        b->o.sst_target_bytes = 256ull << 20;
    b->t0 = segd_mono_s();
    segd_outbox_builder_init(&b->ob);
    if (!o->shared) /* a shared store may have another load under way */
        segd_bulk_remove_stale(store);
    int empty = 0;
    if ((!o->shared && (err = segd_store_profiles_empty(store, &empty, errstr, n))) ||
        (err = make_dir(b, errstr, n)))
        goto out_destroy;
    b->st.store_was_empty = empty;
    segd_extsort_opts_t so = {.memory_bytes = o->memory_bytes, .dir = b->dir, .store = store};
    /* direct: no sort (and none of its arena) */
    if ((!b->o.direct && (err = segd_extsort_new(&b->sort, &so, errstr, n))) ||
        (err = segd_batch_new(store, &b->batch)))
        goto out_destroy;
    /* an empty record encodes to no bytes; its buffer must still point
     * somewhere, since the outbox and the batch copy from it */
    if (segd_buf_reserve(&b->operand, 1) || segd_buf_reserve(&b->record, 1)) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        goto out_destroy;
    }
    *out = b;
    return SEGD_OK;
out_destroy:
    segd_bulk_destroy(b);
    return err;
}

static segd_err_t sst_put(segd_bulk_t *b, const char *user, size_t ulen, const segd_buf_t *rec,
                          char *errstr, size_t n);

/* Bytewise, as RocksDB's default comparator (the SST writer's order). */
static int after_last(const segd_bulk_t *b, const char *user, size_t len)
{
    if (!b->st.pairs)
        return 1;
    size_t m = len < b->last.len ? len : b->last.len;
    int c = memcmp(user, b->last.data, m);
    return c > 0 || (c == 0 && len > b->last.len);
}

/* The direct path: one operand per user, straight into the SST files. */
static segd_err_t add_direct(segd_bulk_t *b, const char *user, size_t user_len,
                             const uint8_t *operand, size_t operand_len, uint64_t n_segments,
                             char *errstr, size_t n)
{
    if (!after_last(b, user, user_len))
        return segd_errf(SEGD_ERR_UNSORTED, errstr, n, "bulk: user %.*s out of key order",
                         (int)(user_len < 64 ? user_len : 64), user);
    b->last.len = 0;
    segd_err_t err = segd_buf_append(&b->last, user, user_len);
    if (err)
        return segd_errf(err, errstr, n, "out of memory");
    b->st.pairs++;
    b->st.users++;
    b->st.segments += n_segments;
    if (!operand_len) {
        b->st.users_empty++;
        return SEGD_OK;
    }
    segd_buf_t op = {.data = (uint8_t *)operand, .len = operand_len};
    b->st.users_sst++;
    /* SST files grow with the unit: the free-space reserve is checked as
     * they do (the sorted path checks before each spill and before its
     * files), never letting a restore eat what the other writers wait on */
    b->direct_bytes += user_len + operand_len;
    if (b->direct_bytes - b->direct_checked >= DIRECT_CHECK_BYTES) {
        b->direct_checked = b->direct_bytes;
        if ((err = segd_store_reserve_check(b->store, 2 * DIRECT_CHECK_BYTES, errstr, n)))
            return err;
    }
    return sst_put(b, user, user_len, &op, errstr, n);
}

segd_err_t segd_bulk_add(segd_bulk_t *b, const char *user, size_t user_len,
                         const uint8_t *operand, size_t operand_len, uint64_t n_segments,
                         char *errstr, size_t n)
{
    if (user_len == 0 || user_len > SEGD_MAX_USER_ID)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "bulk: user id of %zu bytes", user_len);
    if (b->o.direct)
        return add_direct(b, user, user_len, operand, operand_len, n_segments, errstr, n);
    segd_err_t err = segd_extsort_add(b->sort, user, user_len, operand, operand_len, errstr, n);
    if (!err) {
        b->st.pairs++;
        b->st.segments += n_segments;
    }
    return err;
}

void segd_bulk_destroy(segd_bulk_t *b)
{
    if (!b)
        return;
    segd_sst_writer_destroy(b->w);
    segd_extsort_destroy(b->sort); /* its run files */
    for (size_t i = 0; i < b->nssts; i++)
        free(b->ssts[i]);
    free(b->ssts);
    if (b->dir) /* SST files not moved into the store */
        remove_tree(b->dir);
    free(b->dir);
    segd_batch_destroy(b->batch);
    segd_outbox_builder_free(&b->ob);
    segd_buf_free(&b->obval);
    segd_buf_free(&b->operand);
    segd_buf_free(&b->record);
    segd_buf_free(&b->last);
    free(b);
}

/* Each of the two handoff batches: a 32nd of the budget, at most 4 MiB (the
 * merge's read buffers take a quarter, the last arena a half). */
static size_t handoff_bytes(const segd_bulk_t *b)
{
    uint64_t v = b->o.memory_bytes / 32;
    return (size_t)(v > (4u << 20) ? (4u << 20) : v);
}

static void progress(segd_bulk_t *b, segd_bulk_phase_t phase, uint64_t done, uint64_t total)
{
    if (b->o.progress)
        b->o.progress(b->o.progress_ctx, phase, done, total);
}

/* ---------- the merge path: present users' operands, outbox entries ---------- */

static segd_err_t flush_batch(segd_bulk_t *b, char *errstr, size_t n)
{
    if (b->ob.n_items) {
        segd_err_t err = segd_outbox_finish(&b->ob, segd_wall_ms(), &b->obval);
        if (err)
            return segd_errf(err, errstr, n, "outbox entry: out of memory");
        segd_batch_outbox_append(b->batch, b->obval.data, b->obval.len);
        b->st.outbox_entries++;
    }
    if (segd_batch_count(b->batch)) {
        segd_err_t err = segd_store_write(b->store, b->batch, errstr, n);
        if (err)
            return err;
        b->committed += b->ob.n_items > 0; /* deltas now announce users */
    }
    segd_batch_clear(b->batch);
    segd_outbox_builder_reset(&b->ob);
    /* the deltas of every user would sit in the outbox's memtables, outside
     * the budget: flushed every eighth of it */
    b->outbox_unflushed += b->obval.len;
    b->obval.len = 0;
    if (b->outbox_unflushed >= b->o.memory_bytes / 8) {
        b->outbox_unflushed = 0;
        return segd_store_outbox_flush(b->store, errstr, n);
    }
    return SEGD_OK;
}

/* ---------- SST files ---------- */

static segd_err_t close_sst(segd_bulk_t *b, char *errstr, size_t n)
{
    if (!b->w)
        return SEGD_OK;
    uint64_t bytes = 0;
    segd_err_t err = segd_sst_writer_finish(b->w, &bytes, errstr, n);
    segd_sst_writer_destroy(b->w);
    b->w = NULL;
    if (!err) {
        b->st.sst_files++;
        b->st.sst_bytes += bytes;
    }
    return err;
}

static segd_err_t sst_put(segd_bulk_t *b, const char *user, size_t ulen, const segd_buf_t *rec,
                          char *errstr, size_t n)
{
    segd_err_t err;
    if (b->w && segd_sst_writer_bytes(b->w) >= b->o.sst_target_bytes &&
        (err = close_sst(b, errstr, n)))
        return err;
    if (!b->w) {
        char **ssts = segd_array_grow(b->ssts, &b->ssts_cap, b->nssts + 1, sizeof(*ssts));
        if (!ssts)
            return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        b->ssts = ssts;
        size_t len = strlen(b->dir) + 32;
        if (!(ssts[b->nssts] = malloc(len)))
            return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        snprintf(ssts[b->nssts], len, "%s/%06zu.sst", b->dir, b->nssts);
        if ((err = segd_sst_writer_open(b->store, ssts[b->nssts++], &b->w, errstr, n)))
            return err;
    }
    if (b->o.shared)
        return segd_sst_writer_merge(b->w, user, ulen, rec->data, rec->len, errstr, n);
    return segd_sst_writer_put(b->w, user, ulen, rec->data, rec->len, errstr, n);
}

/* A new user's value: the record a full merge at the load's now stores.
 * joined is pruned in place; when that drops nothing (the common case) the
 * operand already encoded (have_operand) is that record. */
static segd_err_t write_new_user(segd_bulk_t *b, const char *user, size_t ulen,
                                 segd_profile_t *joined, int have_operand, char *errstr,
                                 size_t n)
{
    size_t before = joined->n;
    int64_t erased = joined->erased_before_ms;
    segd_profile_prune(joined, &b->rule);
    const segd_buf_t *rec = &b->operand;
    if (!have_operand || joined->n != before || joined->erased_before_ms != erased) {
        segd_err_t err = segd_record_encode(joined, &b->record);
        if (err)
            return segd_errf(err, errstr, n, "out of memory");
        rec = &b->record;
    }
    if (rec->len == 0) { /* an empty record is "no such user" everywhere */
        b->st.users_empty++;
        return SEGD_OK;
    }
    b->st.users_sst++;
    return sst_put(b, user, ulen, rec, errstr, n);
}

static segd_err_t write_user(segd_bulk_t *b, const char *user, size_t ulen,
                             segd_profile_t *joined, char *errstr, size_t n)
{
    int present = 0;
    segd_err_t err;
    if (!b->o.shared && !b->st.store_was_empty &&
        (err = segd_store_user_present(b->store, user, ulen, &present, errstr, n)))
        return err;
    b->st.users++;
    /* the operand the merge path would join */
    int operand = present || b->o.changes || b->o.shared;
    if (operand && (err = segd_record_encode(joined, &b->operand)))
        return segd_errf(err, errstr, n, "out of memory");
    if (b->o.changes &&
        (err = segd_outbox_add(&b->ob, user, ulen, b->operand.data, b->operand.len, NULL, 0,
                               0, 0)))
        return segd_errf(err, errstr, n, "out of memory");
    if (b->o.shared) { /* unpruned: the store's merges prune at read and compaction */
        if (b->operand.len == 0) {
            b->st.users_empty++;
            return SEGD_OK;
        }
        b->st.users_sst++;
        if ((err = sst_put(b, user, ulen, &b->operand, errstr, n)))
            return err;
    } else if (present) {
        segd_batch_merge(b->batch, user, ulen, b->operand.data, b->operand.len);
        b->st.users_merged++;
    } else if ((err = write_new_user(b, user, ulen, joined, operand, errstr, n))) {
        return err;
    }
    if (b->ob.n_items >= BATCH_ITEMS || b->ob.items.len >= BATCH_BYTES ||
        segd_batch_count(b->batch) >= BATCH_ITEMS)
        return flush_batch(b, errstr, n);
    return SEGD_OK;
}

/* The merge runs on its own thread (load/handoff.h), the encoding and the
 * writes on this one: the write phase takes both cores. */
static segd_err_t write_all(segd_bulk_t *b, char *errstr, size_t n)
{
    segd_policy_rule(segd_store_policy(b->store), &b->rule, 1);
    segd_handoff_t *h = NULL;
    segd_err_t err = segd_handoff_start(&h, b->sort, handoff_bytes(b), errstr, n);
    uint64_t pairs = 0;
    while (!err) {
        const char *user;
        size_t ulen;
        segd_profile_t *joined;
        uint64_t items;
        int done;
        if ((err = segd_handoff_next(h, &user, &ulen, &joined, &items, &done, errstr, n)) ||
            done)
            break;
        if ((err = write_user(b, user, ulen, joined, errstr, n)))
            break;
        pairs += items;
        if (b->st.users % PROGRESS_EVERY == 0) {
            progress(b, SEGD_BULK_WRITE, pairs, b->st.pairs);
            if (b->o.stop && *b->o.stop && !b->committed)
                err = segd_errf(SEGD_ERR_ABORTED, errstr, n, "stopped");
        }
    }
    segd_handoff_stop(h);
    segd_policy_rule_release(&b->rule);
    return err;
}

/* Direct: the SST files are written; what is left is to close and ingest. */
static segd_err_t finish_direct(segd_bulk_t *b, char *errstr, size_t n)
{
    b->st.sort_s = 0;
    segd_err_t err = close_sst(b, errstr, n);
    if (err)
        return err;
    double t2 = segd_mono_s();
    b->st.write_s = t2 - b->t0;
    if (b->o.stop && *b->o.stop)
        return segd_errf(SEGD_ERR_ABORTED, errstr, n, "stopped");
    if (b->o.cancel && *b->o.cancel)
        return segd_errf(SEGD_ERR_ABORTED, errstr, n, "cancelled");
    progress(b, SEGD_BULK_INGEST, 0, b->nssts);
    if ((err = segd_store_ingest(b->store, (const char *const *)b->ssts, b->nssts, errstr, n)))
        return err;
    progress(b, SEGD_BULK_INGEST, b->nssts, b->nssts);
    b->st.ingest_s = segd_mono_s() - t2;
    return SEGD_OK;
}

segd_err_t segd_bulk_finish(segd_bulk_t *b, segd_bulk_stats_t *stats, char *errstr, size_t n)
{
    if (b->o.direct) {
        segd_err_t err = finish_direct(b, errstr, n);
        if (stats)
            *stats = b->st;
        return err;
    }
    segd_extsort_stats_t xs;
    segd_extsort_stats(b->sort, &xs);
    progress(b, SEGD_BULK_SORT, 0, xs.runs + 1);
    segd_err_t err = segd_extsort_finish(b->sort, errstr, n);
    if (err)
        goto out;
    segd_extsort_stats(b->sort, &xs);
    progress(b, SEGD_BULK_SORT, xs.runs + 1, xs.runs + 1);
    b->st.runs = xs.runs;
    b->st.run_bytes = xs.run_bytes;
    double t1 = segd_mono_s();
    b->st.sort_s = t1 - b->t0;
    /* the SST files take about what the joined runs and the rest take,
     * while the runs are still on the same disk; with changes on, the
     * outbox holds every user's delta again until segd run publishes it */
    uint64_t need = (xs.run_bytes + xs.remainder_bytes) * (b->o.changes ? 2 : 1);
    if ((err = segd_store_reserve_check(b->store, need, errstr,
                                        n)) ||
        (err = write_all(b, errstr, n)) || (err = close_sst(b, errstr, n)) ||
        (err = flush_batch(b, errstr, n)))
        goto out;
    progress(b, SEGD_BULK_WRITE, b->st.pairs, b->st.pairs);
    double t2 = segd_mono_s();
    b->st.write_s = t2 - t1;
    progress(b, SEGD_BULK_INGEST, 0, b->nssts);
    if ((b->o.stop && *b->o.stop && !b->committed) || (b->o.cancel && *b->o.cancel)) {
        err = segd_errf(SEGD_ERR_ABORTED, errstr, n, "stopped");
        goto out;
    }
    if ((err = segd_store_ingest(b->store, (const char *const *)b->ssts, b->nssts, errstr, n)))
        goto out;
    progress(b, SEGD_BULK_INGEST, b->nssts, b->nssts);
    b->st.ingest_s = segd_mono_s() - t2;
out:
    if (err && b->committed) {
        /* the operator must know the change stream is ahead of the store */
        char why[512];
        snprintf(why, sizeof(why), "%s", errstr);
        segd_errf(err, errstr, n,
                  "%s; %llu outbox entries were already written (deltas of users the "
                  "store lacks until the load completes): rerun the same load before "
                  "`segd run` publishes the outbox",
                  why, (unsigned long long)b->st.outbox_entries);
    }
    if (stats)
        *stats = b->st;
    return err;
}
