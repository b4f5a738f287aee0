/* The snapshot manifest (manifest.json) in memory and as JSON; see
 * manifest.h. Parsing is a trust boundary: manifests come from outside. */
#include "wire/manifest.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/avro_codec.h"

#define FORMAT_NAME "segd-snapshot"
#define FORMAT_VERSION 1
#define FORMAT_VERSION_NATIVE 2 /* readers before the native format refuse it */

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

char *segd_manifest_dump(const segd_manifest_t *m, const char *codec)
{
    uint64_t fp = 0;
    char fphex[17];
    segd_avro_fingerprint(segd_snapfmt_schema_json(m->format), &fp);
    snprintf(fphex, sizeof(fphex), "%016" PRIx64, fp);
    json_t *ret = json_array();
    for (size_t i = 0; i < m->n_retirements; i++)
        json_array_append_new(ret, json_pack("{s:I,s:I}", "segment_id",
                                             (json_int_t)m->retirements[i].segment_id,
                                             "retired_before_ms",
                                             (json_int_t)m->retirements[i].retired_before_ms));
    json_t *o = json_pack(
        "{s:s,s:i,s:I,s:I,s:I,s:i,s:s,s:s,s:s,s:I,s:I,s:o,s:o,s:o}", "format", FORMAT_NAME,
        "format_version",
        m->format == SEGD_SNAPFMT_NATIVE ? FORMAT_VERSION_NATIVE : FORMAT_VERSION, "created_at_ms", (json_int_t)m->created_at_ms,
        "now_ms", (json_int_t)m->now_ms, "horizon_ms", (json_int_t)m->horizon_ms, "buckets",
        (int)m->buckets, "bucket_hash", "xxh64(user_id, seed 0) & (buckets - 1)", "codec",
        codec, "schema_fingerprint", fphex, "records", (json_int_t)m->records,
        "segments", (json_int_t)m->segments, "files", files_json(m), "input_offsets",
        positions_json(m->inputs, m->n_inputs, 1), "retirements", ret);
    json_object_set_new(o, "gc_watermark_ms", json_integer((json_int_t)m->gc_watermark_ms));
    json_object_set_new(o, "record_format", json_string(segd_snapfmt_name(m->format)));
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
            segd_manifest_add_input(m, topic, part, off))
            return SEGD_ERR_CORRUPT;
    }
    json_t *ret = json_object_get(o, "retirements");
    for (size_t i = 0; i < json_array_size(ret); i++) {
        json_int_t seg, before;
        if (json_unpack(json_array_get(ret, i), "{s:I,s:I}", "segment_id", &seg,
                        "retired_before_ms", &before) ||
            segd_manifest_add_retirement(m, seg, before))
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

/* record_format: absent in manifests written before the native format */
static int parse_format(json_t *o, segd_manifest_t *m, char *errstr, size_t n)
{
    json_t *f = json_object_get(o, "record_format");
    m->format = SEGD_SNAPFMT_AVRO;
    if (!f)
        return 0;
    if (json_is_string(f) && !segd_snapfmt_parse(json_string_value(f), &m->format))
        return 0;
    segd_errf(SEGD_ERR_CORRUPT, errstr, n,
              "manifest: record_format %s%s%s is not one this segd reads (avro, native)",
              json_is_string(f) ? "'" : "", json_is_string(f) ? json_string_value(f) : "(not a string)",
              json_is_string(f) ? "'" : "");
    return -1;
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
    if ((version != FORMAT_VERSION && version != FORMAT_VERSION_NATIVE) || buckets <= 0 ||
        (buckets & (buckets - 1))) {
        segd_errf(err, errstr, n, "manifest: unsupported version %d or bucket count %d",
                  version, buckets);
        goto out;
    }
    if (parse_format(o, m, errstr, n))
        goto out;
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
