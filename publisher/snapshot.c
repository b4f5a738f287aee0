/* Snapshot export; see snapshot.h. One key-order scan of one RocksDB view
 * routes each user to its unit's writer (unit files are written side by
 * side, so the store is read once and every unit comes from the same view).
 * For a directory destination a unit's file is written in place under a
 * temporary name and renamed; for remote ones files are staged in a
 * temporary directory and uploaded. Units fail and roll back one by one. */
#define _GNU_SOURCE
#include "publisher/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "publisher/snapshot_plan.h"
#include "store/identity.h"
#include "wire/member.h"
#include "wire/avro_file.h"
#include "wire/snap_native.h"
#include "wire/topology.h"

void segd_snapshot_opts_default(segd_snapshot_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->buckets = SEGD_DEFAULT_BUCKETS;
    o->partitioner = SEGD_PARTITIONER_MURMUR2;
    o->codec = segd_snapshot_default_codec(SEGD_SNAPFMT_AVRO);
    o->level = 1;
    o->threads = 2;
    o->changes_topic = "segments.changes";
    o->links_topic = "segments.links";
    o->format = SEGD_SNAPFMT_AVRO;
    o->native_copy = 1;
    segd_dest_opts_default(&o->dest);
}

segd_ocf_codec_t segd_snapshot_default_codec(segd_snapfmt_t format)
{
    return format == SEGD_SNAPFMT_NATIVE ? SEGD_OCF_NULL : SEGD_OCF_DEFLATE;
}


/* ---------- the view's metadata ---------- */

static segd_err_t collect_meta(segd_store_view_t *v, segd_manifest_t *m, char *errstr,
                               size_t n)
{
    segd_err_t err = segd_store_view_positions(v, "offset", segd_manifest_add_input, m, errstr, n);
    if (!err && m->changes_topic)
        err = segd_store_view_positions(v, "changes", segd_manifest_add_change, m, errstr, n);
    if (!err)
        err = segd_store_view_retirements(v, segd_manifest_add_retirement, m, errstr, n);
    return err;
}

/* ---------- units ---------- */

typedef struct unit {
    int32_t partition;
    char url[4200];         /* DEST/<topic>/p-PPPPP */
    char staged[4400];      /* where its file is written */
    char name[64];          /* its file's final name */
    int64_t gen;            /* in that name, and the manifest's created_at_ms */
    segd_dest_t *d;
    int lock_fd;            /* the unit directory's export lock; -1 = none */
    segd_manifest_t old;    /* the manifest it replaces (empty if none) */
    segd_manifest_t m;      /* the new one */
    segd_ocf_writer_t *w;
    segd_ocf_writer_t *mw;  /* its identity members file (DESIGN §10.6); NULL = none */
    char mname[64];
    char mstaged[4400];
    uint64_t segments;
    int64_t import_floor;   /* its partition's restored W (store.h), read after the scan */
    segd_err_t err;         /* set: the unit failed (errmsg says why) */
    char errmsg[512];
    int published, landed;  /* file at the destination; manifest too */
} unit_t;

typedef struct exporter {
    const segd_snapshot_opts_t *o;
    segd_store_t *store;
    segd_snapshot_plan_t plan;
    segd_manifest_t base;   /* the view's offsets, positions, retirements */
    unit_t *u;
    int32_t *slot;          /* partition -> index in u, -1 = not exported */
    char topic_url[4200];
    char staging[4096];     /* remote destinations: the staging directory */
    int64_t gen;            /* in every file name: exports never share files */
    int64_t identity_epoch_ms; /* the view's (DESIGN §10.6), for the manifests */
    double last_progress;
    _Atomic uint64_t records, entries;
} exporter_t;

/* One scanning thread: it writes the units i with i % lanes == lane. Every
 * lane reads the whole view (a scan costs ~1/12 of the encoding and
 * compression it feeds), so the units need no locks. */
typedef struct lane {
    exporter_t *x;
    segd_store_view_t *v;
    uint32_t lane, lanes;
    segd_err_t err;
    char errmsg[512];
    segd_snapnat_writer_t nat; /* native: rule and scratch */
} lane_t;

static void unit_fail(unit_t *u, segd_err_t err, const char *msg)
{
    if (u->err)
        return;
    u->err = err;
    snprintf(u->errmsg, sizeof(u->errmsg), "%s", err == SEGD_ERR_NOMEM ? "out of memory" : msg);
}

static void progress(exporter_t *x, int final)
{
    if (!x->o->progress)
        return;
    double t = segd_mono_s();
    if (!final && t - x->last_progress < 0.5)
        return;
    x->last_progress = t;
    fprintf(stderr, "\rsnapshot: %" PRIu64 " users, %" PRIu64 " entries%s",
            (uint64_t)atomic_load(&x->records), (uint64_t)atomic_load(&x->entries),
            final ? "\n" : "");
}

/* The unit this lane writes user into, or NULL (another lane's, a unit not
 * exported, or one that already failed). */
static unit_t *lane_unit(lane_t *l, const char *user, size_t user_len)
{
    exporter_t *x = l->x;
    int32_t part = segd_partition_of(x->o->partitioner, user, user_len, x->plan.partitions);
    int32_t i = x->slot[part];
    if (i < 0 || (uint32_t)i % l->lanes != l->lane || x->u[i].err)
        return NULL;
    return &x->u[i];
}

/* Commits the record just appended to u's writer (err: appending failed)
 * and counts it; a failure fails the unit, the scan goes on for the others. */
static int record_done(lane_t *l, unit_t *u, uint64_t entries, segd_err_t err)
{
    exporter_t *x = l->x;
    char msg[512] = "";
    if (!err)
        err = segd_ocf_writer_commit(u->w, msg, sizeof(msg));
    if (err) {
        unit_fail(u, err, msg);
        return 0;
    }
    u->segments += entries;
    uint64_t r = atomic_fetch_add(&x->records, 1) + 1;
    atomic_fetch_add(&x->entries, entries);
    if (l->lane == 0 && (r & 1023) == 0)
        progress(x, 0);
    return 0;
}

static int export_record(void *ctx, const char *user, size_t user_len,
                         const segd_profile_t *p)
{
    lane_t *l = ctx;
    unit_t *u = lane_unit(l, user, user_len);
    if (!u)
        return 0;
    return record_done(l, u, p->n,
                       segd_snaprec_encode(user, user_len, p, segd_ocf_writer_buf(u->w)));
}

/* Native: the lane decodes only its own units' values (the avro scan
 * decodes every record in every lane) and copies what needs no pruning. */
static int export_native(void *ctx, const char *user, size_t user_len, const uint8_t *value,
                         size_t value_len)
{
    lane_t *l = ctx;
    unit_t *u = lane_unit(l, user, user_len);
    if (!u)
        return 0;
    int written = 0;
    uint64_t entries = 0;
    segd_err_t err = segd_snapnat_export(&l->nat, user, user_len, value, value_len,
                                         segd_ocf_writer_buf(u->w), &entries, &written);
    if (err == SEGD_ERR_CORRUPT) { /* as the avro scan: no snapshot without this user */
        segd_policy_count_corrupt(segd_store_policy(l->x->store));
        l->err = err;
        snprintf(l->errmsg, sizeof(l->errmsg),
                 "the record of user %.*s does not decode: no snapshot", (int)user_len, user);
        return 1;
    }
    return err || written ? record_done(l, u, entries, err) : 0;
}

static void *lane_main(void *arg)
{
    lane_t *l = arg;
    segd_err_t err;
    if (l->x->o->format == SEGD_SNAPFMT_NATIVE) {
        /* The same rule the Avro scan takes (store/view.c), so both formats
         * drop exactly the same entries. It is read once per lane, so every
         * record is judged at one time and one W, and it is complete because
         * a value read through the view is the key's whole history (every
         * operand merged), which is what allows a drop below W. */
        segd_prune_t rule;
        segd_policy_rule(segd_store_policy(l->x->store), &rule, 1);
        segd_snapnat_writer_init(&l->nat, &rule, l->x->o->native_copy);
        err = segd_store_view_scan_raw(l->v, export_native, l, l->errmsg, sizeof(l->errmsg));
        segd_snapnat_writer_free(&l->nat);
        segd_policy_rule_release(&rule);
    } else {
        err = segd_store_view_scan(l->v, export_record, l, l->errmsg, sizeof(l->errmsg));
    }
    if (err && !l->err)
        l->err = err;
    return NULL;
}

/* Runs the lanes (the first on this thread) and reports the first error. */
static segd_err_t scan_lanes(exporter_t *x, segd_store_view_t *v, char *errstr, size_t n)
{
    uint32_t lanes = x->o->threads ? x->o->threads : 1;
    if (lanes > x->plan.n_units)
        lanes = (uint32_t)x->plan.n_units;
    lane_t *l = calloc(lanes, sizeof(*l));
    pthread_t *t = calloc(lanes, sizeof(*t));
    if (!l || !t) {
        free(l);
        free(t);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    uint32_t started = 1;
    for (uint32_t i = 0; i < lanes; i++)
        l[i] = (lane_t){.x = x, .v = v, .lane = i, .lanes = lanes};
    for (; started < lanes; started++)
        if (pthread_create(&t[started], NULL, lane_main, &l[started]))
            break;
    lane_main(&l[0]);
    for (uint32_t i = started; i < lanes; i++) /* lanes no thread could be made for */
        lane_main(&l[i]);
    for (uint32_t i = 1; i < started; i++)
        pthread_join(t[i], NULL);
    segd_err_t err = SEGD_OK;
    for (uint32_t i = 0; i < lanes && !err; i++)
        if (l[i].err)
            err = segd_errf(l[i].err, errstr, n, "%s", l[i].errmsg);
    free(l);
    free(t);
    return err;
}

/* ---------- one unit's directory ---------- */

/* A killed export leaves staged files and temporaries behind. */
static void remove_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *nm = e->d_name;
        size_t len = strlen(nm);
        int ours = !strncmp(nm, "p-", 2) || !strncmp(nm, "members-", 8) ||
                   !strncmp(nm, SEGD_MANIFEST_NAME, 13);
        if (ours && ((len > 8 && !strcmp(nm + len - 8, ".partial")) || strstr(nm, ".tmp.")))
            unlinkat(dirfd(d), nm, 0);
    }
    if (d)
        closedir(d);
}

/* Exports into one unit directory take turns (flock on .segd-export.lock):
 * the holder knows that any staged file there belongs to a dead export. */
static segd_err_t lock_dir(unit_t *u, char *errstr, size_t n)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/.segd-export.lock", u->url);
    u->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (u->lock_fd < 0 || flock(u->lock_fd, LOCK_EX))
        return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", path, strerror(errno));
    remove_leftovers(u->url);
    return SEGD_OK;
}

static void read_manifest(segd_dest_t *d, segd_manifest_t *old)
{
    segd_buf_t buf = {0};
    char err[256];
    if (segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, err, sizeof(err)) == SEGD_OK &&
        segd_manifest_parse((const char *)buf.data, buf.len, old, err, sizeof(err)) != SEGD_OK)
        segd_manifest_free(old); /* not ours to clean up */
    segd_buf_free(&buf);
}

/* Opens the unit's destination and its file's writer. */
static segd_err_t unit_open(exporter_t *x, unit_t *u, char *errstr, size_t n)
{
    char dir[32];
    int remote = segd_dest_is_remote(x->topic_url);
    segd_unit_dir_name(dir, sizeof(dir), u->partition);
    segd_dest_join(u->url, sizeof(u->url), x->topic_url, dir);
    segd_err_t err = segd_dest_open(&u->d, u->url, &x->o->dest, errstr, n);
    if (!err && !remote)
        err = lock_dir(u, errstr, n);
    if (err)
        return err;
    read_manifest(u->d, &u->old);
    /* a unit never reuses its previous file's name (two exports within a
     * millisecond, or a clock stepped back): a reader of the previous
     * manifest would find that file rewritten under it */
    u->gen = u->old.created_at_ms >= x->gen ? u->old.created_at_ms + 1 : x->gen;
    snprintf(u->name, sizeof(u->name), "%s-%" PRId64 ".avro", dir, u->gen);
    if (remote)
        snprintf(u->staged, sizeof(u->staged), "%s/%s", x->staging, u->name);
    else
        snprintf(u->staged, sizeof(u->staged), "%s/%s.partial", u->url, u->name);
    return segd_ocf_writer_open_codec(&u->w, u->staged, segd_snapfmt_schema_json(x->o->format),
                                      x->o->codec, x->o->level, errstr, n);
}

/* The unit's manifest: the view's metadata, its own offset, its file. */
static segd_err_t unit_manifest(const exporter_t *x, unit_t *u, const segd_ocf_info_t *info)
{
    const segd_manifest_t *b = &x->base;
    segd_manifest_t *m = &u->m;
    m->topic = strdup(x->plan.topic);
    m->changes_topic = b->changes_topic ? strdup(b->changes_topic) : NULL;
    m->files = calloc(1, sizeof(*m->files));
    if (!m->topic || !m->files || (b->changes_topic && !m->changes_topic))
        return SEGD_ERR_NOMEM;
    m->partition = u->partition;
    m->partitions = x->plan.partitions;
    m->partitioner = x->o->partitioner;
    m->units = 1;
    m->records_format = x->o->format;
    m->created_at_ms = u->gen;
    m->now_ms = b->now_ms;
    m->horizon_ms = b->horizon_ms;
    /* restored state lacks what its exporter dropped below that W: the unit
     * says so, whatever this store's own W (a restore or cache downstream
     * must not take older events or deltas for it) */
    m->gc_watermark_ms = b->gc_watermark_ms > u->import_floor ? b->gc_watermark_ms
                                                               : u->import_floor;
    m->records = info->records;
    m->segments = u->segments;
    segd_snapshot_file_t *f = &m->files[m->n_files++];
    snprintf(f->name, sizeof(f->name), "%s", u->name);
    f->partition = u->partition;
    f->records = info->records;
    f->segments = u->segments;
    f->bytes = info->bytes;
    memcpy(f->sha256, info->sha256, sizeof(f->sha256));
    int oom = 0;
    for (size_t i = 0; i < b->n_inputs; i++)
        if (!strcmp(b->inputs[i].topic, m->topic) && b->inputs[i].partition == u->partition)
            oom |= segd_manifest_add_input(m, m->topic, u->partition, b->inputs[i].offset);
    for (size_t i = 0; m->changes_topic && i < b->n_changes; i++)
        oom |= segd_manifest_add_change(m, m->changes_topic, b->changes[i].partition,
                                        b->changes[i].offset);
    for (size_t i = 0; i < b->n_retirements; i++)
        oom |= segd_manifest_add_retirement(m, b->retirements[i].segment_id,
                                            b->retirements[i].retired_before_ms);
    return oom ? SEGD_ERR_NOMEM : SEGD_OK;
}

static int64_t input_offset(const segd_manifest_t *m, int32_t partition)
{
    for (size_t i = 0; i < m->n_inputs; i++)
        if (m->inputs[i].partition == partition && m->topic && m->inputs[i].topic &&
            !strcmp(m->inputs[i].topic, m->topic))
            return m->inputs[i].offset;
    return -1;
}

/* A unit never goes back: one further along its input (another member's,
 * newer, or this store's before it replayed the partition from its
 * beginning) stays, rather than restores and caches loading less. */
static segd_err_t check_not_behind(const unit_t *u, char *errstr, size_t n)
{
    int64_t was = input_offset(&u->old, u->partition), now = input_offset(&u->m, u->partition);
    if (was > now)
        return segd_errf(SEGD_ERR_INVALID, errstr, n,
                         "the destination's unit is further along its input (offset %" PRId64
                         " > %" PRId64 "): kept", was, now);
    return SEGD_OK;
}

/* Puts a staged file of the unit at its final name. */
static segd_err_t unit_put(const exporter_t *x, unit_t *u, const char *name, const char *staged,
                           char *errstr, size_t n)
{
    if (segd_dest_is_remote(x->topic_url))
        return segd_dest_put_file(u->d, name, staged, errstr, n);
    char final[4400];
    snprintf(final, sizeof(final), "%s/%s", u->url, name);
    if (rename(staged, final))
        return segd_errf(SEGD_ERR_IO, errstr, n, "rename %s: %s", staged, strerror(errno));
    return SEGD_OK;
}

/* The members file (when the graph has ids of the unit), before the
 * manifest that names it. */
static segd_err_t members_publish(const exporter_t *x, unit_t *u, char *errstr, size_t n)
{
    if (!u->mw)
        return SEGD_OK;
    segd_ocf_info_t info;
    segd_err_t err = segd_ocf_writer_close(u->mw, &info, errstr, n);
    u->mw = NULL;
    if (!err)
        err = unit_put(x, u, u->mname, u->mstaged, errstr, n);
    if (err)
        return err;
    u->m.identity_epoch_ms = x->identity_epoch_ms;
    segd_snapshot_file_t *f = &u->m.members;
    snprintf(f->name, sizeof(f->name), "%s", u->mname);
    f->partition = u->partition;
    f->records = info.records;
    f->segments = 0;
    f->bytes = info.bytes;
    memcpy(f->sha256, info.sha256, sizeof(f->sha256));
    u->m.has_members = 1;
    return SEGD_OK;
}

/* File, then manifest (replacing the previous one in one step). */
static segd_err_t unit_publish(const exporter_t *x, unit_t *u, char *errstr, size_t n)
{
    segd_ocf_info_t info;
    segd_err_t err = segd_ocf_writer_close(u->w, &info, errstr, n);
    u->w = NULL;
    if (!err)
        err = unit_manifest(x, u, &info);
    if (err == SEGD_ERR_NOMEM)
        return segd_errf(err, errstr, n, "out of memory");
    if (!err && (err = check_not_behind(u, errstr, n)))
        return err;
    if (!err)
        err = unit_put(x, u, u->name, u->staged, errstr, n);
    if (err)
        return err;
    u->published = 1;
    if ((err = members_publish(x, u, errstr, n)))
        return err;
    char *json = segd_manifest_dump(&u->m, segd_ocf_codec_name(x->o->codec));
    if (!json)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    err = segd_dest_put_mem(u->d, SEGD_MANIFEST_NAME, json, strlen(json), errstr, n);
    free(json);
    return err;
}

/* Best effort: files no manifest will reference (a failed unit's, or the
 * previous unit's once its new manifest is in place). A reader still
 * loading the previous unit then finds a file missing and starts over from
 * the new manifest. */
static void delete_files(const segd_log_t *log, segd_dest_t *d, const segd_manifest_t *m,
                         const segd_manifest_t *keep)
{
    char err[256];
    for (size_t i = 0; i < m->n_files; i++) {
        int kept = 0;
        for (size_t k = 0; keep && k < keep->n_files && !kept; k++)
            kept = !strcmp(keep->files[k].name, m->files[i].name);
        if (!kept && segd_dest_delete(d, m->files[i].name, err, sizeof(err)))
            segd_log(log, SEGD_LOG_WARN, "snapshot", "could not delete %s: %s", m->files[i].name,
                     err);
    }
    int kept = keep && keep->has_members && m->has_members &&
               !strcmp(keep->members.name, m->members.name);
    if (m->has_members && !kept && segd_dest_delete(d, m->members.name, err, sizeof(err)))
        segd_log(log, SEGD_LOG_WARN, "snapshot", "could not delete %s: %s", m->members.name, err);
}

/* Lands the unit or rolls it back: its previous manifest stays. */
static void unit_finish(exporter_t *x, unit_t *u)
{
    char msg[512] = "";
    if (!u->err) {
        segd_err_t err = unit_publish(x, u, msg, sizeof(msg));
        if (err)
            unit_fail(u, err, msg);
    }
    if (u->err && u->published)
        delete_files(x->o->log, u->d, &u->m, NULL);
    u->landed = !u->err;
    if (u->landed)
        delete_files(x->o->log, u->d, &u->old, &u->m);
}

static void unit_close(unit_t *u)
{
    segd_ocf_writer_abort(u->w);
    segd_ocf_writer_abort(u->mw);
    if (u->staged[0]) /* renamed when it landed in place */
        unlink(u->staged);
    if (u->mstaged[0])
        unlink(u->mstaged);
    segd_dest_close(u->d);
    if (u->lock_fd >= 0)
        close(u->lock_fd); /* releases the lock */
    segd_manifest_free(&u->old);
    segd_manifest_free(&u->m);
}

/* ---------- topology ---------- */

/* The partition count DEST/<topic>/topology.json records; 0 when none. */
static int32_t read_topology_p(segd_dest_t *d)
{
    segd_buf_t buf = {0};
    segd_topology_t t;
    char err[256];
    int32_t p = 0;
    if (segd_dest_get_mem(d, SEGD_TOPOLOGY_NAME, &buf, err, sizeof(err)) == SEGD_OK &&
        segd_topology_parse((const char *)buf.data, buf.len, &t, err, sizeof(err)) == SEGD_OK)
        p = t.partitions;
    segd_buf_free(&buf);
    return p;
}

/* After the units: written when absent or different, so that readers of a
 * fleet's units find what they share. */
static segd_err_t write_topology(exporter_t *x, segd_dest_t *d, char *errstr, size_t n)
{
    segd_topology_t t = {.partitions = x->plan.partitions, .partitioner = x->o->partitioner,
                         .records_format = x->o->format};
    snprintf(t.topic, sizeof(t.topic), "%s", x->plan.topic);
    char *json = segd_topology_dump(&t);
    segd_buf_t buf = {0};
    char ignored[256];
    segd_err_t err = json ? SEGD_OK : segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (!err && (segd_dest_get_mem(d, SEGD_TOPOLOGY_NAME, &buf, ignored, sizeof(ignored)) ||
                 buf.len != strlen(json) || memcmp(buf.data, json, buf.len)))
        err = segd_dest_put_mem(d, SEGD_TOPOLOGY_NAME, json, strlen(json), errstr, n);
    segd_buf_free(&buf);
    free(json);
    return err;
}

/* ---------- export ---------- */

/* The topic's destination, the plan, the view's metadata. */
static segd_err_t plan_export(exporter_t *x, segd_store_view_t *v, const char *dest_url,
                              segd_dest_t **topic_dest, char *errstr, size_t n)
{
    char topic[256];
    segd_err_t err = collect_meta(v, &x->base, errstr, n);
    if (!err)
        err = segd_snapshot_plan_topic(x->o, x->base.inputs, x->base.n_inputs, topic,
                                       sizeof(topic), errstr, n);
    if (err)
        return err;
    segd_dest_join(x->topic_url, sizeof(x->topic_url), dest_url, topic);
    err = segd_dest_open(topic_dest, x->topic_url, &x->o->dest, errstr, n);
    if (!err)
        err = segd_snapshot_plan(x->o, x->base.inputs, x->base.n_inputs,
                                 read_topology_p(*topic_dest), &x->plan, errstr, n);
    if (err || !segd_dest_is_remote(dest_url))
        return err;
    const char *tmp = x->o->tmp_dir ? x->o->tmp_dir : getenv("TMPDIR");
    snprintf(x->staging, sizeof(x->staging), "%s/segd-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(x->staging)) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "staging directory %s: %s", x->staging,
                        strerror(errno));
        x->staging[0] = 0;
    }
    return err;
}

static segd_err_t open_units(exporter_t *x, char *errstr, size_t n)
{
    size_t nu = x->plan.n_units;
    x->u = calloc(nu, sizeof(*x->u));
    x->slot = malloc((size_t)x->plan.partitions * sizeof(*x->slot));
    if (!x->u || !x->slot)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    for (int32_t p = 0; p < x->plan.partitions; p++)
        x->slot[p] = -1;
    for (size_t i = 0; i < nu; i++) {
        unit_t *u = &x->u[i];
        char msg[512] = "";
        u->partition = x->plan.units[i];
        u->lock_fd = -1;
        x->slot[u->partition] = (int32_t)i;
        segd_err_t err = unit_open(x, u, msg, sizeof(msg));
        if (err)
            unit_fail(u, err, msg);
    }
    return SEGD_OK;
}

/* The scan into every unit's writer; a failure here lands no unit. */
static segd_err_t scan_units(exporter_t *x, segd_store_t *s, segd_store_view_t *v,
                             char *errstr, size_t n)
{
    /* the scan skips records that do not decode (and counts them): a unit
     * without them would verify and load as if those users had nothing */
    uint64_t corrupt = segd_policy_corrupt_count(segd_store_policy(s));
    segd_err_t err = scan_lanes(x, v, errstr, n);
    uint64_t bad = segd_policy_corrupt_count(segd_store_policy(s)) - corrupt;
    progress(x, 1);
    if (!err && bad)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                        "%" PRIu64 " records do not decode: no snapshot (segd get names them)",
                        bad);
    x->base.horizon_ms = segd_policy_horizon_ms(segd_store_policy(s));
    /* read after the scan: at least the W it pruned with, so a cache skipping
     * deltas older than this skips every one that could undo a drop, and
     * none written after the view (those are newer than W + grace) */
    x->base.gc_watermark_ms = segd_store_gc_watermark(s);
    for (size_t i = 0; i < x->plan.n_units; i++)
        x->u[i].import_floor = segd_store_import_floor(s, x->plan.topic, x->u[i].partition);
    return err;
}

/* ---------- the identity graph's members files (DESIGN §10.6) ---------- */

typedef struct members_pass {
    exporter_t *x;
    int64_t epoch_ms;
} members_pass_t;

static segd_err_t members_open(exporter_t *x, unit_t *u, char *errstr, size_t n)
{
    snprintf(u->mname, sizeof(u->mname), "members-%05d-%" PRId64 ".avro", (int)u->partition,
             u->gen);
    if (segd_dest_is_remote(x->topic_url))
        snprintf(u->mstaged, sizeof(u->mstaged), "%s/%s", x->staging, u->mname);
    else
        snprintf(u->mstaged, sizeof(u->mstaged), "%s/%s.partial", u->url, u->mname);
    return segd_ocf_writer_open_codec(&u->mw, u->mstaged, segd_member_schema_json(),
                                      x->o->codec, x->o->level, errstr, n);
}

/* One id of the graph into its unit's members file (opened at its first). */
static int member_entry(void *ctx, const char *id, size_t len, const char *master,
                        size_t master_len, int64_t master_first_seen_ms)
{
    members_pass_t *mp = ctx;
    exporter_t *x = mp->x;
    int32_t p = segd_partition_of(x->o->partitioner, id, len, x->plan.partitions);
    if (x->slot[p] < 0)
        return 0;
    unit_t *u = &x->u[x->slot[p]];
    if (u->err)
        return 0;
    char msg[512] = "";
    segd_err_t err = u->mw ? SEGD_OK : members_open(x, u, msg, sizeof(msg));
    if (!err) {
        segd_member_t m = {id, len, master, master_len, master_first_seen_ms, mp->epoch_ms,
                           p, x->plan.partitions, u->gen};
        err = segd_member_encode(&m, segd_ocf_writer_buf(u->mw));
    }
    if (!err)
        err = segd_ocf_writer_commit(u->mw, msg, sizeof(msg));
    if (err)
        unit_fail(u, err, msg[0] ? msg : segd_err_str(err));
    return 0;
}

/* The graph's ids from the same view as the profiles: every unit's
 * members agree with its records and positions. */
static segd_err_t export_members(exporter_t *x, segd_store_view_t *v, char *errstr, size_t n)
{
    members_pass_t mp = {x, 0};
    segd_err_t err = segd_ident_view_scan(v, member_entry, &mp, &mp.epoch_ms, errstr, n);
    x->identity_epoch_ms = mp.epoch_ms;
    return err;
}

/* Lands the units, then the topology; folds what landed into out and
 * reports the first unit that failed. */
static segd_err_t finish_units(exporter_t *x, segd_dest_t *topic_dest, segd_manifest_t *out,
                               size_t *failed, char *errstr, size_t n)
{
    segd_err_t first = SEGD_OK;
    size_t landed = 0;
    for (size_t i = 0; i < x->plan.n_units; i++) {
        unit_t *u = &x->u[i];
        unit_finish(x, u);
        if (u->landed && out && segd_manifest_fold(out, &u->m, NULL, 0))
            first = first ? first : segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        landed += u->landed;
        *failed += !u->landed;
        if (!u->landed && !first)
            first = segd_errf(u->err, errstr, n, "unit %s/p-%05d: %s", x->plan.topic,
                              (int)u->partition, u->errmsg);
    }
    segd_err_t err = landed ? write_topology(x, topic_dest, errstr, n) : SEGD_OK;
    return first ? first : err;
}

segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *out,
                                size_t *failed, char *errstr, size_t n)
{
    size_t nfailed = 0;
    if (out)
        segd_manifest_init(out);
    exporter_t x = {.o = o, .store = s};
    segd_manifest_init(&x.base);
    x.base.created_at_ms = segd_wall_ms();
    x.gen = x.base.created_at_ms;
    x.base.now_ms = segd_policy_now_ms(segd_store_policy(s));
    x.base.changes_topic = o->changes_topic ? strdup(o->changes_topic) : NULL;
    segd_dest_t *topic_dest = NULL;
    segd_store_view_t *v = NULL;
    segd_err_t err = o->changes_topic && !x.base.changes_topic
                         ? segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory")
                         : SEGD_OK;
    if (!err)
        err = segd_store_view_open(s, &v, errstr, n);
    if (!err)
        err = plan_export(&x, v, dest_url, &topic_dest, errstr, n);
    if (!err)
        err = open_units(&x, errstr, n);
    if (!err)
        err = scan_units(&x, s, v, errstr, n);
    if (!err)
        err = export_members(&x, v, errstr, n);
    if (!err)
        err = finish_units(&x, topic_dest, out, &nfailed, errstr, n);
    else
        nfailed = x.plan.n_units;
    for (size_t i = 0; x.u && i < x.plan.n_units; i++)
        unit_close(&x.u[i]);
    if (x.staging[0])
        rmdir(x.staging);
    segd_store_view_close(v);
    segd_dest_close(topic_dest);
    segd_snapshot_plan_free(&x.plan);
    segd_manifest_free(&x.base);
    free(x.u);
    free(x.slot);
    if (failed)
        *failed = nfailed;
    return err;
}
