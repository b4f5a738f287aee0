/* SST files for the profiles family and their ingestion; see sst.h. The
 * options are the family's own (store.c configure_profiles), so an ingested
 * file reads, filters and compacts like one the family flushed itself. */
#include "store/sst.h"

#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "store/store_int.h"

struct segd_sst_writer {
    segd_store_t *store;
    rocksdb_envoptions_t *env;
    rocksdb_sstfilewriter_t *w;
    segd_buf_t last; /* the last key added: the order check */
    uint64_t entries, bytes;
};

static segd_err_t rocks_fail(char *rerr, segd_err_t code, char *errstr, size_t n,
                             const char *what)
{
    segd_errf(code, errstr, n, "%s: %s", what, rerr);
    rocksdb_free(rerr);
    return code;
}

/* A failed RocksDB call that may have put it in its error state (a failed
 * MANIFEST or flush write), where it refuses writes: the probe tells, and
 * breaks the store then as write_failed does; otherwise nothing changed. */
static segd_err_t failed_or_broken(segd_store_t *s, char *rerr, const char *what,
                                   char *errstr, size_t n)
{
    char probe[256];
    if (segd_store_probe_write(s, probe, sizeof(probe)) == SEGD_ERR_ABORTED) {
        segd_errf(SEGD_ERR_ABORTED, errstr, n, "%s failed: %s; %s", what, rerr, probe);
        rocksdb_free(rerr);
        return SEGD_ERR_ABORTED;
    }
    char msg[128];
    snprintf(msg, sizeof(msg), "%s failed (it changed nothing)", what);
    return rocks_fail(rerr, SEGD_ERR_IO, errstr, n, msg);
}

segd_err_t segd_sst_writer_open(segd_store_t *s, const char *path, segd_sst_writer_t **out,
                                char *errstr, size_t n)
{
    *out = NULL;
    segd_sst_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    w->store = s;
    w->env = rocksdb_envoptions_create();
    w->w = rocksdb_sstfilewriter_create(w->env, segd_store_profiles_options(s));
    char *rerr = NULL;
    rocksdb_sstfilewriter_open(w->w, path, &rerr);
    if (rerr) {
        segd_sst_writer_destroy(w);
        return rocks_fail(rerr, SEGD_ERR_IO, errstr, n, path);
    }
    *out = w;
    return SEGD_OK;
}

/* Bytewise, shorter first on a tie: the family's comparator. */
static int key_cmp(const uint8_t *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static segd_err_t add(segd_sst_writer_t *w, int merge, const char *key, size_t klen,
                      const uint8_t *val, size_t vlen, char *errstr, size_t n)
{
    /* RocksDB would refuse too, but segd says which key and checks before
     * anything reaches the file */
    if (w->entries && key_cmp(w->last.data, w->last.len, key, klen) >= 0)
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "SST keys out of order: %.*s after %.*s", (int)klen, key,
                         (int)w->last.len, (const char *)w->last.data);
    w->last.len = 0;
    if (segd_buf_append(&w->last, key, klen))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    char *rerr = NULL;
    if (merge)
        rocksdb_sstfilewriter_merge(w->w, key, klen, (const char *)val, vlen, &rerr);
    else
        rocksdb_sstfilewriter_put(w->w, key, klen, (const char *)val, vlen, &rerr);
    if (rerr) {
        w->last.len = 0; /* the file is unusable: the caller drops it */
        return rocks_fail(rerr, SEGD_ERR_IO, errstr, n, "SST write");
    }
    w->entries++;
    w->bytes += klen + vlen;
    return SEGD_OK;
}

segd_err_t segd_sst_writer_put(segd_sst_writer_t *w, const char *key, size_t klen,
                               const uint8_t *val, size_t vlen, char *errstr, size_t n)
{
    return add(w, 0, key, klen, val, vlen, errstr, n);
}

segd_err_t segd_sst_writer_merge(segd_sst_writer_t *w, const char *key, size_t klen,
                                 const uint8_t *val, size_t vlen, char *errstr, size_t n)
{
    return add(w, 1, key, klen, val, vlen, errstr, n);
}

uint64_t segd_sst_writer_entries(const segd_sst_writer_t *w) { return w->entries; }
uint64_t segd_sst_writer_bytes(const segd_sst_writer_t *w) { return w->bytes; }

segd_err_t segd_sst_writer_finish(segd_sst_writer_t *w, uint64_t *file_bytes, char *errstr,
                                  size_t n)
{
    if (!w->entries)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "an SST file needs an entry");
    char *rerr = NULL;
    rocksdb_sstfilewriter_finish(w->w, &rerr);
    if (rerr)
        return rocks_fail(rerr, SEGD_ERR_IO, errstr, n, "SST finish");
    if (file_bytes)
        rocksdb_sstfilewriter_file_size(w->w, file_bytes);
    return SEGD_OK;
}

void segd_sst_writer_destroy(segd_sst_writer_t *w)
{
    if (!w)
        return;
    if (w->w)
        rocksdb_sstfilewriter_destroy(w->w);
    if (w->env)
        rocksdb_envoptions_destroy(w->env);
    segd_buf_free(&w->last);
    free(w);
}

/* The options, deliberately:
 * - move_files: the files sit in a temporary directory under the store's,
 *   on the same file system, so RocksDB hard-links them instead of copying
 *   (RocksDB 7.8 falls back to a copy where a link fails).
 * - allow_global_seqno: a store that is not empty has files whose key
 *   ranges interleave with the new users' (no key is shared: present users
 *   went through the merge path), so RocksDB must give the files a sequence
 *   number above the store's; 7.8 keeps it in the MANIFEST and does not
 *   rewrite the file (write_global_seqno is off by default). Into an empty
 *   store the files go to the bottom level with sequence 0.
 * - allow_blocking_flush: the memtable may hold merges in the files' key
 *   range (the present users' operands written just before); RocksDB must
 *   flush it first or refuse the files.
 * - snapshot_consistency (default on): a reader's snapshot taken before
 *   keeps not seeing the files.
 * - not ingest_behind: it needs allow_ingest_behind at open (reserving the
 *   bottom level for ever) and would put the values under existing data. */
segd_err_t segd_store_ingest(segd_store_t *s, const char *const *paths, size_t count,
                             char *errstr, size_t n)
{
    segd_err_t err = segd_store_check_writable(s, errstr, n);
    if (err || count == 0)
        return err;
    /* the files are on disk already; RocksDB adds a MANIFEST record and, for
     * a non-empty store, may flush a memtable: the reserve still holds */
    if ((err = segd_store_check_space(s, 0, errstr, n)))
        return err;
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
    rocksdb_ingestexternalfileoptions_set_allow_global_seqno(io, 1);
    rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(io, 1);
    rocksdb_ingestexternalfileoptions_set_snapshot_consistency(io, 1);
    rocksdb_ingestexternalfileoptions_set_ingest_behind(io, 0);
    char *rerr = NULL;
    rocksdb_ingest_external_file_cf(segd_store_rocks(s), segd_store_profiles_cf(s), paths,
                                    count, io, &rerr);
    rocksdb_ingestexternalfileoptions_destroy(io);
    if (!rerr)
        return SEGD_OK;
    /* a refusal before the MANIFEST record (a missing or bad file) changes
     * nothing */
    return failed_or_broken(s, rerr, "ingest", errstr, n);
}

segd_err_t segd_store_outbox_flush(segd_store_t *s, char *errstr, size_t n)
{
    segd_err_t err = segd_store_check_writable(s, errstr, n);
    if (err)
        return err;
    char *rerr = NULL;
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    rocksdb_flush_cf(segd_store_rocks(s), fo, segd_store_outbox_cf(s), &rerr);
    rocksdb_flushoptions_destroy(fo);
    return rerr ? failed_or_broken(s, rerr, "outbox flush", errstr, n) : SEGD_OK;
}

segd_err_t segd_store_user_present(segd_store_t *s, const char *user, size_t user_len,
                                   int *present, char *errstr, size_t n)
{
    char *rerr = NULL;
    /* pinned: no copy of the value, which is not even decoded: a record
     * that does not decode is present (the merge path keeps it as it is) */
    rocksdb_pinnableslice_t *v =
        rocksdb_get_pinned_cf(segd_store_rocks(s), segd_store_read_options(s),
                              segd_store_profiles_cf(s), user, user_len, &rerr);
    if (rerr) {
        rocksdb_pinnableslice_destroy(v);
        return rocks_fail(rerr, SEGD_ERR_IO, errstr, n, "get");
    }
    *present = v != NULL;
    rocksdb_pinnableslice_destroy(v);
    return SEGD_OK;
}

segd_err_t segd_store_profiles_empty(segd_store_t *s, int *empty, char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(
        segd_store_rocks(s), segd_store_read_options(s), segd_store_profiles_cf(s));
    rocksdb_iter_seek_to_first(it);
    *empty = !rocksdb_iter_valid(it);
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    return rerr ? rocks_fail(rerr, SEGD_ERR_IO, errstr, n, "scan") : SEGD_OK;
}

segd_err_t segd_store_reserve_check(segd_store_t *s, uint64_t bytes, char *errstr, size_t n)
{
    segd_err_t err = segd_store_check_writable(s, errstr, n);
    return err ? err : segd_store_check_space(s, bytes, errstr, n);
}
