/* The revocation sweep; see sweep.h. */
#include "consumer/sweep.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

#define SLICE_MAX 4096      /* records examined per store scan */
#define URGENT_SLICE_MS 50  /* an owned partition waits: full speed, bounded per step */
#define RETRY_MS 1000       /* after a failed write */

typedef enum { P_IDLE, P_MARKED, P_CLEAN } pstate_t;

typedef struct part {
    char *topic;
    int32_t partition;
    int owned;
    int64_t away_since; /* monotonic ms: revoked, or the sweep's start */
    pstate_t state;     /* MARKED: offset gone, users may remain; CLEAN: swept */
    int in_pass;
} part_t;

typedef struct topic {
    char *name;
    int32_t count;
    size_t *idx; /* partition -> index in parts (SIZE_MAX: none), count entries */
} topic_t;

struct segd_sweep {
    segd_store_t *store;
    segd_sweep_opts_t o;
    part_t *parts;
    size_t nparts, cap;
    topic_t *topics;
    size_t ntopics;
    segd_batch_t *batch;
    int pass;             /* a pass over the store is under way */
    char *resume;         /* the last key examined by it */
    size_t resume_len, resume_cap;
    int resume_set;
    int64_t pass_t0;
    uint64_t pass_deleted, pass_examined;
    double tokens;
    int64_t last_ms;
    int64_t retry_at;
    int misrouted_logged;
    int assigned_once;    /* away clocks start at the group's first assignment */
    int64_t next_look;    /* no new pass is looked for before (once a second) */
    int broken;           /* segd_sweep_disable: nothing more is deleted */
    segd_sweep_stats_t st;
};

static topic_t *find_topic(const segd_sweep_t *sw, const char *name);

/* Notes parts[i] in its topic's index, if the topic's count is known. */
static void index_part(segd_sweep_t *sw, size_t i)
{
    topic_t *t = find_topic(sw, sw->parts[i].topic);
    if (t && t->idx && sw->parts[i].partition < t->count)
        t->idx[sw->parts[i].partition] = i;
}

static part_t *find_part(const segd_sweep_t *sw, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < sw->nparts; i++)
        if (sw->parts[i].partition == partition && !strcmp(sw->parts[i].topic, topic))
            return &sw->parts[i];
    return NULL;
}

static part_t *add_part(segd_sweep_t *sw, const char *topic, int32_t partition, int64_t now)
{
    part_t *p = find_part(sw, topic, partition);
    if (p)
        return p;
    if (sw->nparts == sw->cap) {
        size_t cap = sw->cap ? 2 * sw->cap : 64;
        part_t *np = realloc(sw->parts, cap * sizeof(*np));
        if (!np)
            return NULL;
        sw->parts = np;
        sw->cap = cap;
    }
    char *t = strdup(topic);
    if (!t)
        return NULL;
    p = &sw->parts[sw->nparts++];
    *p = (part_t){.topic = t, .partition = partition, .away_since = now, .state = P_IDLE};
    index_part(sw, sw->nparts - 1);
    return p;
}

static topic_t *find_topic(const segd_sweep_t *sw, const char *name)
{
    for (size_t i = 0; i < sw->ntopics; i++)
        if (!strcmp(sw->topics[i].name, name))
            return &sw->topics[i];
    return NULL;
}

/* ---------- construction ---------- */

typedef struct mark_ctx {
    segd_sweep_t *sw;
    int64_t now;
    int failed;
} mark_ctx_t;

static int load_mark(void *ctx, const char *topic, int32_t partition, int64_t since)
{
    (void)since;
    mark_ctx_t *mc = ctx;
    part_t *p = add_part(mc->sw, topic, partition, mc->now);
    if (!p) {
        mc->failed = 1;
        return 1;
    }
    p->state = P_MARKED;
    return 0;
}

segd_err_t segd_sweep_new(segd_sweep_t **out, segd_store_t *store, const segd_sweep_opts_t *o,
                          int64_t now_ms, char *errstr, size_t n)
{
    *out = NULL;
    segd_sweep_t *sw = calloc(1, sizeof(*sw));
    if (!sw)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    sw->store = store;
    sw->o = *o;
    if (sw->o.records_per_s < 1)
        sw->o.records_per_s = 1;
    sw->last_ms = now_ms;
    segd_store_view_t *v = NULL;
    mark_ctx_t mc = {sw, now_ms, 0};
    segd_err_t err = segd_batch_new(store, &sw->batch);
    if (!err)
        err = segd_store_view_open(store, &v, errstr, n);
    if (!err)
        err = segd_store_view_positions(v, "sweep", load_mark, &mc, errstr, n);
    segd_store_view_close(v);
    if (!err && mc.failed)
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (err) {
        segd_sweep_destroy(sw);
        return err;
    }
    *out = sw;
    return SEGD_OK;
}

void segd_sweep_destroy(segd_sweep_t *sw)
{
    if (!sw)
        return;
    for (size_t i = 0; i < sw->nparts; i++)
        free(sw->parts[i].topic);
    for (size_t i = 0; i < sw->ntopics; i++) {
        free(sw->topics[i].name);
        free(sw->topics[i].idx);
    }
    free(sw->parts);
    free(sw->topics);
    free(sw->resume);
    segd_batch_destroy(sw->batch);
    free(sw);
}

/* ---------- what the pipeline tells it ---------- */

/* Users move between partitions when the count changes: a pass placing
 * them with the old count is abandoned (its marks stay for the next). */
static void abandon_pass(segd_sweep_t *sw)
{
    sw->pass = 0;
    sw->resume_set = 0;
    for (size_t i = 0; i < sw->nparts; i++)
        sw->parts[i].in_pass = 0;
}

segd_err_t segd_sweep_topic(segd_sweep_t *sw, const char *topic, int32_t count, int64_t now_ms)
{
    topic_t *t = find_topic(sw, topic);
    if (t && t->count == count)
        return SEGD_OK;
    if (!t) {
        topic_t *nt = realloc(sw->topics, (sw->ntopics + 1) * sizeof(*nt));
        if (!nt)
            return SEGD_ERR_NOMEM;
        sw->topics = nt;
        t = &sw->topics[sw->ntopics];
        *t = (topic_t){.name = strdup(topic)};
        if (!t->name)
            return SEGD_ERR_NOMEM;
        sw->ntopics++;
    } else if (sw->pass) {
        segd_log(sw->o.log, SEGD_LOG_INFO, "sweep",
                 "%s now has %" PRId32 " partitions (was %" PRId32
                        "): the pass under way starts again", topic, count, t->count);
        abandon_pass(sw);
    }
    size_t *idx = malloc((size_t)(count > 0 ? count : 1) * sizeof(*idx));
    if (!idx) {
        segd_sweep_disable(sw, "out of memory");
        return SEGD_ERR_NOMEM;
    }
    free(t->idx);
    t->idx = idx;
    t->count = count;
    for (int32_t p = 0; p < count; p++)
        idx[p] = SIZE_MAX;
    for (size_t i = 0; i < sw->nparts; i++)
        index_part(sw, i);
    for (int32_t p = 0; p < count; p++)
        if (!add_part(sw, topic, p, now_ms)) {
            segd_sweep_disable(sw, "out of memory");
            return SEGD_ERR_NOMEM;
        }
    return SEGD_OK;
}

void segd_sweep_owned(segd_sweep_t *sw, const char *topic, int32_t partition, int owned,
                      int64_t now_ms)
{
    part_t *p = add_part(sw, topic, partition, now_ms);
    if (!p) { /* an owned partition it cannot track could be swept */
        segd_sweep_disable(sw, "out of memory");
        return;
    }
    if (owned && !sw->assigned_once) {
        /* not joined until now (a broker outage at start, say) is not "away" */
        sw->assigned_once = 1;
        for (size_t i = 0; i < sw->nparts; i++)
            sw->parts[i].away_since = now_ms;
    }
    p->owned = owned;
    if (owned && p->state == P_CLEAN)
        p->state = P_IDLE;
    if (!owned)
        p->away_since = now_ms;
}

int segd_sweep_purging(const segd_sweep_t *sw, const char *topic, int32_t partition)
{
    const part_t *p = find_part(sw, topic, partition);
    /* a sweep that may not delete (misrouted or unchecked events, or off
     * for this run) would keep the partition paused for ever: it resumes
     * over its remaining users instead */
    return p && p->state == P_MARKED && !sw->st.disabled && !sw->broken;
}

void segd_sweep_get_stats(const segd_sweep_t *sw, segd_sweep_stats_t *st) { *st = sw->st; }

void segd_sweep_disable(segd_sweep_t *sw, const char *why)
{
    if (!sw->broken)
        segd_log(sw->o.log, SEGD_LOG_WARN, "sweep", "off for this run: %s", why);
    sw->broken = 1;
    sw->st.disabled = 1;
    abandon_pass(sw);
}

int segd_sweep_active(const segd_sweep_t *sw)
{
    if (sw->broken)
        return 0;
    if (sw->o.after_ms > 0)
        return 1;
    for (size_t i = 0; i < sw->nparts; i++)
        if (sw->parts[i].state == P_MARKED)
            return 1;
    return 0;
}

/* ---------- a pass ---------- */

static void list_parts(const segd_sweep_t *sw, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sw->nparts && len + 32 < cap; i++) {
        const part_t *p = &sw->parts[i];
        if (!p->in_pass)
            continue;
        int w = snprintf(buf + len, cap - len, "%s%s [%" PRId32 "]", len ? ", " : "",
                         p->topic, p->partition);
        len += w > 0 ? (size_t)w : 0;
    }
}

/* Whether the store's own history says users are keyed by partition. */
static int sweep_allowed(segd_sweep_t *sw)
{
    int64_t misrouted = 0, unchecked = 0;
    char err[256];
    if (segd_store_counter_get(sw->store, SEGD_COUNTER_MISROUTED, &misrouted, err,
                               sizeof(err)) != SEGD_OK ||
        segd_store_counter_get(sw->store, SEGD_COUNTER_UNCHECKED, &unchecked, err,
                               sizeof(err)) != SEGD_OK)
        return 0;
    if ((misrouted > 0 || unchecked > 0) && !sw->misrouted_logged++)
        segd_log(sw->o.log, SEGD_LOG_INFO, "sweep",
                 "off: this store applied %" PRId64 " misrouted events "
                        "(producers not keyed by user id) and %" PRId64 " it could not check "
                        "(partition count unknown then), so a user of a partition it does "
                        "not own may hold data of one it owns; revoked partitions keep "
                        "their users", misrouted, unchecked);
    sw->st.disabled = misrouted > 0 || unchecked > 0;
    return !sw->st.disabled;
}

/* clean: the store's counters allow deleting (sweep_allowed). A marked
 * partition needs it too: an event misrouted since it was marked may have
 * put an owned partition's data in one of its users. */
static int candidate(const segd_sweep_t *sw, const part_t *p, int allowed, int clean,
                     int64_t now)
{
    const topic_t *t = find_topic(sw, p->topic);
    if (!t || p->partition >= t->count)
        return 0;
    if (sw->o.restoring && sw->o.restoring(sw->o.restoring_ctx, p->topic, p->partition))
        return 0; /* a load (maybe cancelled) may still write it */
    if (p->state == P_MARKED)
        return clean;
    return allowed && sw->o.after_ms > 0 && p->state == P_IDLE && !p->owned &&
           now - p->away_since >= sw->o.after_ms;
}

/* Every input topic's count is known, and no owned partition lies past
 * its topic's count (a count gone stale: users would be placed wrong). */
static int topics_ready(const segd_sweep_t *sw)
{
    if (sw->ntopics < sw->o.n_topics)
        return 0;
    for (size_t i = 0; i < sw->ntopics; i++)
        if (sw->topics[i].count <= 0)
            return 0;
    for (size_t i = 0; i < sw->nparts; i++) {
        const topic_t *t = find_topic(sw, sw->parts[i].topic);
        if (sw->parts[i].owned && (!t || sw->parts[i].partition >= t->count))
            return 0;
    }
    return 1;
}

static int owns_any(const segd_sweep_t *sw)
{
    for (size_t i = 0; i < sw->nparts; i++)
        if (sw->parts[i].owned)
            return 1;
    return 0;
}

/* Picks the partitions of a new pass and, in one synced write, deletes the
 * offsets of those not marked yet and marks them. Returns 1 when a pass
 * began. A member that owns nothing now (out of the group in a broker
 * outage, or a spare) starts none: its store stays a warm standby. */
static int start_pass(segd_sweep_t *sw, int64_t now, char *errstr, size_t n, segd_err_t *err)
{
    if (now < sw->next_look || sw->broken || !topics_ready(sw))
        return 0;
    sw->next_look = now + 1000;
    int clean = sweep_allowed(sw), allowed = clean && owns_any(sw), any = 0;
    segd_batch_clear(sw->batch);
    for (size_t i = 0; i < sw->nparts; i++) {
        part_t *p = &sw->parts[i];
        if (!candidate(sw, p, allowed, clean, now))
            continue;
        any = 1;
        /* a marked partition's offset goes again: `segd offsets set --force`
         * may have put one back over its half-deleted users */
        segd_batch_delete_offset(sw->batch, p->topic, p->partition);
        if (p->state == P_IDLE)
            segd_batch_set_sweep_mark(sw->batch, p->topic, p->partition, segd_wall_ms());
    }
    if (!any)
        return 0;
    if (segd_batch_count(sw->batch) &&
        (*err = segd_store_write_sync(sw->store, sw->batch, errstr, n)) != SEGD_OK) {
        segd_batch_clear(sw->batch);
        return 0;
    }
    segd_batch_clear(sw->batch);
    for (size_t i = 0; i < sw->nparts; i++) {
        part_t *p = &sw->parts[i];
        if (candidate(sw, p, allowed, clean, now)) {
            p->state = P_MARKED;
            p->in_pass = 1;
        }
    }
    sw->pass = 1;
    sw->resume_set = 0;
    sw->pass_t0 = now;
    sw->pass_deleted = sw->pass_examined = 0;
    sw->st.passes++;
    char list[1024];
    list_parts(sw, list, sizeof(list));
    segd_log(sw->o.log, SEGD_LOG_INFO, "sweep",
             "deleting the users of %s (revoked for %.1f s or more, or "
                    "left half swept by an earlier pass; their offsets are gone: they restore "
                    "if assigned again), %" PRId64 " records/s",
            list, (double)sw->o.after_ms / 1000.0, sw->o.records_per_s);
    return 1;
}

/* A user goes when, in every input topic, its partition is in the pass. */
static int doomed(const segd_sweep_t *sw, const char *user, size_t len)
{
    int any = 0;
    for (size_t i = 0; i < sw->ntopics; i++) {
        const topic_t *t = &sw->topics[i];
        if (t->count <= 0)
            continue;
        int32_t q = segd_partition_of(sw->o.partitioner, user, len, t->count);
        size_t i = t->idx ? t->idx[q] : SIZE_MAX;
        if (i == SIZE_MAX || !sw->parts[i].in_pass)
            return 0;
        any = 1;
    }
    return any;
}

typedef struct slice {
    segd_sweep_t *sw;
    uint64_t examined, deleted;
} slice_t;

static int examine(void *ctx, const char *user, size_t len)
{
    slice_t *sl = ctx;
    sl->examined++;
    if (doomed(sl->sw, user, len)) {
        segd_batch_delete_user(sl->sw->batch, user, len);
        sl->deleted++;
    }
    segd_sweep_t *sw = sl->sw;
    if (len > sw->resume_cap) {
        char *r = realloc(sw->resume, len);
        if (!r)
            return 1; /* this key is examined again next time */
        sw->resume = r;
        sw->resume_cap = len;
    }
    memcpy(sw->resume, user, len);
    sw->resume_len = len;
    return 0;
}

static int urgent(const segd_sweep_t *sw)
{
    for (size_t i = 0; i < sw->nparts; i++)
        if (sw->parts[i].in_pass && sw->parts[i].owned)
            return 1;
    return 0;
}

/* The pass covered the whole store: its marks go, in one synced write. */
static segd_err_t finish_pass(segd_sweep_t *sw, int64_t now, char *errstr, size_t n)
{
    segd_batch_clear(sw->batch);
    for (size_t i = 0; i < sw->nparts; i++)
        if (sw->parts[i].in_pass)
            segd_batch_clear_sweep_mark(sw->batch, sw->parts[i].topic, sw->parts[i].partition);
    segd_err_t err = segd_store_write_sync(sw->store, sw->batch, errstr, n);
    segd_batch_clear(sw->batch);
    if (err)
        return err;
    char list[1024];
    list_parts(sw, list, sizeof(list));
    segd_log(sw->o.log, SEGD_LOG_INFO, "sweep", "swept %s: %" PRIu64 " users deleted, %" PRIu64
                    " records examined in %.1f s",
            list, sw->pass_deleted, sw->pass_examined, (double)(now - sw->pass_t0) / 1000.0);
    for (size_t i = 0; i < sw->nparts; i++) {
        part_t *p = &sw->parts[i];
        if (!p->in_pass)
            continue;
        p->in_pass = 0;
        p->state = p->owned ? P_IDLE : P_CLEAN;
        sw->st.partitions_swept++;
    }
    sw->pass = 0;
    sw->resume_set = 0;
    return SEGD_OK;
}

/* One scan of up to max records; *end when the store's last key was seen. */
static segd_err_t slice(segd_sweep_t *sw, size_t max, int *end, char *errstr, size_t n)
{
    slice_t sl = {.sw = sw};
    char *from = NULL;
    size_t from_len = sw->resume_len;
    if (sw->resume_set && !(from = malloc(from_len ? from_len : 1)))
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (from)
        memcpy(from, sw->resume, from_len);
    segd_batch_clear(sw->batch);
    segd_err_t err = segd_store_scan_users(sw->store, from, from_len, max, examine, &sl, end,
                                           errstr, n);
    if (!err && segd_batch_count(sw->batch))
        err = segd_store_write(sw->store, sw->batch, errstr, n);
    segd_batch_clear(sw->batch);
    if (err) { /* redone from where this slice began */
        if (from)
            memcpy(sw->resume, from, from_len);
        sw->resume_len = from_len;
        *end = 0;
    } else {
        sw->resume_set = sw->resume_set || sl.examined > 0;
        sw->pass_examined += sl.examined;
        sw->pass_deleted += sl.deleted;
        sw->st.records_examined += sl.examined;
        sw->st.users_deleted += sl.deleted;
    }
    free(from);
    return err;
}

segd_err_t segd_sweep_step(segd_sweep_t *sw, int64_t now, char *errstr, size_t n)
{
    if (now < sw->retry_at)
        return SEGD_OK;
    double rate = (double)sw->o.records_per_s;
    sw->tokens += (double)(now - sw->last_ms) * rate / 1000.0;
    if (sw->tokens > rate)
        sw->tokens = rate; /* at most a second's worth at once */
    sw->last_ms = now;
    segd_err_t err = SEGD_OK;
    if (sw->broken)
        return SEGD_OK;
    if (sw->pass && !topics_ready(sw)) {
        segd_log(sw->o.log, SEGD_LOG_INFO, "sweep",
                 "an input topic's partition count is unknown or stale: "
                        "the pass under way starts again once it is known");
        abandon_pass(sw);
    }
    /* checked before every step of a pass, not only at its start: the
     * pipeline applies events between steps, and one misrouted meanwhile
     * may sit in a user this pass would delete (the marks stay) */
    if (sw->pass && !sweep_allowed(sw))
        abandon_pass(sw);
    if (!sw->pass && !start_pass(sw, now, errstr, n, &err)) {
        if (err)
            sw->retry_at = now + RETRY_MS;
        return err;
    }
    int end = 0;
    int64_t t0 = segd_mono_ms();
    while (!err && !end) {
        int fast = urgent(sw);
        size_t max = SLICE_MAX;
        if (!fast && sw->tokens < (double)max)
            max = sw->tokens >= 1 ? (size_t)sw->tokens : 0;
        if (!max || (fast && segd_mono_ms() - t0 >= URGENT_SLICE_MS))
            break;
        uint64_t before = sw->st.records_examined;
        err = slice(sw, max, &end, errstr, n);
        if (!fast) { /* an urgent purge is not charged to the rate */
            sw->tokens -= (double)(sw->st.records_examined - before);
            break;
        }
    }
    if (!err && end)
        err = finish_pass(sw, now, errstr, n);
    if (err)
        sw->retry_at = now + RETRY_MS;
    return err;
}
