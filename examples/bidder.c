/* A bidder's use of libsegd-cache, built against the installed library only:
 *   cc bidder.c $(pkg-config --cflags --libs segd-cache)
 * Loads a snapshot directory (segd snapshot export --to DEST: DEST/<topic>),
 * then answers each user id given, as a bidder would per bid request: the
 * live segments expiring after --expiring-after S (default: any), one line
 * per user: "user known n id:expires_at ...".
 * Built with libsegd-tail instead, it also joins segd's change topic up to
 * its end before answering (a real bidder keeps polling on a thread):
 *   cc -DBIDDER_TAIL bidder.c $(pkg-config --cflags --libs segd-tail)
 *
 *   bidder SNAPSHOT_DIR NOW_S [--tail BROKERS TOPIC] [--expiring-after S] USER...
 * NOW_S 0 = the wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <segd/cache.h>
#ifdef BIDDER_TAIL
#include <segd/tail.h>
#endif

#define MAX_SEGMENTS 8192

#ifdef BIDDER_TAIL
/* Joins the change topic from the snapshot's positions to its end. */
static int catch_up(segd_cache_t *cache, const char *brokers, const char *topic)
{
    segd_cache_tail_opts_t o = {.brokers = brokers, .topic = topic};
    segd_cache_tail_t *tail = NULL;
    char why[512] = "";
    int rc = segd_cache_tail_new(&tail, cache, &o, why, sizeof(why));
    if (!rc)
        rc = segd_cache_tail_catch_up(tail, 30000);
    if (rc)
        fprintf(stderr, "bidder: tail %s: %s %s\n", topic, segd_cache_strerror(rc), why);
    segd_cache_tail_destroy(tail);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bidder SNAPSHOT_DIR NOW_S [--tail BROKERS TOPIC] [--expiring-after S] USER...\n");
        return 2;
    }
    if (segd_cache_version() / 10000 != SEGD_CACHE_VERSION / 10000) {
        fprintf(stderr, "bidder: built for libsegd-cache %d, loaded %u\n", SEGD_CACHE_VERSION,
                segd_cache_version());
        return 1;
    }
    segd_cache_filter_t filter = {0};
    int first = 3;
    const char *brokers = NULL, *topic = NULL;
    if (!strcmp(argv[first], "--tail") && argc > first + 3) {
        brokers = argv[first + 1];
        topic = argv[first + 2];
        first += 3;
    }
    if (!strcmp(argv[first], "--expiring-after") && argc > first + 2) {
        filter.expiring_after = atoll(argv[first + 1]);
        first += 2;
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
#ifdef BIDDER_TAIL
    if (brokers && catch_up(cache, brokers, topic)) {
        segd_cache_destroy(cache);
        return 1;
    }
#else
    if (brokers) {
        fprintf(stderr, "bidder: --tail %s %s needs a build with -DBIDDER_TAIL and segd-tail\n",
                brokers, topic);
        segd_cache_destroy(cache);
        return 2;
    }
#endif
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
