/* Reading a whole snapshot: find the topology, read and check each unit
 * (snapread/unit.c) on one or more threads, fold the units' manifests; see
 * snapshot.h. Each thread reads its units through one destination handle of
 * its own, opened at DEST/<topic>. */
#define _GNU_SOURCE
#include "snapread/snapshot.h"

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* ---------- topology ---------- */

static segd_err_t fetch_topology(const char *url, const segd_dest_opts_t *dopts,
                                 segd_topology_t *t, char *errstr, size_t n)
{
    segd_dest_t *d = NULL;
    segd_err_t err = segd_dest_open(&d, url, dopts, errstr, n);
    if (!err)
        err = segd_snapread_topology(d, t, errstr, n);
    segd_dest_close(d);
    return err;
}

/* A local SRC = DEST: its one subdirectory holding a topology.json. */
static segd_err_t find_topic_dir(const char *src, char *topic_url, size_t cap, char *errstr,
                                 size_t n)
{
    DIR *d = opendir(src);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        char path[4400];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/%s", src, e->d_name, SEGD_TOPOLOGY_NAME);
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (found++) {
            closedir(d);
            return segd_errf(SEGD_ERR_INVALID, errstr, n,
                             "%s holds snapshots of several topics: name one (%s/<topic>)", src,
                             src);
        }
        segd_dest_join(topic_url, cap, src, e->d_name);
    }
    if (d)
        closedir(d);
    return found ? SEGD_OK : SEGD_ERR_NOTFOUND;
}

segd_err_t segd_snapshot_topology(const char *src, const segd_dest_opts_t *dopts,
                                  char *topic_url, size_t cap, segd_topology_t *t,
                                  char *errstr, size_t n)
{
    snprintf(topic_url, cap, "%s", src);
    segd_err_t err = fetch_topology(src, dopts, t, errstr, n);
    if (err != SEGD_ERR_NOTFOUND || segd_dest_is_remote(src))
        goto out;
    err = find_topic_dir(src, topic_url, cap, errstr, n);
    if (!err)
        err = fetch_topology(topic_url, dopts, t, errstr, n);
out:
    if (err == SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s: no %s here nor in a topic directory under it (no "
                  "snapshot, or one being written)", src, SEGD_TOPOLOGY_NAME);
    return err;
}

/* ---------- every unit ---------- */

typedef struct reader {
    const segd_snapshot_read_opts_t *o;
    const segd_dest_opts_t *dopts;
    char topic_url[4200];
    segd_topology_t t;
    segd_snapshot_cb cb;
    void *ctx;
    segd_manifest_t *units;   /* per partition */
    segd_err_t *errs;         /* per partition */
    char (*msgs)[512];        /* per partition */
    _Atomic int32_t next;
    _Atomic int failed;
    pthread_mutex_t mu;       /* serialises on_unit */
} reader_t;

static void report(reader_t *r, int32_t p)
{
    if (!r->o || !r->o->on_unit)
        return;
    segd_unit_report_t rep = {p, r->errs[p] ? NULL : &r->units[p], r->errs[p], r->msgs[p]};
    pthread_mutex_lock(&r->mu);
    r->o->on_unit(r->o->unit_ctx, &rep);
    pthread_mutex_unlock(&r->mu);
}

/* One thread's share: units taken one at a time, all read through the one
 * handle this thread opened. A handle that did not open fails each unit the
 * thread takes, so that every unit still has its own outcome. */
static void *read_units(void *arg)
{
    reader_t *r = arg;
    segd_unit_read_opts_t uo = {.on_profile = r->cb, .ctx = r->ctx,
                                .on_discard = r->o ? r->o->on_discard : NULL,
                                .on_member = r->o ? r->o->on_member : NULL,
                                .member_ctx = r->o ? r->o->member_ctx : NULL};
    char open_msg[512];
    segd_dest_t *d = NULL;
    segd_err_t open_err = segd_dest_open(&d, r->topic_url, r->dopts, open_msg, sizeof(open_msg));
    int keep_going = r->o && r->o->keep_going;
    for (;;) {
        int32_t p = atomic_fetch_add(&r->next, 1);
        if (p >= r->t.partitions || (!keep_going && atomic_load(&r->failed)))
            break;
        if (open_err) {
            r->errs[p] = open_err;
            snprintf(r->msgs[p], sizeof(r->msgs[p]), "%s", open_msg);
        } else {
            r->errs[p] = segd_snapread_unit(d, &r->t, p, &uo, &r->units[p], r->msgs[p],
                                            sizeof(r->msgs[p]));
        }
        if (r->errs[p])
            atomic_store(&r->failed, 1);
        report(r, p);
    }
    segd_dest_close(d);
    return NULL;
}

static void run_threads(reader_t *r)
{
    uint32_t threads = r->o && r->o->threads > 1 ? r->o->threads : 1;
    if (threads > (uint32_t)r->t.partitions)
        threads = (uint32_t)r->t.partitions;
    pthread_t *tid = calloc(threads, sizeof(*tid));
    uint32_t started = 1;
    for (; tid && started < threads; started++)
        if (pthread_create(&tid[started], NULL, read_units, r))
            break;
    read_units(r);
    for (uint32_t i = 1; tid && i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
}

/* The first failed unit names the error; the loaded ones fold into m. */
static segd_err_t fold_units(reader_t *r, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_err_t first = SEGD_OK;
    size_t bad = 0;
    for (int32_t p = 0; p < r->t.partitions; p++) {
        int read = p < atomic_load(&r->next);
        if (read && !r->errs[p] && r->units[p].units) {
            segd_err_t err = segd_manifest_fold(m, &r->units[p], r->msgs[p], sizeof(r->msgs[p]));
            if (err)
                r->errs[p] = err;
        }
        if (read && r->errs[p] && !bad++)
            first = segd_errf(r->errs[p], errstr, n, "%s unit p-%05d: %s", r->t.topic, (int)p,
                              r->msgs[p]);
        segd_manifest_free(&r->units[p]);
    }
    if (bad > 1) {
        size_t len = strlen(errstr);
        snprintf(errstr + len, n > len ? n - len : 0, " (and %zu more units)", bad - 1);
    }
    return first;
}

segd_err_t segd_snapshot_read(const char *src_url, const segd_snapshot_read_opts_t *o,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    segd_manifest_init(m);
    reader_t r = {.o = o, .dopts = o ? o->dest : NULL, .cb = cb, .ctx = ctx};
    segd_err_t err = segd_snapshot_topology(src_url, r.dopts, r.topic_url, sizeof(r.topic_url),
                                            &r.t, errstr, n);
    if (err)
        return err;
    size_t np = (size_t)r.t.partitions;
    r.units = calloc(np, sizeof(*r.units));
    r.errs = calloc(np, sizeof(*r.errs));
    r.msgs = calloc(np, sizeof(*r.msgs));
    if (!r.units || !r.errs || !r.msgs) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    } else {
        pthread_mutex_init(&r.mu, NULL);
        run_threads(&r);
        pthread_mutex_destroy(&r.mu);
        err = fold_units(&r, m, errstr, n);
    }
    free(r.units);
    free(r.errs);
    free(r.msgs);
    return err;
}
