/* Resolvers: one per writer schema, reading that writer's binary into a
 * generic value of a reduced reader schema (the reader minus the fields the
 * writer lacks), and the move between such a value and a segd_event_t
 * (missing fields take the reader's defaults). avro_codec.c, avro_fast.c's
 * callers and avro_container.c use them through avro_codec_int.h. */
#include <avro.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "wire/avro_codec_int.h"

static json_t *record_fields(json_t *record) { return json_object_get(record, "fields"); }

static json_t *field_by_name(json_t *fields, const char *name)
{
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f)
    {
        if (!strcmp(json_string_value(json_object_get(f, "name")) ?: "", name))
            return f;
    }
    return NULL;
}

/* The record schema of the segments' items, or NULL when not inline. */
static json_t *items_record(json_t *record)
{
    json_t *seg = field_by_name(record_fields(record), "segments");
    json_t *t = seg ? json_object_get(seg, "type") : NULL;
    json_t *items = json_is_object(t) ? json_object_get(t, "items") : NULL;
    return json_is_object(items) ? items : NULL;
}

/* Drops the reader fields the writer lacks; each must have a default. */
static int reduce_fields(json_t *reader_rec, json_t *writer_rec)
{
    json_t *rf = record_fields(reader_rec), *wf = record_fields(writer_rec);
    if (!json_is_array(rf) || !json_is_array(wf))
        return -1;
    for (size_t i = json_array_size(rf); i-- > 0;) {
        json_t *f = json_array_get(rf, i);
        if (field_by_name(wf, json_string_value(json_object_get(f, "name")) ?: ""))
            continue;
        if (!json_object_get(f, "default"))
            return -1;
        json_array_remove(rf, i);
    }
    return 0;
}

static char *reduced_reader_json(const char *reader_json, const char *writer_json)
{
    json_t *r = json_loads(reader_json, 0, NULL), *w = json_loads(writer_json, 0, NULL);
    char *out = NULL;
    if (r && w && !reduce_fields(r, w)) {
        json_t *ri = items_record(r), *wi = items_record(w);
        if (!ri || !wi || !reduce_fields(ri, wi))
            out = json_dumps(r, JSON_COMPACT);
    }
    json_decref(r);
    json_decref(w);
    return out;
}

void segd_avro_resolver_free(resolver_t *r)
{
    if (r->resolver_iface) {
        avro_value_decref(&r->wvalue);
        avro_value_iface_decref(r->resolver_iface);
    }
    if (r->reduced_iface) {
        avro_value_decref(&r->value);
        avro_value_iface_decref(r->reduced_iface);
    }
    if (r->writer)
        avro_schema_decref(r->writer);
    if (r->reduced)
        avro_schema_decref(r->reduced);
    memset(r, 0, sizeof(*r));
}

static void resolver_index_fields(resolver_t *r)
{
    static const char *const top[] = {"user_id", "ts_ms", "op", "segments", "source"};
    static const char *const item[] = {"segment_id", "ttl_s", "flags", "partner_id"};
    for (int i = 0; i < F_COUNT; i++)
        r->fidx[i] = -1;
    for (int i = 0; i < 5; i++)
        r->fidx[i] = avro_schema_record_field_get_index(r->reduced, top[i]);
    avro_schema_t segs = avro_schema_record_field_get(r->reduced, "segments");
    avro_schema_t rec = segs && is_avro_array(segs) ? avro_schema_array_items(segs) : NULL;
    for (int i = 0; rec && is_avro_record(rec) && i < 4; i++)
        r->fidx[F_ID + i] = avro_schema_record_field_get_index(rec, item[i]);
}

segd_err_t segd_avro_resolver_init(resolver_t *r, const char *reader_json,
                                   const char *writer_json, char *errstr, size_t n)
{
    memset(r, 0, sizeof(*r));
    r->id = -1;
    char *reduced = reduced_reader_json(reader_json, writer_json);
    segd_err_t err = segd_errf(SEGD_ERR_SCHEMA, errstr, n, "incompatible writer schema");
    if (!reduced || avro_schema_from_json_length(reduced, strlen(reduced), &r->reduced) ||
        avro_schema_from_json_length(writer_json, strlen(writer_json), &r->writer))
        goto out;
    resolver_index_fields(r);
    r->reduced_iface = avro_generic_class_from_schema(r->reduced);
    if (!r->reduced_iface || avro_generic_value_new(r->reduced_iface, &r->value))
        goto out;
    if (!avro_schema_equal(r->writer, r->reduced)) {
        r->resolver_iface = avro_resolved_writer_new(r->writer, r->reduced);
        if (!r->resolver_iface || avro_resolved_writer_new_value(r->resolver_iface, &r->wvalue)) {
            if (r->resolver_iface)
                avro_value_iface_decref(r->resolver_iface);
            r->resolver_iface = NULL;
            goto out;
        }
        avro_resolved_writer_set_dest(&r->wvalue, &r->value);
    }
    segd_avro_fingerprint(writer_json, &r->fp);
    err = SEGD_OK;
out:
    free(reduced);
    if (err)
        segd_avro_resolver_free(r);
    return err;
}

/* ---------- value <-> event ---------- */

static int get_long(avro_value_t *rec, int idx, int64_t dflt, int64_t *out)
{
    avro_value_t f;
    int32_t i32;
    if (idx < 0) {
        *out = dflt;
        return 0;
    }
    if (avro_value_get_by_index(rec, (size_t)idx, &f, NULL))
        return -1;
    if (avro_value_get_type(&f) == AVRO_INT32) {
        if (avro_value_get_int(&f, &i32))
            return -1;
        *out = i32;
        return 0;
    }
    return avro_value_get_long(&f, out);
}

static int get_source(avro_value_t *rec, int idx, segd_event_t *ev)
{
    avro_value_t f, branch;
    const char *s;
    size_t len;
    ev->source[0] = 0;
    if (idx < 0)
        return 0;
    if (avro_value_get_by_index(rec, (size_t)idx, &f, NULL))
        return -1;
    if (avro_value_get_type(&f) == AVRO_UNION) {
        if (avro_value_get_current_branch(&f, &branch))
            return -1;
        f = branch;
    }
    if (avro_value_get_type(&f) != AVRO_STRING)
        return 0;
    if (avro_value_get_string(&f, &s, &len))
        return -1;
    snprintf(ev->source, sizeof(ev->source), "%.*s", (int)(len ? len - 1 : 0), s);
    return 0;
}

segd_err_t segd_avro_extract(const segd_avro_codec_t *c, const resolver_t *r, avro_value_t *v,
                             segd_event_t *ev, char *errstr, size_t n)
{
    avro_value_t f, arr, item;
    const char *uid;
    size_t ulen, count;
    int op;
    const int *fi = r->fidx;
    segd_event_reset(ev);
    if (fi[F_USER] < 0 || fi[F_OP] < 0 || fi[F_SEGS] < 0 ||
        avro_value_get_by_index(v, (size_t)fi[F_USER], &f, NULL) ||
        avro_value_get_string(&f, &uid, &ulen) || ulen == 0)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad user_id");
    if (segd_event_set_user(ev, uid, ulen - 1))
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "user_id longer than %d bytes",
                         SEGD_MAX_USER_ID);
    if (get_long(v, fi[F_TS], 0, &ev->ts_ms) ||
        avro_value_get_by_index(v, (size_t)fi[F_OP], &f, NULL) ||
        avro_value_get_enum(&f, &op) || op < 0 || op > SEGD_OP_ERASE_USER ||
        get_source(v, fi[F_SOURCE], ev))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad ts_ms, op or source");
    ev->op = (segd_op_t)op;
    if (avro_value_get_by_index(v, (size_t)fi[F_SEGS], &arr, NULL) ||
        avro_value_get_size(&arr, &count))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad segments");
    if (count > c->max_segments)
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "more than %zu segments", c->max_segments);
    for (size_t i = 0; i < count; i++) {
        int64_t id, ttl, flags, partner;
        if (avro_value_get_by_index(&arr, i, &item, NULL) ||
            get_long(&item, fi[F_ID], 0, &id) || get_long(&item, fi[F_TTL], 0, &ttl) ||
            get_long(&item, fi[F_FLAGS], c->dflt.flags, &flags) ||
            get_long(&item, fi[F_PARTNER], c->dflt.partner_id, &partner))
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad segment %zu", i);
        segd_seg_update_t u = {id, (int32_t)ttl, (int32_t)flags, (int32_t)partner};
        if (segd_event_add_segment(ev, &u))
            return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

int segd_avro_fill_value(avro_value_t *v, const segd_event_t *ev)
{
    avro_value_t f, arr, item, branch, x;
    int rc = avro_value_reset(v);
    rc = rc ?: avro_value_get_by_name(v, "user_id", &f, NULL);
    rc = rc ?: avro_value_set_string_len(&f, ev->user_id, ev->user_id_len + 1);
    rc = rc ?: avro_value_get_by_name(v, "ts_ms", &f, NULL);
    rc = rc ?: avro_value_set_long(&f, ev->ts_ms);
    rc = rc ?: avro_value_get_by_name(v, "op", &f, NULL);
    rc = rc ?: avro_value_set_enum(&f, (int)ev->op);
    rc = rc ?: avro_value_get_by_name(v, "segments", &arr, NULL);
    for (size_t i = 0; !rc && i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        rc = avro_value_append(&arr, &item, NULL);
        rc = rc ?: avro_value_get_by_name(&item, "segment_id", &x, NULL);
        rc = rc ?: avro_value_set_long(&x, u->segment_id);
        rc = rc ?: avro_value_get_by_name(&item, "ttl_s", &x, NULL);
        rc = rc ?: avro_value_set_int(&x, u->ttl_s);
        rc = rc ?: avro_value_get_by_name(&item, "flags", &x, NULL);
        rc = rc ?: avro_value_set_int(&x, u->flags);
        rc = rc ?: avro_value_get_by_name(&item, "partner_id", &x, NULL);
        rc = rc ?: avro_value_set_int(&x, u->partner_id);
    }
    rc = rc ?: avro_value_get_by_name(v, "source", &f, NULL);
    rc = rc ?: avro_value_set_branch(&f, ev->source[0] ? 1 : 0, &branch);
    if (!rc)
        rc = ev->source[0] ? avro_value_set_string(&branch, ev->source)
                           : avro_value_set_null(&branch);
    return rc;
}
void segd_avro_load_defaults(segd_avro_codec_t *c)
{
    json_t *r = json_loads(c->reader_json, 0, NULL);
    json_t *items = r ? items_record(r) : NULL;
    json_t *fl = items ? field_by_name(record_fields(items), "flags") : NULL;
    json_t *pa = items ? field_by_name(record_fields(items), "partner_id") : NULL;
    c->dflt.flags = (int32_t)json_integer_value(json_object_get(fl, "default"));
    c->dflt.partner_id = (int32_t)json_integer_value(json_object_get(pa, "default"));
    json_decref(r);
}
