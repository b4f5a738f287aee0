/* Snapshot export, manifest and load; see snapshot.h. Bucket files are
 * written side by side from one key-order scan (each record goes to its
 * bucket's writer), so the store is read once. For a directory destination
 * they are written in place under temporary names and renamed; for remote
 * ones they are staged in a temporary directory and uploaded. */
#define _GNU_SOURCE
#include "snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "avro_file.h"
#include "consumer/avro_codec.h"

#define FORMAT_NAME "segd-snapshot"
#define FORMAT_VERSION 1

void segd_snapshot_opts_default(segd_snapshot_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->buckets = SEGD_DEFAULT_BUCKETS;
    o->codec = SEGD_OCF_DEFLATE;
    o->level = 1;
    o->threads = 2;
    o->changes_topic = "segments.changes";
    segd_dest_opts_default(&o->dest);
}

void segd_manifest_init(segd_manifest_t *m) { memset(m, 0, sizeof(*m)); }

void segd_manifest_free(segd_manifest_t *m)
{
    for (size_t i = 0; i < m->n_inputs; i++)
        free(m->inputs[i].topic);
    free(m->inputs);
    free(m->files);
    free(m->retirements);
    free(m->changes_topic);
    free(m->changes);
    segd_manifest_init(m);
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static int is_remote(const char *url)
{
    return !strncmp(url, "http://", 7) || !strncmp(url, "https://", 8) ||
           !strncmp(url, "s3://", 5);
}

/* ---------- collecting the view's metadata ---------- */

static int add_input(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    segd_manifest_t *m = ctx;
    segd_topic_offset_t *a = realloc(m->inputs, (m->n_inputs + 1) * sizeof(*a));
    if (!a)
        return 1;
    m->inputs = a;
    a[m->n_inputs] = (segd_topic_offset_t){strdup(topic), partition, next};
    if (!a[m->n_inputs].topic)
        return 1;
    m->n_inputs++;
    return 0;
}

static int add_change_position(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    segd_manifest_t *m = ctx;
    if (strcmp(topic, m->changes_topic))
        return 0;
    segd_topic_offset_t *a = realloc(m->changes, (m->n_changes + 1) * sizeof(*a));
    if (!a)
        return 1;
    m->changes = a;
    a[m->n_changes++] = (segd_topic_offset_t){NULL, partition, next};
    return 0;
}

static int add_retirement(void *ctx, int64_t segment_id, int64_t before_ms)
{
    segd_manifest_t *m = ctx;
    segd_retirement_t *a = realloc(m->retirements, (m->n_retirements + 1) * sizeof(*a));
    if (!a)
        return 1;
    m->retirements = a;
    a[m->n_retirements++] = (segd_retirement_t){segment_id, before_ms};
    return 0;
}

static segd_err_t collect_meta(segd_store_view_t *v, segd_manifest_t *m, char *errstr,
                               size_t n)
{
    segd_err_t err = segd_store_view_positions(v, "offset", add_input, m, errstr, n);
    if (!err && m->changes_topic)
        err = segd_store_view_positions(v, "changes", add_change_position, m, errstr, n);
    if (!err)
        err = segd_store_view_retirements(v, add_retirement, m, errstr, n);
    return err;
}

/* ---------- manifest JSON ---------- */

static json_t *files_json(const segd_manifest_t *m)
{
    json_t *a = json_array();
    for (size_t i = 0; i < m->n_files; i++) {
        const segd_snapshot_file_t *f = &m->files[i];
        json_array_append_new(a, json_pack("{s:i,s:s,s:I,s:I,s:I,s:s}", "bucket",
                                           (int)f->bucket, "name", f->name, "records",
                                           (json_int_t)f->records, "segments",
                                           (json_int_t)f->segments, "bytes",
                                           (json_int_t)f->bytes, "sha256", f->sha256));
    }
    return a;
}

static json_t *positions_json(const segd_topic_offset_t *p, size_t n, int with_topic)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            a, with_topic ? json_pack("{s:s,s:i,s:I}", "topic", p[i].topic, "partition",
                                      (int)p[i].partition, "next_offset", (json_int_t)p[i].offset)
                          : json_pack("{s:i,s:I}", "partition", (int)p[i].partition, "offset",
                                      (json_int_t)p[i].offset));
    return a;
}

static char *manifest_dump(const segd_manifest_t *m, const char *codec)
{
    uint64_t fp = 0;
    char fphex[17];
    segd_avro_fingerprint(segd_snapshot_schema_json(), &fp);
    snprintf(fphex, sizeof(fphex), "%016" PRIx64, fp);
    json_t *ret = json_array();
    for (size_t i = 0; i < m->n_retirements; i++)
        json_array_append_new(ret, json_pack("{s:I,s:I}", "segment_id",
                                             (json_int_t)m->retirements[i].segment_id,
                                             "retired_before_ms",
                                             (json_int_t)m->retirements[i].retired_before_ms));
    json_t *o = json_pack(
        "{s:s,s:i,s:I,s:I,s:I,s:i,s:s,s:s,s:s,s:I,s:I,s:o,s:o,s:o}", "format", FORMAT_NAME,
        "format_version", FORMAT_VERSION, "created_at_ms", (json_int_t)m->created_at_ms,
        "now_ms", (json_int_t)m->now_ms, "horizon_ms", (json_int_t)m->horizon_ms, "buckets",
        (int)m->buckets, "bucket_hash", "xxh64(user_id, seed 0) & (buckets - 1)", "codec",
        codec, "schema_fingerprint", fphex, "records", (json_int_t)m->records,
        "segments", (json_int_t)m->segments, "files", files_json(m), "input_offsets",
        positions_json(m->inputs, m->n_inputs, 1), "retirements", ret);
    json_object_set_new(o, "gc_watermark_ms", json_integer((json_int_t)m->gc_watermark_ms));
    if (m->changes_topic)
        json_object_set_new(o, "changes",
                            json_pack("{s:s,s:o}", "topic", m->changes_topic, "positions",
                                      positions_json(m->changes, m->n_changes, 0)));
    char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

static segd_err_t parse_files(json_t *a, segd_manifest_t *m)
{
    size_t n = json_array_size(a);
    m->files = calloc(n ? n : 1, sizeof(*m->files));
    if (!m->files)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        segd_snapshot_file_t *f = &m->files[i];
        const char *name = NULL, *sha = NULL;
        int bucket = -1;
        json_int_t rec = -1, seg = -1, bytes = -1;
        if (json_unpack(json_array_get(a, i), "{s:i,s:s,s:I,s:I,s:I,s:s}", "bucket", &bucket,
                        "name", &name, "records", &rec, "segments", &seg, "bytes", &bytes,
                        "sha256", &sha) ||
            bucket < 0 || (uint32_t)bucket >= m->buckets || rec < 0 || seg < 0 || bytes < 0 ||
            strlen(name) >= sizeof(f->name) || strchr(name, '/') || strlen(sha) != 64)
            return SEGD_ERR_CORRUPT;
        snprintf(f->name, sizeof(f->name), "%s", name);
        snprintf(f->sha256, sizeof(f->sha256), "%s", sha);
        f->bucket = (uint32_t)bucket;
        f->records = (uint64_t)rec;
        f->segments = (uint64_t)seg;
        f->bytes = (uint64_t)bytes;
        m->n_files++;
    }
    return SEGD_OK;
}

static segd_err_t parse_positions(json_t *o, segd_manifest_t *m)
{
    json_t *in = json_object_get(o, "input_offsets");
    for (size_t i = 0; i < json_array_size(in); i++) {
        const char *topic;
        int part;
        json_int_t off;
        if (json_unpack(json_array_get(in, i), "{s:s,s:i,s:I}", "topic", &topic, "partition",
                        &part, "next_offset", &off) ||
            add_input(m, topic, part, off))
            return SEGD_ERR_CORRUPT;
    }
    json_t *ret = json_object_get(o, "retirements");
    for (size_t i = 0; i < json_array_size(ret); i++) {
        json_int_t seg, before;
        if (json_unpack(json_array_get(ret, i), "{s:I,s:I}", "segment_id", &seg,
                        "retired_before_ms", &before) ||
            add_retirement(m, seg, before))
            return SEGD_ERR_CORRUPT;
    }
    json_t *ch = json_object_get(o, "changes");
    const char *topic;
    if (!ch || json_unpack(ch, "{s:s}", "topic", &topic))
        return SEGD_OK;
    m->changes_topic = strdup(topic);
    json_t *pos = json_object_get(ch, "positions");
    for (size_t i = 0; i < json_array_size(pos); i++) {
        int part;
        json_int_t off;
        if (json_unpack(json_array_get(pos, i), "{s:i,s:I}", "partition", &part, "offset",
                        &off) ||
            add_change_position(m, m->changes_topic, part, off))
            return SEGD_ERR_CORRUPT;
    }
    return SEGD_OK;
}

static segd_err_t manifest_parse(const char *text, size_t len, segd_manifest_t *m,
                                 char *errstr, size_t n)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    if (!o)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "manifest: %s (line %d)", je.text,
                         je.line);
    const char *format = NULL;
    int version = 0, buckets = 0;
    json_int_t created = 0, now = 0, horizon = 0, records = 0, segments = 0;
    segd_err_t err = SEGD_ERR_CORRUPT;
    if (json_unpack(o, "{s:s,s:i,s:I,s:I,s:I,s:i,s:I,s:I}", "format", &format,
                    "format_version", &version, "created_at_ms", &created, "now_ms", &now,
                    "horizon_ms", &horizon, "buckets", &buckets, "records", &records,
                    "segments", &segments) ||
        strcmp(format, FORMAT_NAME)) {
        segd_errf(err, errstr, n, "manifest: not a segd snapshot manifest");
        goto out;
    }
    if (version != FORMAT_VERSION || buckets <= 0 || (buckets & (buckets - 1))) {
        segd_errf(err, errstr, n, "manifest: unsupported version %d or bucket count %d",
                  version, buckets);
        goto out;
    }
    m->created_at_ms = created;
    m->now_ms = now;
    m->horizon_ms = horizon;
    json_t *w = json_object_get(o, "gc_watermark_ms"); /* absent before issue 9 */
    m->gc_watermark_ms = json_is_integer(w) ? (int64_t)json_integer_value(w) : 0;
    m->buckets = (uint32_t)buckets;
    m->records = (uint64_t)records;
    m->segments = (uint64_t)segments;
    err = parse_files(json_object_get(o, "files"), m);
    if (!err)
        err = parse_positions(o, m);
    if (err)
        segd_errf(err, errstr, n, "manifest: malformed files, offsets or positions");
out:
    json_decref(o);
    return err;
}

/* ---------- export ---------- */

typedef struct exporter {
    const segd_snapshot_opts_t *o;
    segd_manifest_t *m;
    char dir[4096];         /* where bucket files are written */
    int in_place;           /* dir is the destination itself */
    segd_ocf_writer_t **w;  /* one per bucket */
    uint64_t *segments;     /* per bucket */
    double last_progress;
    _Atomic uint64_t records, entries;
    int64_t gen;            /* in every bucket file name: snapshots never share files */
    uint32_t published;     /* bucket files already at the destination */
} exporter_t;

/* One scanning thread: it writes the buckets b with b % lanes == lane. Every
 * lane reads the whole view (a scan costs ~1/12 of the encoding and
 * compression it feeds), so the buckets need no locks. */
typedef struct lane {
    exporter_t *x;
    segd_store_view_t *v;
    uint32_t lane, lanes;
    segd_err_t err;
    char errmsg[512];
} lane_t;

static void bucket_name(char *out, size_t cap, uint32_t b, int64_t gen)
{
    snprintf(out, cap, "bucket-%05u-%" PRId64 ".avro", b, gen);
}

static void staged_path(const exporter_t *x, uint32_t b, char *out, size_t cap)
{
    char name[64];
    bucket_name(name, sizeof(name), b, x->gen);
    snprintf(out, cap, "%s/%s%s", x->dir, name, x->in_place ? ".partial" : "");
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void progress(exporter_t *x, int final)
{
    if (!x->o->progress)
        return;
    double t = mono_s();
    if (!final && t - x->last_progress < 0.5)
        return;
    x->last_progress = t;
    fprintf(stderr, "\rsnapshot: %" PRIu64 " users, %" PRIu64 " entries%s",
            (uint64_t)atomic_load(&x->records), (uint64_t)atomic_load(&x->entries),
            final ? "\n" : "");
}

static int export_record(void *ctx, const char *user, size_t user_len,
                         const segd_profile_t *p)
{
    lane_t *l = ctx;
    exporter_t *x = l->x;
    uint32_t b = segd_bucket_of(user, user_len, x->o->buckets);
    if (b % l->lanes != l->lane)
        return 0;
    segd_err_t err = segd_snaprec_encode(user, user_len, p, segd_ocf_writer_buf(x->w[b]));
    if (!err)
        err = segd_ocf_writer_commit(x->w[b], l->errmsg, sizeof(l->errmsg));
    if (err) {
        l->err = err;
        if (err == SEGD_ERR_NOMEM)
            snprintf(l->errmsg, sizeof(l->errmsg), "out of memory");
        return 1;
    }
    x->segments[b] += p->n;
    uint64_t r = atomic_fetch_add(&x->records, 1) + 1;
    atomic_fetch_add(&x->entries, p->n);
    if (l->lane == 0 && (r & 1023) == 0)
        progress(x, 0);
    return 0;
}

static void *lane_main(void *arg)
{
    lane_t *l = arg;
    segd_err_t err = segd_store_view_scan(l->v, export_record, l, l->errmsg, sizeof(l->errmsg));
    if (err && !l->err)
        l->err = err;
    return NULL;
}

/* Runs the lanes (the first on this thread) and reports the first error. */
static segd_err_t scan_lanes(exporter_t *x, segd_store_view_t *v, char *errstr, size_t n)
{
    uint32_t lanes = x->o->threads ? x->o->threads : 1;
    if (lanes > x->o->buckets)
        lanes = x->o->buckets;
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

static segd_err_t open_writers(exporter_t *x, char *errstr, size_t n)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200];
        staged_path(x, b, path, sizeof(path));
        segd_err_t err = segd_ocf_writer_open_codec(&x->w[b], path, segd_snapshot_schema_json(),
                                                    x->o->codec, x->o->level, errstr, n);
        if (err)
            return err;
    }
    return SEGD_OK;
}

static segd_err_t close_writers(exporter_t *x, char *errstr, size_t n)
{
    segd_err_t first = SEGD_OK;
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        segd_ocf_info_t info;
        segd_snapshot_file_t *f = &x->m->files[b];
        segd_err_t err = segd_ocf_writer_close(x->w[b], &info, errstr, n);
        x->w[b] = NULL;
        if (err && !first)
            first = err;
        if (err)
            continue;
        bucket_name(f->name, sizeof(f->name), b, x->gen);
        f->bucket = b;
        f->records = info.records;
        f->segments = x->segments[b];
        f->bytes = info.bytes;
        memcpy(f->sha256, info.sha256, sizeof(f->sha256));
    }
    x->m->n_files = x->o->buckets;
    return first;
}

static void remove_staged(exporter_t *x)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200];
        staged_path(x, b, path, sizeof(path));
        unlink(path);
    }
    if (!x->in_place)
        rmdir(x->dir);
}

/* Moves (directory) or uploads (remote) the bucket files. */
static segd_err_t publish_buckets(exporter_t *x, segd_dest_t *d, char *errstr, size_t n)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200], final[4200];
        staged_path(x, b, path, sizeof(path));
        if (!x->in_place) {
            segd_err_t err = segd_dest_put_file(d, x->m->files[b].name, path, errstr, n);
            if (err)
                return err;
        } else {
            snprintf(final, sizeof(final), "%s/%s", x->dir, x->m->files[b].name);
            if (rename(path, final))
                return segd_errf(SEGD_ERR_IO, errstr, n, "rename %s: %s", path,
                                 strerror(errno));
        }
        x->published = b + 1;
    }
    return SEGD_OK;
}

/* Best effort: files no manifest will reference (a failed export's, or the
 * previous snapshot's once the new manifest is in place). A reader still
 * loading the previous snapshot then finds a file missing and starts over
 * from the new manifest. */
static void delete_files(segd_dest_t *d, const segd_snapshot_file_t *f, size_t nf,
                         const segd_manifest_t *keep)
{
    char err[256];
    for (size_t i = 0; i < nf; i++) {
        int kept = 0;
        for (size_t k = 0; keep && k < keep->n_files && !kept; k++)
            kept = !strcmp(keep->files[k].name, f[i].name);
        if (!kept && segd_dest_delete(d, f[i].name, err, sizeof(err)))
            fprintf(stderr, "segd: snapshot: could not delete %s: %s\n", f[i].name, err);
    }
}

static void read_old_manifest(segd_dest_t *d, segd_manifest_t *old)
{
    segd_buf_t buf = {0};
    char err[256];
    if (segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, err, sizeof(err)) == SEGD_OK &&
        manifest_parse((const char *)buf.data, buf.len, old, err, sizeof(err)) != SEGD_OK)
        segd_manifest_free(old); /* not ours to clean up */
    segd_buf_free(&buf);
}

static segd_err_t prepare_dir(exporter_t *x, const char *dest_url, char *errstr, size_t n)
{
    if (!is_remote(dest_url)) {
        x->in_place = 1;
        snprintf(x->dir, sizeof(x->dir), "%s", dest_url);
        return SEGD_OK; /* segd_dest_open created it */
    }
    const char *tmp = x->o->tmp_dir ? x->o->tmp_dir : getenv("TMPDIR");
    snprintf(x->dir, sizeof(x->dir), "%s/segd-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(x->dir))
        return segd_errf(SEGD_ERR_IO, errstr, n, "staging directory %s: %s", x->dir,
                         strerror(errno));
    return SEGD_OK;
}

static segd_err_t write_snapshot(exporter_t *x, segd_store_t *s, segd_store_view_t *v,
                                 segd_dest_t *d, char *errstr, size_t n)
{
    segd_manifest_t *m = x->m;
    segd_err_t err = open_writers(x, errstr, n);
    if (!err)
        err = scan_lanes(x, v, errstr, n);
    if (!err) /* on failure the caller aborts the writers */
        err = close_writers(x, errstr, n);
    progress(x, 1);
    if (err)
        return err;
    m->records = atomic_load(&x->records);
    m->segments = atomic_load(&x->entries);
    m->horizon_ms = segd_policy_horizon_ms(segd_store_policy(s));
    /* read after the scan: at least the W it pruned with, so a cache skipping
     * deltas older than this skips every one that could undo a drop, and
     * none written after the view (those are newer than W + grace) */
    m->gc_watermark_ms = segd_store_gc_watermark(s);
    err = publish_buckets(x, d, errstr, n);
    if (err)
        return err;
    char *json = manifest_dump(m, segd_ocf_codec_name(x->o->codec));
    if (!json)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    err = segd_dest_put_mem(d, SEGD_MANIFEST_NAME, json, strlen(json), errstr, n);
    free(json);
    return err;
}

segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *out,
                                char *errstr, size_t n)
{
    if (!o->buckets || (o->buckets & (o->buckets - 1)) || o->buckets > (1u << 16))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "buckets must be a power of two <= 65536");
    segd_manifest_t local;
    segd_manifest_t *m = out ? out : &local;
    segd_manifest_init(m);
    exporter_t x = {.o = o, .m = m};
    segd_dest_t *d = NULL;
    segd_store_view_t *v = NULL;
    x.w = calloc(o->buckets, sizeof(*x.w));
    x.segments = calloc(o->buckets, sizeof(*x.segments));
    m->files = calloc(o->buckets, sizeof(*m->files));
    m->buckets = o->buckets;
    m->created_at_ms = wall_ms();
    x.gen = m->created_at_ms;
    m->now_ms = segd_policy_now_ms(segd_store_policy(s));
    m->changes_topic = o->changes_topic ? strdup(o->changes_topic) : NULL;
    segd_err_t err = !x.w || !x.segments || !m->files ? SEGD_ERR_NOMEM : SEGD_OK;
    if (!err)
        err = segd_dest_open(&d, dest_url, &o->dest, errstr, n);
    /* the old manifest stays valid (its files are untouched) until the new
     * one replaces it; its files go afterwards */
    segd_manifest_t old;
    segd_manifest_init(&old);
    if (!err)
        read_old_manifest(d, &old);
    if (!err)
        err = prepare_dir(&x, dest_url, errstr, n);
    if (!err)
        err = segd_store_view_open(s, &v, errstr, n);
    if (!err)
        err = collect_meta(v, m, errstr, n);
    if (!err)
        err = write_snapshot(&x, s, v, d, errstr, n);
    if (!err)
        delete_files(d, old.files, old.n_files, m);
    else if (d && x.published)
        delete_files(d, m->files, x.published, NULL);
    segd_manifest_free(&old);
    for (uint32_t b = 0; x.w && b < o->buckets; b++)
        segd_ocf_writer_abort(x.w[b]);
    if (x.dir[0] && (err || !x.in_place))
        remove_staged(&x);
    segd_store_view_close(v);
    segd_dest_close(d);
    free(x.w);
    free(x.segments);
    if (err == SEGD_ERR_NOMEM && errstr && !errstr[0])
        segd_errf(err, errstr, n, "out of memory");
    if (err || !out)
        segd_manifest_free(m);
    return err;
}

/* ---------- manifest and load ---------- */

segd_err_t segd_snapshot_manifest(const char *src_url, const segd_dest_opts_t *dopts,
                                  segd_manifest_t *m, char *errstr, size_t n)
{
    segd_manifest_init(m);
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    segd_err_t err = segd_dest_open(&d, src_url, dopts, errstr, n);
    if (!err)
        err = segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s: no %s (no snapshot, or one being written)", src_url,
                  SEGD_MANIFEST_NAME);
    if (!err)
        err = manifest_parse((const char *)buf.data, buf.len, m, errstr, n);
    if (err)
        segd_manifest_free(m);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

typedef struct loader {
    segd_snapshot_cb cb;
    void *ctx;
    uint32_t bucket, buckets;
    uint64_t records, segments;
    segd_profile_t p;
    int wrong_bucket, stopped;
} loader_t;

static int load_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    for (int64_t i = 0; i < count; i++) {
        const char *user;
        size_t ulen;
        if (segd_snaprec_decode(&pos, end, &user, &ulen, &l->p) != SEGD_OK)
            return -1;
        if (segd_bucket_of(user, ulen, l->buckets) != l->bucket) {
            l->wrong_bucket = 1;
            return -1;
        }
        l->records++;
        l->segments += l->p.n;
        if (l->cb && l->cb(l->ctx, l->bucket, user, ulen, &l->p)) {
            l->stopped = 1;
            return 1;
        }
    }
    return pos == end ? 0 : -1;
}

static segd_err_t check_file(const segd_snapshot_file_t *f, const segd_buf_t *buf,
                             char *errstr, size_t n)
{
    if (buf->len != f->bytes)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %zu bytes, manifest says %" PRIu64,
                         f->name, buf->len, f->bytes);
    char hex[65];
    segd_sha256_hex(buf->data, buf->len, hex);
    if (strcmp(hex, f->sha256))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: SHA-256 mismatch", f->name);
    return SEGD_OK;
}

static segd_err_t load_file(segd_dest_t *d, const segd_manifest_t *m,
                            const segd_snapshot_file_t *f, loader_t *l, segd_buf_t *buf,
                            char *errstr, size_t n)
{
    segd_err_t err = segd_dest_get_mem(d, f->name, buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: missing", f->name);
    if (!err)
        err = check_file(f, buf, errstr, n);
    if (err)
        return err;
    l->bucket = f->bucket;
    l->buckets = m->buckets;
    l->records = l->segments = 0;
    char msg[256];
    err = segd_ocf_read(buf->data, buf->len, load_block, l, NULL, msg, sizeof(msg));
    if (l->stopped)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "load stopped by the caller");
    if (err)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %s%s", f->name,
                         l->wrong_bucket ? "a record in the wrong bucket; " : "", msg);
    if (l->records != f->records || l->segments != f->segments)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "%s: %" PRIu64 " records / %" PRIu64 " segments, manifest says %" PRIu64
                         " / %" PRIu64, f->name, l->records, l->segments, f->records,
                         f->segments);
    return SEGD_OK;
}

segd_err_t segd_snapshot_load(const char *src_url, const segd_dest_opts_t *dopts,
                              const segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    if (m->n_files != m->buckets)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "manifest lists %zu files for %u buckets",
                         m->n_files, m->buckets);
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    loader_t l = {.cb = cb, .ctx = ctx};
    segd_profile_init(&l.p);
    uint64_t records = 0, segments = 0;
    segd_err_t err = segd_dest_open(&d, src_url, dopts, errstr, n);
    for (size_t i = 0; !err && i < m->n_files; i++) {
        err = load_file(d, m, &m->files[i], &l, &buf, errstr, n);
        records += l.records;
        segments += l.segments;
    }
    if (!err && (records != m->records || segments != m->segments))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "totals differ from the manifest");
    segd_profile_free(&l.p);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

segd_err_t segd_snapshot_read(const char *src_url, const segd_dest_opts_t *dopts,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    for (int attempt = 0; attempt < 3; attempt++) {
        err = segd_snapshot_manifest(src_url, dopts, m, errstr, n);
        if (err)
            return err;
        err = segd_snapshot_load(src_url, dopts, m, cb, ctx, errstr, n);
        if (err != SEGD_ERR_CORRUPT)
            return err;
        /* replaced while we read it? then the new one is whole: read that */
        segd_manifest_t now;
        char ignored[256];
        int replaced = 0;
        if (segd_snapshot_manifest(src_url, dopts, &now, ignored, sizeof(ignored)) == SEGD_OK) {
            replaced = now.created_at_ms != m->created_at_ms;
            segd_manifest_free(&now);
        }
        if (!replaced)
            return err;
        segd_manifest_free(m);
    }
    return err;
}
