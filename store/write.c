/* The one path every write of the store takes, and what it guards. A write
 * is refused once an earlier one has failed (the store is then broken until
 * a restart), and it waits while the disk holds less than store.min.free.mb.
 * The store's other modules write only through segd_store_write_wb and
 * segd_store_put_meta; sst.c asks the same questions before an ingestion
 * through segd_store_check_writable, segd_store_check_space and
 * segd_store_probe_write. */
#include <inttypes.h>
#include <string.h>
#include <sys/statvfs.h>

#include "store/store.h"
#include "store/store_impl.h"
#include "store/store_int.h"

/* Free bytes under the store; 0 when unknown (nothing is then checked). */
static int disk_avail(segd_store_t *s, uint64_t *avail)
{
    if (!s->min_free_bytes)
        return 0;
    if (s->disk_avail)
        return s->disk_avail(s->disk_avail_ctx, s->path, avail) == 0;
    struct statvfs fs;
    if (statvfs(s->path, &fs))
        return 0;
    *avail = (uint64_t)fs.f_bavail * fs.f_frsize;
    return 1;
}

/* Writes wait while the disk is nearly full. RocksDB 7.8 cannot be trusted
 * after a failed WAL append (write_failed says why), so the store stops
 * short of one. */
static segd_err_t check_space(segd_store_t *s, char *errstr, size_t n)
{
    uint64_t avail;
    if (!disk_avail(s, &avail) || avail >= s->min_free_bytes)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_IO, errstr, n,
                     "disk nearly full: %" PRIu64 " MiB free under %s, writes wait for %" PRIu64
                     " MiB (store.min.free.mb)",
                     avail >> 20, s->path, s->min_free_bytes >> 20);
}

/* After a failed WAL append, RocksDB 7.8's log writer asserts on any later
 * use, such as the next write or the flush at close. Debian's build keeps
 * assertions, so the process would abort. The store therefore refuses every
 * later write with SEGD_ERR_ABORTED, which only a restart clears, and close
 * leaves the DB to the process exit. Nothing acknowledged is lost, because
 * RocksDB recovers every complete WAL record at the next open. */
static segd_err_t write_failed(segd_store_t *s, char *rerr, char *errstr, size_t n)
{
    /* Background flushes would reuse the failed log writer too. */
    if (!atomic_exchange(&s->broken, 1))
        rocksdb_cancel_all_background_work(s->db, 1);
    return segd_store_rocks_err(rerr, SEGD_ERR_ABORTED, errstr, n,
                                "write failed; store stopped (restart segd once the cause is "
                                "fixed)");
}

static segd_err_t stopped(char *errstr, size_t n)
{
    return segd_errf(SEGD_ERR_ABORTED, errstr, n,
                     "store stopped after a failed write (restart segd)");
}

/* Asks for extra bytes on top of the reserve: a bulk load asks for the size
 * of its SST files. */
segd_err_t segd_store_check_space(segd_store_t *s, uint64_t extra, char *errstr, size_t n)
{
    uint64_t avail;
    if (!disk_avail(s, &avail) || avail >= s->min_free_bytes + extra)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_IO, errstr, n,
                     "disk nearly full: %" PRIu64 " MiB free under %s, the load needs %" PRIu64
                     " MiB above the %" PRIu64 " MiB reserve (store.min.free.mb)",
                     avail >> 20, s->path, (extra + (1 << 20) - 1) >> 20,
                     s->min_free_bytes >> 20);
}

/* Every write of the store goes through here. It is refused once the store
 * is broken and waits while the disk is nearly full. A RocksDB failure
 * breaks the store, whatever was being written (write_failed). */
segd_err_t segd_store_write_wb(segd_store_t *s, const rocksdb_writeoptions_t *wo,
                               rocksdb_writebatch_t *wb, int reserve, char *errstr, size_t n)
{
    if (atomic_load(&s->broken))
        return stopped(errstr, n);
    segd_err_t err = reserve ? check_space(s, errstr, n) : SEGD_OK;
    if (err)
        return err;
    char *rerr = NULL;
    rocksdb_write(s->db, wo, wb, &rerr);
    return rerr ? write_failed(s, rerr, errstr, n) : SEGD_OK;
}

/* reserve says whether the write waits for store.min.free.mb. Bulk data
 * does. The few bytes of meta that start-up or a compaction check needs do
 * not, so they still go through on a nearly full disk. */
segd_err_t segd_store_put_meta(segd_store_t *s, const rocksdb_writeoptions_t *wo,
                               const char *key, const void *val, size_t vlen, int reserve,
                               char *errstr, size_t n)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put_cf(wb, s->cf[CF_META], key, strlen(key), val, vlen);
    segd_err_t err = segd_store_write_wb(s, wo, wb, reserve, errstr, n);
    rocksdb_writebatch_destroy(wb);
    return err;
}

segd_err_t segd_store_check_writable(segd_store_t *s, char *errstr, size_t n)
{
    if (s->read_only)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "store opened read-only");
    return atomic_load(&s->broken) ? stopped(errstr, n) : SEGD_OK;
}

segd_err_t segd_store_writable(segd_store_t *s, char *errstr, size_t n)
{
    segd_err_t err = segd_store_check_writable(s, errstr, n);
    return err ? err : check_space(s, errstr, n);
}

segd_err_t segd_store_probe_write(segd_store_t *s, char *errstr, size_t n)
{
    return segd_store_put_meta(s, s->wopts, "write-probe", "", 0, 0, errstr, n);
}
