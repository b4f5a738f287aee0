/* The repair check shared by `segd replay` and `segd offsets set` (see
 * repair_check.h): a count-only replay of the range, the events below the
 * store's ingest floor tallied per partition, and the refusal that names
 * the floor and the exact repairs. */
#include "cli/repair_check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/args.h"

typedef struct tally_part {
    int32_t partition;
    uint64_t below;
    int64_t oldest, newest; /* ts_ms of the events below the floor */
} tally_part_t;

typedef struct tally {
    tally_part_t parts[SEGD_REPLAY_MAX_PARTITIONS];
    size_t n;
} tally_t;

static void on_below_floor(void *ctx, int32_t partition, int64_t ts_ms)
{
    tally_t *t = ctx;
    size_t i = 0;
    while (i < t->n && t->parts[i].partition != partition)
        i++;
    if (i == t->n) {
        if (t->n == SEGD_REPLAY_MAX_PARTITIONS)
            return;
        t->parts[t->n++] = (tally_part_t){partition, 0, ts_ms, ts_ms};
    }
    tally_part_t *p = &t->parts[i];
    p->below++;
    if (ts_ms < p->oldest)
        p->oldest = ts_ms;
    if (ts_ms > p->newest)
        p->newest = ts_ms;
}

static void report(const char *cmd, const char *topic, segd_store_t *s, const tally_t *t,
                   const segd_replay_stats_t *st)
{
    segd_policy_t *pol = segd_store_policy(s);
    fprintf(stderr, "segd %s: %" PRIu64 " of the %" PRIu64 " events in the range are below "
            "the store's ingest floor: they would be dead-lettered as too_late, not applied\n",
            cmd, st->dlq[SEGD_DLQ_TOO_LATE], st->events + st->dead);
    for (size_t i = 0; i < t->n; i++) {
        char floor[160];
        segd_policy_floor_explain(pol, segd_store_import_floor(s, topic, t->parts[i].partition),
                                  floor, sizeof(floor));
        fprintf(stderr, "  %s [%" PRId32 "]: %" PRIu64 " events with ts_ms %" PRId64 "..%"
                PRId64 ", below the floor %s\n", topic, t->parts[i].partition,
                t->parts[i].below, t->parts[i].oldest, t->parts[i].newest, floor);
    }
}

int segd_repair_check(const char *cmd, const segd_replay_opts_t *o, segd_store_t *s,
                      volatile sig_atomic_t *stop, int force)
{
    segd_policy_t *pol = segd_store_policy(s);
    if (!segd_policy_ts_floor(pol) && !segd_policy_import_floor(pol))
        return SEGD_EXIT_OK; /* no floor: the store takes history of any age */
    segd_replay_opts_t c = *o;
    tally_t *t = calloc(1, sizeof(*t));
    if (!t) {
        fprintf(stderr, "segd %s: out of memory\n", cmd);
        return SEGD_EXIT_FAIL;
    }
    c.count_only = 1;
    c.progress = NULL;
    c.below_floor = on_below_floor;
    c.below_floor_ctx = t;
    segd_replay_stats_t st;
    char err[512] = "";
    segd_err_t e = segd_replay_run(&c, s, stop, &st, err, sizeof(err));
    int rc = SEGD_EXIT_OK;
    if (e) {
        fprintf(stderr, "segd %s: cannot check the range against the ingest floor: %s\n", cmd,
                err);
        rc = e == SEGD_ERR_CONFIG ? SEGD_EXIT_USAGE : SEGD_EXIT_FAIL;
    } else if (!st.dlq[SEGD_DLQ_TOO_LATE]) {
        fprintf(stderr, "segd %s: checked %" PRIu64 " messages of the range: none below the "
                "store's ingest floor\n", cmd, st.messages);
    } else {
        report(cmd, o->cfg->topics[0], s, t, &st);
        fputs(SEGD_REPAIR_PATHS, stderr);
        if (force) {
            fprintf(stderr, "segd %s: --force: going on\n", cmd);
        } else {
            fprintf(stderr, "segd %s: refused, nothing applied (--force goes on anyway)\n",
                    cmd);
            rc = SEGD_EXIT_REFUSED;
        }
    }
    free(t);
    return rc;
}
