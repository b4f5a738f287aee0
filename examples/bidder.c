/* A bidder's use of libsegd-cache, built against the installed library only:
 *   cc bidder.c $(pkg-config --cflags --libs segd-cache)
 * Loads a snapshot directory (segd snapshot export --to DEST: DEST/<topic>),
 * then answers each user id given, as a bidder would per bid request: the
 * live segments expiring after --expiring-after S (default: any), one line
 * per user: "user known n id:expires_at ...".
 *
 *   bidder SNAPSHOT_DIR NOW_S [--expiring-after S] USER...
 * NOW_S 0 = the wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <segd/cache.h>

#define MAX_SEGMENTS 8192

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bidder SNAPSHOT_DIR NOW_S [--expiring-after S] USER...\n");
        return 2;
    }
    if (segd_cache_version() / 10000 != SEGD_CACHE_VERSION / 10000) {
        fprintf(stderr, "bidder: built for libsegd-cache %d, loaded %u\n", SEGD_CACHE_VERSION,
                segd_cache_version());
        return 1;
    }
    segd_cache_filter_t filter = {0};
    int first = 3;
    if (!strcmp(argv[3], "--expiring-after") && argc > 5) {
        filter.expiring_after = atoll(argv[4]);
        first = 5;
    }
    segd_cache_t *cache = NULL;
    uint64_t users = 0;
    int rc = segd_cache_new(&cache, atoll(argv[2]) * 1000);
    if (!rc)
        rc = segd_cache_load_snapshot(cache, argv[1], 2, &users);
    if (rc) {
        fprintf(stderr, "bidder: %s: %s\n", argv[1], segd_cache_strerror(rc));
        segd_cache_destroy(cache);
        return 1;
    }
    static segd_cache_segment_t seg[MAX_SEGMENTS];
    for (int i = first; i < argc && !rc; i++) {
        size_t n = 0;
        int known = 0;
        rc = segd_cache_lookup(cache, argv[i], strlen(argv[i]), &filter, seg, MAX_SEGMENTS,
                               &n, &known);
        if (rc) {
            fprintf(stderr, "bidder: %s: %s\n", argv[i], segd_cache_strerror(rc));
            break;
        }
        printf("%s %d %zu", argv[i], known, n);
        for (size_t k = 0; k < n; k++)
            printf(" %lld:%lld", (long long)seg[k].id, (long long)seg[k].expires_at);
        printf("\n");
    }
    segd_cache_stats_t st;
    segd_cache_stats(cache, &st);
    fprintf(stderr, "bidder: %llu users loaded, %llu held\n", (unsigned long long)users,
            (unsigned long long)st.users);
    segd_cache_destroy(cache);
    return rc ? 1 : 0;
}
