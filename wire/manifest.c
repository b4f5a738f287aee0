/* A snapshot unit's manifest (manifest.json) in memory and as JSON, and the
 * fold of several units' manifests; see manifest.h. Parsing is a trust
 * boundary: manifests come from outside. */
#include "wire/manifest.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/avro_codec.h"

#define FORMAT_NAME "segd-snapshot-unit"
#define FORMAT_VERSION 2

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
    free(m->topic);
    segd_manifest_init(m);
}

int segd_manifest_add_input(void *ctx, const char *topic, int32_t partition, int64_t next)
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

int segd_manifest_add_change(void *ctx, const char *topic, int32_t partition, int64_t next)
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

int segd_manifest_add_retirement(void *ctx, int64_t segment_id, int64_t before_ms)
{
    segd_manifest_t *m = ctx;
    segd_retirement_t *a = realloc(m->retirements, (m->n_retirements + 1) * sizeof(*a));
    if (!a)
        return 1;
    m->retirements = a;
    a[m->n_retirements++] = (segd_retirement_t){segment_id, before_ms};
    return 0;
}

static json_t *files_json(const segd_manifest_t *m)
{
    json_t *a = json_array();
    for (size_t i = 0; i < m->n_files; i++) {
        const segd_snapshot_file_t *f = &m->files[i];
        json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I,s:s}", "name", f->name, "records",
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

void segd_unit_dir_name(char *out, size_t cap, int32_t partition)
{
    snprintf(out, cap, "p-%05d", (int)partition);
}

static json_t *retirements_json(const segd_manifest_t *m)
{
    json_t *ret = json_array();
    for (size_t i = 0; i < m->n_retirements; i++) {
        int64_t key = m->retirements[i].segment_id;
        int32_t partner;
        /* a partner's marker under its own name: a reader that predates
         * partner retirements refuses the manifest rather than drop it */
        int is_partner = segd_retire_key_partner(key, &partner);
        json_array_append_new(ret, json_pack("{s:I,s:I}",
                                             is_partner ? "partner_id" : "segment_id",
                                             (json_int_t)(is_partner ? partner : key),
                                             "retired_before_ms",
                                             (json_int_t)m->retirements[i].retired_before_ms));
    }
    return ret;
}

char *segd_manifest_dump(const segd_manifest_t *m, const char *codec)
{
    uint64_t fp = 0;
    char fphex[17];
    segd_avro_fingerprint(segd_snapfmt_schema_json(m->records_format), &fp);
    snprintf(fphex, sizeof(fphex), "%016" PRIx64, fp);
    json_t *o = json_pack(
        "{s:s,s:i,s:s,s:i,s:i,s:s,s:s,s:s,s:s}", "format", FORMAT_NAME, "format_version",
        FORMAT_VERSION, "topic", m->topic ? m->topic : "", "partition", (int)m->partition,
        "partitions", (int)m->partitions, "partitioner", segd_partitioner_name(m->partitioner),
        "records_format", segd_snapfmt_name(m->records_format), "codec", codec, "schema_fingerprint",
        fphex);
    json_t *rest = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "created_at_ms", (json_int_t)m->created_at_ms,
        "now_ms", (json_int_t)m->now_ms, "horizon_ms", (json_int_t)m->horizon_ms,
        "gc_watermark_ms", (json_int_t)m->gc_watermark_ms, "records", (json_int_t)m->records,
        "segments", (json_int_t)m->segments, "files", files_json(m), "input_offsets",
        positions_json(m->inputs, m->n_inputs, 1), "retirements", retirements_json(m));
    if (!o || !rest) {
        json_decref(o);
        json_decref(rest);
        return NULL;
    }
    json_object_update(o, rest);
    json_decref(rest);
    if (m->changes_topic)
        json_object_set_new(o, "changes",
                            json_pack("{s:s,s:o}", "topic", m->changes_topic, "positions",
                                      positions_json(m->changes, m->n_changes, 0)));
    if (m->has_members)
        json_object_set_new(o, "members",
                            json_pack("{s:s,s:I,s:I,s:s,s:I}", "name", m->members.name,
                                      "records", (json_int_t)m->members.records, "bytes",
                                      (json_int_t)m->members.bytes, "sha256", m->members.sha256,
                                      "epoch_ms", (json_int_t)m->identity_epoch_ms));
    char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

/* One file's fields into f; segments only where the file has them. */
static segd_err_t parse_file(json_t *o, int with_segments, segd_snapshot_file_t *f)
{
    const char *name = NULL, *sha = NULL;
    json_int_t rec = -1, seg = 0, bytes = -1;
    if ((with_segments ? json_unpack(o, "{s:s,s:I,s:I,s:I,s:s}", "name", &name, "records", &rec,
                                     "segments", &seg, "bytes", &bytes, "sha256", &sha)
                       : json_unpack(o, "{s:s,s:I,s:I,s:s}", "name", &name, "records", &rec,
                                     "bytes", &bytes, "sha256", &sha)) ||
        rec < 0 || seg < 0 || bytes < 0 || strlen(name) >= sizeof(f->name) ||
        strchr(name, '/') || strlen(sha) != 64)
        return SEGD_ERR_CORRUPT;
    snprintf(f->name, sizeof(f->name), "%s", name);
    snprintf(f->sha256, sizeof(f->sha256), "%s", sha);
    f->records = (uint64_t)rec;
    f->segments = (uint64_t)seg;
    f->bytes = (uint64_t)bytes;
    return SEGD_OK;
}

static segd_err_t parse_files(json_t *a, segd_manifest_t *m)
{
    size_t n = json_array_size(a);
    m->files = calloc(n ? n : 1, sizeof(*m->files));
    if (!m->files)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        segd_snapshot_file_t *f = &m->files[i];
        if (parse_file(json_array_get(a, i), 1, f))
            return SEGD_ERR_CORRUPT;
        f->partition = m->partition;
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
            segd_manifest_add_input(m, topic, part, off))
            return SEGD_ERR_CORRUPT;
    }
    json_t *ret = json_object_get(o, "retirements");
    for (size_t i = 0; i < json_array_size(ret); i++) {
        json_int_t seg = -1, partner = 0, before;
        json_t *r = json_array_get(ret, i);
        int is_partner = json_object_get(r, "partner_id") != NULL;
        if ((is_partner ? json_unpack(r, "{s:I,s:I}", "partner_id", &partner,
                                      "retired_before_ms", &before)
                        : json_unpack(r, "{s:I,s:I}", "segment_id", &seg,
                                      "retired_before_ms", &before)) ||
            (is_partner && (partner < INT32_MIN || partner > INT32_MAX)) ||
            (!is_partner && seg < 0) ||
            segd_manifest_add_retirement(
                m, is_partner ? segd_retire_key_of_partner((int32_t)partner) : seg, before))
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
            segd_manifest_add_change(m, m->changes_topic, part, off))
            return SEGD_ERR_CORRUPT;
    }
    return SEGD_OK;
}

/* The unit's identity: which topic, partition, partitioning and records. */
static segd_err_t parse_unit(json_t *o, segd_manifest_t *m, char *errstr, size_t n)
{
    const char *topic = NULL, *partitioner = NULL, *records_format = NULL;
    int part = -1, parts = 0;
    if (json_unpack(o, "{s:s,s:i,s:i,s:s,s:s}", "topic", &topic, "partition", &part,
                    "partitions", &parts, "partitioner", &partitioner, "records_format",
                    &records_format))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "manifest: no topic, partition, partitions, partitioner or records_format");
    if (!*topic || parts <= 0 || part < 0 || part >= parts)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "manifest: partition %d of %d partitions of topic '%s'", part, parts,
                         topic);
    if (segd_partitioner_parse(partitioner, &m->partitioner))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "manifest: unknown partitioner '%s'",
                         partitioner);
    if (segd_snapfmt_parse(records_format, &m->records_format))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "manifest: records_format '%s' is not one this segd reads (avro, "
                         "native)", records_format);
    m->topic = strdup(topic);
    m->partition = part;
    m->partitions = parts;
    m->units = 1;
    return m->topic ? SEGD_OK : SEGD_ERR_NOMEM;
}

segd_err_t segd_manifest_parse(const char *text, size_t len, segd_manifest_t *m,
                               char *errstr, size_t n)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    if (!o)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "manifest: %s (line %d)", je.text,
                         je.line);
    const char *format = NULL;
    int version = 0;
    json_int_t created = 0, now = 0, horizon = 0, records = 0, segments = 0, w = 0;
    segd_err_t err = SEGD_ERR_CORRUPT;
    if (json_unpack(o, "{s:s,s:i}", "format", &format, "format_version", &version) ||
        strcmp(format, FORMAT_NAME) || version != FORMAT_VERSION) {
        segd_errf(err, errstr, n, "manifest: not a segd snapshot unit manifest (format %s "
                  "version %d)", FORMAT_NAME, FORMAT_VERSION);
        goto out;
    }
    if (json_unpack(o, "{s:I,s:I,s:I,s:I,s:I,s:I}", "created_at_ms", &created, "now_ms", &now,
                    "horizon_ms", &horizon, "gc_watermark_ms", &w, "records", &records,
                    "segments", &segments) ||
        records < 0 || segments < 0) {
        segd_errf(err, errstr, n, "manifest: missing or negative times or counts");
        goto out;
    }
    err = parse_unit(o, m, errstr, n);
    if (err)
        goto out;
    m->created_at_ms = created;
    m->now_ms = now;
    m->horizon_ms = horizon;
    m->gc_watermark_ms = w;
    m->records = (uint64_t)records;
    m->segments = (uint64_t)segments;
    err = parse_files(json_object_get(o, "files"), m);
    if (!err)
        err = parse_positions(o, m);
    json_t *members = json_object_get(o, "members");
    if (!err && members) {
        err = parse_file(members, 0, &m->members);
        m->members.partition = m->partition;
        m->has_members = !err;
        json_int_t epoch = 0; /* absent in files of the first exporters: 0 */
        if (!err && json_unpack(members, "{s?I}", "epoch_ms", &epoch))
            err = SEGD_ERR_CORRUPT;
        m->identity_epoch_ms = epoch;
    }
    if (err)
        segd_errf(err, errstr, n, "manifest: malformed files, offsets or positions");
out:
    json_decref(o);
    return err;
}

/* ---------- folding units ---------- */

static segd_err_t fold_first(segd_manifest_t *into, const segd_manifest_t *u)
{
    into->topic = strdup(u->topic);
    into->changes_topic = u->changes_topic ? strdup(u->changes_topic) : NULL;
    if (!into->topic || (u->changes_topic && !into->changes_topic))
        return SEGD_ERR_NOMEM;
    into->partition = -1;
    into->partitions = u->partitions;
    into->partitioner = u->partitioner;
    into->records_format = u->records_format;
    into->created_at_ms = u->created_at_ms;
    into->now_ms = u->now_ms;
    into->horizon_ms = u->horizon_ms;
    into->gc_watermark_ms = u->gc_watermark_ms;
    for (size_t i = 0; i < u->n_changes; i++)
        if (segd_manifest_add_change(into, into->changes_topic, u->changes[i].partition,
                                     u->changes[i].offset))
            return SEGD_ERR_NOMEM;
    return SEGD_OK;
}

/* Keeps, per change partition, the minimum position over the units. A
 * partition that some unit does not list is dropped, which means "read it
 * from offset 0": that unit's store acknowledged no delta there before its
 * snapshot, so all of them came after it. */
static void fold_changes(segd_manifest_t *into, const segd_manifest_t *u)
{
    int same = into->changes_topic && u->changes_topic &&
               !strcmp(into->changes_topic, u->changes_topic);
    size_t kept = 0;
    for (size_t i = 0; same && i < into->n_changes; i++) {
        const segd_topic_offset_t *c = &into->changes[i];
        for (size_t k = 0; k < u->n_changes; k++)
            if (u->changes[k].partition == c->partition) {
                into->changes[kept] = *c;
                if (u->changes[k].offset < c->offset)
                    into->changes[kept].offset = u->changes[k].offset;
                kept++;
                break;
            }
    }
    into->n_changes = kept;
}

static int fold_retirement(segd_manifest_t *into, const segd_retirement_t *r)
{
    for (size_t i = 0; i < into->n_retirements; i++)
        if (into->retirements[i].segment_id == r->segment_id) {
            if (r->retired_before_ms > into->retirements[i].retired_before_ms)
                into->retirements[i].retired_before_ms = r->retired_before_ms;
            return 0;
        }
    return segd_manifest_add_retirement(into, r->segment_id, r->retired_before_ms);
}

static segd_err_t fold_lists(segd_manifest_t *into, const segd_manifest_t *u)
{
    segd_snapshot_file_t *f = realloc(into->files, (into->n_files + u->n_files + 1) * sizeof(*f));
    if (!f)
        return SEGD_ERR_NOMEM;
    into->files = f;
    if (u->n_files) /* a unit of no file has files == NULL: memcpy's UB */
        memcpy(f + into->n_files, u->files, u->n_files * sizeof(*f));
    into->n_files += u->n_files;
    for (size_t i = 0; i < u->n_inputs; i++)
        if (segd_manifest_add_input(into, u->inputs[i].topic, u->inputs[i].partition,
                                    u->inputs[i].offset))
            return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < u->n_retirements; i++)
        if (fold_retirement(into, &u->retirements[i]))
            return SEGD_ERR_NOMEM;
    return SEGD_OK;
}

segd_err_t segd_manifest_fold(segd_manifest_t *into, const segd_manifest_t *u, char *errstr,
                              size_t n)
{
    segd_err_t err = SEGD_OK;
    if (!into->units)
        err = fold_first(into, u);
    else if (strcmp(into->topic, u->topic) || into->partitions != u->partitions ||
             into->partitioner != u->partitioner)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "unit %s/%d (%d partitions, %s) does not match the others (%s, %d "
                         "partitions, %s)", u->topic, (int)u->partition, (int)u->partitions,
                         segd_partitioner_name(u->partitioner), into->topic,
                         (int)into->partitions, segd_partitioner_name(into->partitioner));
    else
        fold_changes(into, u);
    if (!err)
        err = fold_lists(into, u);
    if (err)
        return segd_errf(err, errstr, n, "out of memory");
    if (into->units) {
        into->records_mixed |= u->records_format != into->records_format || u->records_mixed;
        if (u->gc_watermark_ms < into->gc_watermark_ms)
            into->gc_watermark_ms = u->gc_watermark_ms;
        if (u->created_at_ms < into->created_at_ms)
            into->created_at_ms = u->created_at_ms;
    }
    into->records += u->records;
    into->segments += u->segments;
    into->units++;
    return SEGD_OK;
}
