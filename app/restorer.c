/* Restore on assignment: the worker and its jobs (app/restorer.h). Loading
 * a unit is load/restore.h's segd_unit_load; this file decides when, how
 * often, and what the pipeline is told. */
#include "app/restorer.h"

#include <stdatomic.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "load/bulk.h"
#include "load/restore.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_REPLAY, JOB_CANCELLED } job_state_t;

typedef struct job {
    struct job *next;
    char *topic;
    int32_t partition;
    int32_t partitions; /* the topic's count when assigned */
    job_state_t state;
    _Atomic int cancel;   /* revoked: the load and its retries stop */
    int attempt;          /* failed attempts since begin */
    int64_t wait_ms;      /* the next backoff */
    int64_t not_before;   /* a QUEUED job after a failure: its retry's time
                             (segd_mono_ms); 0 = at once */
} job_t;

struct segd_restorer {
    segd_store_t *store;
    segd_restorer_opts_t o;
    char *from;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    job_t *jobs;                  /* guarded by lock */
    _Atomic int stop;             /* Set under the lock to end the worker. The
                                   * worker reads it between steps without the
                                   * lock, hence atomic. */
    segd_restorer_stats_t st;     /* guarded by lock */
};

void segd_restorer_opts_default(segd_restorer_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->fallback_replay = 1;
    o->retries = 5;
    o->retry_max_ms = 5000;
    o->memory_bytes = 256ull << 20;
    segd_dest_opts_default(&o->dest);
}

static job_t *find(segd_restorer_t *r, const char *topic, int32_t partition)
{
    for (job_t *j = r->jobs; j; j = j->next)
        if (j->partition == partition && !strcmp(j->topic, topic))
            return j;
    return NULL;
}

/* ---------- one attempt ---------- */

/* Loads the job's unit, or returns SEGD_ERR_NOTFOUND when there is none to
 * use. partitions is the job's count as the worker read it under the lock,
 * because begin may change it meanwhile.
 *
 * destroy stops a load by setting the job's cancel flag. The load's own
 * stop pointer is not used, because it is meant for a signal handler's
 * flag, which threads may not share. The cancel lock is the restorer's
 * lock. segd_restorer_cancel sets the flag under it, so once cancel has
 * returned, no offset of the partition is written. */
static segd_err_t restore_unit(segd_restorer_t *r, const job_t *j, int32_t partitions,
                               char *errstr, size_t n)
{
    segd_unit_load_t u = {.from = r->from, .topic = j->topic, .partition = j->partition,
                          .partitions = partitions, .partitioner = r->o.partitioner,
                          .dest = &r->o.dest, .memory_bytes = r->o.memory_bytes,
                          .cancel = &j->cancel, .cancel_lock = &r->lock};
    segd_unit_load_stats_t st;
    segd_err_t err = segd_unit_load(r->store, &u, &st, errstr, n);
    if (err)
        return err;
    segd_log_kv(r->o.log, SEGD_LOG_INFO, "restorer", "restored",
                "p=%" PRId32 " users=%" PRIu64 " segments=%" PRIu64 " bytes=%" PRIu64
                " in_s=%.1f topic=%s offset=%" PRId64,
                j->partition, st.users, st.segments, st.bytes, st.seconds, j->topic,
                st.next_offset);
    pthread_mutex_lock(&r->lock);
    r->st.restored++;
    r->st.users += st.users;
    r->st.segments += st.segments;
    r->st.bytes += st.bytes;
    pthread_mutex_unlock(&r->lock);
    return SEGD_OK;
}

/* ---------- the worker ---------- */

/* Sets the job's end state under the lock, where begin and cancel decide
 * too. A cancelled job ends as CANCELLED. A job that was cancelled and then
 * assigned again since the worker looked (begin cleared the flag) goes back
 * in the queue instead. Its partition waits for it, and "no restore" would
 * leave the partition waiting for ever. JOB_QUEUED with retry_at > 0 is a
 * failed attempt that is tried again at retry_at. */
static void finish_job(segd_restorer_t *r, job_t *j, job_state_t state, int64_t retry_at)
{
    pthread_mutex_lock(&r->lock);
    if (j->cancel)
        state = JOB_CANCELLED;
    else if (state == JOB_CANCELLED)
        state = JOB_QUEUED, retry_at = 0;
    j->state = state;
    j->not_before = state == JOB_QUEUED ? retry_at : 0;
    if (state == JOB_REPLAY)
        r->st.replayed++;
    pthread_mutex_unlock(&r->lock);
}

/* A failed attempt: logged, then the fallback or a retry after backoff.
 * The retry goes back in the queue rather than sleeping here, so that one
 * failing unit (restore.fallback = wait keeps it failing for as long as it
 * takes) never holds up the restores of the other partitions. */
static void job_failed(segd_restorer_t *r, job_t *j, const char *err)
{
    pthread_mutex_lock(&r->lock); /* begin resets attempt and wait_ms */
    r->st.failures++;
    int attempt = ++j->attempt;
    int64_t wait = j->wait_ms;
    j->wait_ms = wait * 2 > r->o.retry_max_ms ? r->o.retry_max_ms : wait * 2;
    pthread_mutex_unlock(&r->lock);
    /* Once this store's W has started, a replay from the beginning would
     * dead-letter every event older than its floor as too_late. That history
     * would be lost for good, and the next export would write the loss over
     * the good unit. Waiting loses nothing. */
    int w_started = segd_store_gc_watermark(r->store) > 0;
    int give_up = r->o.fallback_replay && attempt >= r->o.retries && !w_started;
    segd_log(r->o.log, SEGD_LOG_WARN, "restorer",
             "restore of %s [%" PRId32 "] failed (attempt %d): %s%s",
            j->topic, j->partition, attempt, err,
            give_up ? "; replaying it from input.offset.reset (restore.fallback = replay)"
            : w_started && r->o.fallback_replay && attempt >= r->o.retries
                ? "; partition paused, retrying: no replay fallback once the store's GC "
                  "watermark has started (older history would be refused as too_late)"
                : "; partition paused, retrying");
    if (give_up) {
        finish_job(r, j, JOB_REPLAY, 0);
        return;
    }
    int64_t at = segd_mono_ms() + wait;
    finish_job(r, j, JOB_QUEUED, at > 0 ? at : 1);
}

/* One attempt at the job's unit. */
static void run_job(segd_restorer_t *r, job_t *j, int32_t partitions)
{
    char err[512];
    if (j->cancel) {
        finish_job(r, j, JOB_CANCELLED, 0);
        return;
    }
    segd_err_t e = restore_unit(r, j, partitions, err, sizeof(err));
    if (!e) {
        finish_job(r, j, JOB_DONE, 0);
    } else if (e == SEGD_ERR_NOTFOUND) {
        segd_log(r->o.log, SEGD_LOG_INFO, "restorer",
                 "no snapshot unit for %s [%" PRId32 "] (%s): replaying it "
                 "from input.offset.reset", j->topic, j->partition, err);
        finish_job(r, j, JOB_REPLAY, 0);
    } else if (r->stop) {
        return; /* no offset was written, so the next assignment restores it */
    } else if (j->cancel) {
        finish_job(r, j, JOB_CANCELLED, 0);
    } else {
        job_failed(r, j, err);
    }
}

/* The queued job due first (fresh ones before retries), or NULL; *next_at
 * is the earliest retry time of those not due yet (0: none). Under lock. */
static job_t *next_job(segd_restorer_t *r, int64_t now, int64_t *next_at)
{
    job_t *due = NULL;
    *next_at = 0;
    for (job_t *j = r->jobs; j; j = j->next) {
        if (j->state != JOB_QUEUED)
            continue;
        if (j->not_before > now) {
            if (!*next_at || j->not_before < *next_at)
                *next_at = j->not_before;
        } else if (!due || j->not_before < due->not_before) {
            due = j;
        }
    }
    return due;
}

static void wait_until(segd_restorer_t *r, int64_t at_mono_ms)
{
    int64_t ms = at_mono_ms - segd_mono_ms();
    struct timespec until;
    segd_realtime_after(&until, ms < 1 ? 1 : ms);
    pthread_cond_timedwait(&r->wake, &r->lock, &until);
}

static void *worker(void *arg)
{
    segd_restorer_t *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        int64_t next_at;
        job_t *j = next_job(r, segd_mono_ms(), &next_at);
        if (!j) {
            if (next_at)
                wait_until(r, next_at);
            else
                pthread_cond_wait(&r->wake, &r->lock);
            continue;
        }
        j->state = JOB_RUNNING;
        int32_t partitions = j->partitions;
        pthread_mutex_unlock(&r->lock);
        run_job(r, j, partitions); /* j stays: jobs are freed only by destroy, after the join */
        pthread_mutex_lock(&r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---------- the pipeline's side ---------- */

int segd_restorer_begin(segd_restorer_t *r, const char *topic, int32_t partition,
                        int32_t partitions)
{
    pthread_mutex_lock(&r->lock);
    job_t *j = find(r, topic, partition);
    int rc = 0;
    if (j) {
        if (j->state == JOB_DONE || j->state == JOB_REPLAY || j->state == JOB_CANCELLED) {
            j->state = JOB_QUEUED; /* assigned again without an offset: anew */
            j->partitions = partitions;
            j->cancel = 0;
            j->attempt = 0;
            j->wait_ms = 100;
            j->not_before = 0;
        } else if (j->cancel) { /* revoked and assigned again while it ran: go on */
            j->cancel = 0;
            j->partitions = partitions;
            j->attempt = 0; /* its "restore stopped" failure is not the unit's */
            j->wait_ms = 100;
        }
    } else if ((j = calloc(1, sizeof(*j))) && (j->topic = strdup(topic))) {
        j->partition = partition;
        j->partitions = partitions;
        j->state = JOB_QUEUED;
        j->wait_ms = 100;
        j->next = r->jobs;
        r->jobs = j;
    } else {
        free(j);
        rc = -1;
    }
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

segd_restore_state_t segd_restorer_state(segd_restorer_t *r, const char *topic,
                                         int32_t partition)
{
    pthread_mutex_lock(&r->lock);
    job_t *j = find(r, topic, partition);
    segd_restore_state_t s = !j || j->state == JOB_CANCELLED ? SEGD_RESTORE_NONE
                             : j->state == JOB_DONE   ? SEGD_RESTORE_DONE
                             : j->state == JOB_REPLAY ? SEGD_RESTORE_REPLAY
                                                      : SEGD_RESTORE_RUNNING;
    pthread_mutex_unlock(&r->lock);
    return s;
}

void segd_restorer_cancel(segd_restorer_t *r, const char *topic, int32_t partition)
{
    pthread_mutex_lock(&r->lock);
    job_t *j = find(r, topic, partition);
    if (j && j->state == JOB_QUEUED)
        j->state = JOB_CANCELLED;
    else if (j && j->state == JOB_RUNNING)
        j->cancel = 1;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

void segd_restorer_get_stats(segd_restorer_t *r, segd_restorer_stats_t *st)
{
    pthread_mutex_lock(&r->lock);
    *st = r->st;
    pthread_mutex_unlock(&r->lock);
}

segd_err_t segd_restorer_new(segd_restorer_t **out, segd_store_t *store,
                             const segd_restorer_opts_t *o, char *errstr, size_t n)
{
    *out = NULL;
    if (!o->from || !*o->from)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "restore.from is empty");
    segd_restorer_t *r = calloc(1, sizeof(*r));
    if (!r || !(r->from = strdup(o->from))) {
        free(r);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    r->store = store;
    r->o = *o;
    size_t len = strlen(r->from);
    while (len > 1 && r->from[len - 1] == '/')
        r->from[--len] = 0;
    segd_bulk_remove_stale(store); /* left by a restore a crash ended */
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    if (pthread_create(&r->thread, NULL, worker, r)) {
        segd_restorer_destroy(r);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "restore: cannot start its thread");
    }
    r->started = 1;
    *out = r;
    return SEGD_OK;
}

void segd_restorer_destroy(segd_restorer_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    for (job_t *j = r->jobs; j; j = j->next)
        j->cancel = 1; /* a load under way stops (restore_unit) */
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    if (r->started)
        pthread_join(r->thread, NULL);
    while (r->jobs) {
        job_t *j = r->jobs;
        r->jobs = j->next;
        free(j->topic);
        free(j);
    }
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r->from);
    free(r);
}
