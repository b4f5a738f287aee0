/* The swap half of the rebuild path; see rebuild.h. */
#include "app/rebuild.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void segd_rebuild_tmp_path(const char *db, char *out, size_t n)
{
    snprintf(out, n, "%s.rebuild.tmp", db);
}

void segd_rebuild_done_path(const char *db, char *out, size_t n)
{
    snprintf(out, n, "%s.rebuilt", db);
}

segd_err_t segd_rebuild_swap(const char *db, segd_log_t *log, int *swapped, char *errstr,
                             size_t n)
{
    char done[4096], old[4096];
    struct stat st;
    *swapped = 0;
    segd_rebuild_done_path(db, done, sizeof(done));
    if (stat(done, &st) || !S_ISDIR(st.st_mode))
        return SEGD_OK;
    snprintf(old, sizeof(old), "%s.replaced-%lld", db, (long long)time(NULL));
    if (stat(db, &st) == 0 && rename(db, old))
        return segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: rename %s to %s: %s", db, old,
                         strerror(errno));
    if (rename(done, db))
        return segd_errf(SEGD_ERR_IO, errstr, n, "rebuild swap: rename %s to %s: %s (the old "
                         "store is at %s)", done, db, strerror(errno), old);
    if (log)
        segd_log_kv(log, SEGD_LOG_INFO, "store", "rebuilt store swapped in",
                    "db=%s rebuilt=%s replaced=%s", db, done, old);
    else
        fprintf(stderr, "rebuilt store %s swapped in at %s; the old one is %s\n", done, db, old);
    *swapped = 1;
    return SEGD_OK;
}
