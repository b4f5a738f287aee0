/* Avro codec for SegmentEvent; see avro_codec.h. A "resolver" reads one
 * writer schema's binary into a generic value of a reduced reader schema
 * (the reader minus the fields the writer lacks); extraction then fills
 * those fields from the reader's defaults. */
#define _GNU_SOURCE
#include "wire/avro_codec.h"

#include <avro.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "wire/avro_file.h"

#include "segd_schemas.h"

/* Field positions in a resolver's reduced schema (-1: the writer lacks it),
 * so extraction indexes rather than looks fields up by name per event. */
enum { F_USER, F_TS, F_OP, F_SEGS, F_SOURCE, F_ID, F_TTL, F_FLAGS, F_PARTNER, F_COUNT };

typedef struct resolver {
    int32_t id;     /* Confluent id, or -1 */
    int incompatible; /* a Confluent id whose schema does not resolve: remembered
                       * so a flood of such messages does not re-parse it */
    int fidx[F_COUNT];
    uint64_t fp;    /* single-object fingerprint */
    avro_schema_t writer, reduced;
    avro_value_iface_t *reduced_iface, *resolver_iface; /* resolver NULL: identity */
    avro_value_t value, wvalue;
} resolver_t;

#define UNKNOWN_IDS 64
#define UNKNOWN_TTL_MS 5000 /* short: a registry follower may lag a new schema briefly */

typedef struct defaults {
    int32_t flags, partner_id;
} defaults_t;

struct segd_avro_codec {
    char *reader_json;
    segd_schema_source_t registry; /* lookup NULL: no registry */
    avro_reader_t mem;
    avro_writer_t out;
    defaults_t dflt;
    resolver_t local; /* writer == reader */
    int generic_only; /* tests: decode the local schema through avro-c too */
    size_t max_segments; /* SIZE_MAX until segd_avro_codec_set_limits */
    resolver_t *cache;
    size_t ncache, capcache;
    /* ids the registry did not know, asked again only after UNKNOWN_TTL_MS:
     * a flood of bad messages must not cost a registry round trip each */
    struct {
        int32_t id;
        int64_t until_ms;
    } unknown[UNKNOWN_IDS];
    size_t unknown_next;
};

/* ---------- CRC-64-AVRO over the Parsing Canonical Form ---------- */

#define CRC64_EMPTY 0xc15d213aa4d7a795ull

static uint64_t crc64_avro(const char *s, size_t len)
{
    uint64_t table[256];
    for (int i = 0; i < 256; i++) {
        uint64_t fp = (uint64_t)i;
        for (int j = 0; j < 8; j++)
            fp = (fp >> 1) ^ (CRC64_EMPTY & (0 - (fp & 1)));
        table[i] = fp;
    }
    uint64_t fp = CRC64_EMPTY;
    for (size_t i = 0; i < len; i++)
        fp = (fp >> 8) ^ table[(fp ^ (uint8_t)s[i]) & 0xff];
    return fp;
}

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *s)
{
    size_t add = strlen(s);
    if (b->len + add + 1 > b->cap) {
        size_t cap = (b->cap + add + 1) * 2;
        char *d = realloc(b->s, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->s = d;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, add + 1);
    b->len += add;
}

static void sb_str(sbuf_t *b, const char *s)
{
    json_t *j = json_string(s);
    char *q = json_dumps(j, JSON_ENCODE_ANY);
    sb_add(b, q ? q : "\"\"");
    free(q);
    json_decref(j);
}

static int is_primitive(const char *t)
{
    static const char *const p[] = {"null", "boolean", "int", "long", "float",
                                    "double", "bytes", "string", NULL};
    for (int i = 0; p[i]; i++)
        if (!strcmp(t, p[i]))
            return 1;
    return 0;
}

static void full_name(const char *name, const char *ns, char *out, size_t cap)
{
    if (strchr(name, '.') || !ns || !*ns)
        snprintf(out, cap, "%s", name);
    else
        snprintf(out, cap, "%s.%s", ns, name);
}

static int pcf(sbuf_t *b, json_t *s, const char *ns);

static int pcf_named(sbuf_t *b, json_t *s, const char *type, const char *ns)
{
    const char *name = json_string_value(json_object_get(s, "name"));
    const char *own_ns = json_string_value(json_object_get(s, "namespace"));
    char fn[512], inner_ns[512];
    if (!name)
        return -1;
    full_name(name, own_ns ? own_ns : ns, fn, sizeof(fn));
    snprintf(inner_ns, sizeof(inner_ns), "%s", fn);
    char *dot = strrchr(inner_ns, '.');
    if (dot)
        *dot = 0;
    else
        inner_ns[0] = 0;
    sb_add(b, "{\"name\":");
    sb_str(b, fn);
    sb_add(b, ",\"type\":");
    sb_str(b, type);
    if (!strcmp(type, "record")) {
        sb_add(b, ",\"fields\":[");
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(s, "fields"), i, f)
        {
            sb_add(b, i ? ",{\"name\":" : "{\"name\":");
            sb_str(b, json_string_value(json_object_get(f, "name")));
            sb_add(b, ",\"type\":");
            if (pcf(b, json_object_get(f, "type"), inner_ns))
                return -1;
            sb_add(b, "}");
        }
        sb_add(b, "]");
    } else if (!strcmp(type, "enum")) {
        sb_add(b, ",\"symbols\":[");
        size_t i;
        json_t *sym;
        json_array_foreach(json_object_get(s, "symbols"), i, sym)
        {
            if (i)
                sb_add(b, ",");
            sb_str(b, json_string_value(sym));
        }
        sb_add(b, "]");
    } else { /* fixed */
        char size[32];
        snprintf(size, sizeof(size), ",\"size\":%lld",
                 (long long)json_integer_value(json_object_get(s, "size")));
        sb_add(b, size);
    }
    sb_add(b, "}");
    return 0;
}

static int pcf(sbuf_t *b, json_t *s, const char *ns)
{
    if (json_is_string(s)) {
        const char *t = json_string_value(s);
        char fn[512];
        if (is_primitive(t)) {
            sb_str(b, t);
        } else {
            full_name(t, ns, fn, sizeof(fn));
            sb_str(b, fn);
        }
        return 0;
    }
    if (json_is_array(s)) {
        size_t i;
        json_t *v;
        sb_add(b, "[");
        json_array_foreach(s, i, v)
        {
            if (i)
                sb_add(b, ",");
            if (pcf(b, v, ns))
                return -1;
        }
        sb_add(b, "]");
        return 0;
    }
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type)
        return -1;
    if (!strcmp(type, "record") || !strcmp(type, "enum") || !strcmp(type, "fixed"))
        return pcf_named(b, s, type, ns);
    if (!strcmp(type, "array") || !strcmp(type, "map")) {
        int arr = !strcmp(type, "array");
        sb_add(b, arr ? "{\"type\":\"array\",\"items\":" : "{\"type\":\"map\",\"values\":");
        if (pcf(b, json_object_get(s, arr ? "items" : "values"), ns))
            return -1;
        sb_add(b, "}");
        return 0;
    }
    return pcf(b, json_object_get(s, "type"), ns); /* {"type": "int"} */
}

segd_err_t segd_avro_fingerprint(const char *schema_json, uint64_t *fp)
{
    json_t *root = json_loads(schema_json, JSON_DECODE_ANY, NULL);
    sbuf_t b = {0};
    int rc = root ? pcf(&b, root, "") : -1;
    json_decref(root);
    if (!rc && !b.oom && b.s)
        *fp = crc64_avro(b.s, b.len);
    free(b.s);
    return rc || b.oom || !b.s ? SEGD_ERR_INVALID : SEGD_OK;
}

/* ---------- resolvers ---------- */

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

static void resolver_free(resolver_t *r)
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

static segd_err_t resolver_init(resolver_t *r, const char *reader_json,
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
        resolver_free(r);
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

static segd_err_t extract(const segd_avro_codec_t *c, const resolver_t *r, avro_value_t *v,
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

static int fill_value(avro_value_t *v, const segd_event_t *ev)
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

/* ---------- codec ---------- */

static void load_defaults(segd_avro_codec_t *c)
{
    json_t *r = json_loads(c->reader_json, 0, NULL);
    json_t *items = r ? items_record(r) : NULL;
    json_t *fl = items ? field_by_name(record_fields(items), "flags") : NULL;
    json_t *pa = items ? field_by_name(record_fields(items), "partner_id") : NULL;
    c->dflt.flags = (int32_t)json_integer_value(json_object_get(fl, "default"));
    c->dflt.partner_id = (int32_t)json_integer_value(json_object_get(pa, "default"));
    json_decref(r);
}

segd_err_t segd_avro_codec_new(segd_avro_codec_t **out, const char *reader_json,
                               const segd_schema_source_t *registry, char *errstr,
                               size_t n)
{
    segd_avro_codec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return SEGD_ERR_NOMEM;
    if (registry)
        c->registry = *registry;
    c->max_segments = SIZE_MAX;
    /* compiled in: an installed binary has no schemas directory */
    c->reader_json = strdup(reader_json ? reader_json : SEGD_SCHEMA_SEGMENT_EVENT);
    segd_err_t err = SEGD_ERR_NOMEM;
    if (!c->reader_json)
        goto out_fail;
    static const char empty[1];
    c->mem = avro_reader_memory(empty, 0);
    c->out = avro_writer_memory(empty, 0);
    load_defaults(c);
    if ((err = resolver_init(&c->local, c->reader_json, c->reader_json, errstr, n)))
        goto out_fail;
    *out = c;
    return SEGD_OK;
out_fail:
    segd_avro_codec_destroy(c);
    return err;
}

void segd_avro_codec_destroy(segd_avro_codec_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->ncache; i++)
        resolver_free(&c->cache[i]);
    free(c->cache);
    resolver_free(&c->local);
    if (c->mem)
        avro_reader_free(c->mem);
    if (c->out)
        avro_writer_free(c->out);
    free(c->reader_json);
    free(c);
}

const char *segd_avro_codec_reader_json(const segd_avro_codec_t *c) { return c->reader_json; }

void segd_avro_codec_set_limits(segd_avro_codec_t *c, const segd_limits_t *lim)
{
    c->max_segments = lim->max_segments;
}

static resolver_t *cache_slot(segd_avro_codec_t *c)
{
    resolver_t *r = segd_array_grow(c->cache, &c->capcache, c->ncache + 1, sizeof(*r));
    if (!r)
        return NULL;
    c->cache = r;
    return &c->cache[c->ncache];
}

segd_err_t segd_avro_codec_add_schema(segd_avro_codec_t *c, const char *writer_json,
                                      char *errstr, size_t n)
{
    resolver_t *r = cache_slot(c);
    if (!r)
        return SEGD_ERR_NOMEM;
    segd_err_t err = resolver_init(r, c->reader_json, writer_json, errstr, n);
    if (!err)
        c->ncache++;
    return err;
}

/* The resolver for a Confluent schema id, fetched and built on first use. */
static segd_err_t by_id(segd_avro_codec_t *c, int32_t id, resolver_t **out, char *errstr,
                        size_t n)
{
    if (id < 0) /* registry ids are positive; -1 marks the local schemas in the cache */
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    for (size_t i = 0; i < c->ncache; i++)
        if (c->cache[i].id == id) {
            *out = &c->cache[i];
            return c->cache[i].incompatible
                       ? segd_errf(SEGD_ERR_SCHEMA, errstr, n,
                                   "incompatible writer schema id %d", id)
                       : SEGD_OK;
        }
    if (!c->registry.lookup)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d (no registry)", id);
    int64_t now = segd_mono_ms();
    for (size_t i = 0; i < UNKNOWN_IDS; i++)
        if (c->unknown[i].until_ms > now && c->unknown[i].id == id)
            return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    const char *json;
    segd_err_t err = c->registry.lookup(c->registry.ctx, id, &json, errstr, n);
    if (err == SEGD_ERR_NOTFOUND) {
        c->unknown[c->unknown_next].id = id;
        c->unknown[c->unknown_next].until_ms = now + UNKNOWN_TTL_MS;
        c->unknown_next = (c->unknown_next + 1) % UNKNOWN_IDS;
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema id %d", id);
    }
    if (err)
        return err;
    resolver_t *r = cache_slot(c);
    if (!r)
        return SEGD_ERR_NOMEM;
    err = resolver_init(r, c->reader_json, json, errstr, n);
    r->id = id;
    r->incompatible = err != SEGD_OK; /* resolver_init left it empty */
    *out = &c->cache[c->ncache++];
    if (err)
        return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "incompatible writer schema id %d", id);
    return SEGD_OK;
}

static segd_err_t by_fingerprint(segd_avro_codec_t *c, uint64_t fp, resolver_t **out,
                                 char *errstr, size_t n)
{
    if (c->local.fp == fp) {
        *out = &c->local;
        return SEGD_OK;
    }
    for (size_t i = 0; i < c->ncache; i++)
        if (c->cache[i].id < 0 && c->cache[i].fp == fp) {
            *out = &c->cache[i];
            return SEGD_OK;
        }
    return segd_errf(SEGD_ERR_SCHEMA, errstr, n, "unknown schema fingerprint %016llx",
                     (unsigned long long)fp);
}

static segd_err_t frame(segd_avro_codec_t *c, segd_framing_t framing, const uint8_t *b,
                        size_t len, resolver_t **r, size_t *skip, char *errstr, size_t n)
{
    if (framing == SEGD_FRAMING_AUTO)
        framing = len >= 1 && b[0] == 0 ? SEGD_FRAMING_CONFLUENT
                  : len >= 2 && b[0] == 0xC3 && b[1] == 0x01 ? SEGD_FRAMING_SINGLE_OBJECT
                                                             : SEGD_FRAMING_RAW;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        if (len < 1 || b[0] != 0)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        if (len < 5)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated confluent header");
        *skip = 5;
        return by_id(c, (int32_t)((uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 |
                                  (uint32_t)b[3] << 8 | b[4]), r, errstr, n);
    }
    if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        if (len < 2 || b[0] != 0xC3 || b[1] != 0x01)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "bad magic byte");
        if (len < 10)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated single-object header");
        uint64_t fp = 0;
        for (int i = 9; i >= 2; i--)
            fp = fp << 8 | b[i];
        *skip = 10;
        return by_fingerprint(c, fp, r, errstr, n);
    }
    *skip = 0;
    *r = &c->local;
    return SEGD_OK;
}

/* ---------- hand-written decoder for the local schema ----------
 * When the writer schema is the reader schema (raw framing, single-object
 * with the local fingerprint) the binary is parsed directly: ~10x faster
 * than avro-c's generic values, which dominate ingest CPU otherwise. It
 * accepts exactly what avro-c accepts for this schema (tests compare both). */

typedef struct cursor {
    const uint8_t *p, *end;
} cursor_t;

static int cur_long(cursor_t *c, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (c->p >= c->end)
            return -1;
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

static int cur_int(cursor_t *c, int32_t *out)
{
    int64_t v;
    if (cur_long(c, &v) || v < INT32_MIN || v > INT32_MAX)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int cur_bytes(cursor_t *c, const uint8_t **s, size_t *len)
{
    int64_t n;
    if (cur_long(c, &n) || n < 0 || n > c->end - c->p)
        return -1;
    *s = c->p;
    *len = (size_t)n;
    c->p += n;
    return 0;
}

/* 0 = ok, -1 = malformed, -2 = out of memory, -3 = more than max segments.
 * Past max the items are still read (not kept), so the cursor ends at the
 * array's end either way: a container block's next record starts there. */
static int fast_segments(cursor_t *c, segd_event_t *ev, size_t max)
{
    int over = 0;
    for (;;) {
        int64_t count, block_bytes;
        if (cur_long(c, &count))
            return -1;
        if (count == 0)
            return over ? -3 : 0;
        if (count < 0) { /* a block with its byte size */
            if (count == INT64_MIN || cur_long(c, &block_bytes) || block_bytes < 0)
                return -1;
            count = -count;
        }
        if (count > c->end - c->p) /* every item takes at least one byte */
            return -1;
        if (!over && (uint64_t)count > max - ev->n_segments)
            over = 1;
        for (int64_t i = 0; i < count; i++) {
            segd_seg_update_t u;
            if (cur_long(c, &u.segment_id) || cur_int(c, &u.ttl_s) || cur_int(c, &u.flags) ||
                cur_int(c, &u.partner_id))
                return -1;
            if (!over && segd_event_add_segment(ev, &u))
                return -2;
        }
    }
}

/* Decodes one record at c->p, leaving c->p after it. A user id over
 * SEGD_MAX_USER_ID bytes is SEGD_ERR_LIMIT once the record was read through
 * (so that a container block can go on with the next record). */
static segd_err_t fast_decode_at(cursor_t *c, size_t max_segments, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    const uint8_t *s;
    size_t slen;
    int32_t op;
    int64_t branch;
    int too_long;
    segd_event_reset(ev);
    if (cur_bytes(c, &s, &slen))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    too_long = segd_event_set_user(ev, (const char *)s, slen) != SEGD_OK;
    if (cur_long(c, &ev->ts_ms) || cur_int(c, &op))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (op < 0 || op > SEGD_OP_ERASE_USER)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    ev->op = (segd_op_t)op;
    int rc = fast_segments(c, ev, max_segments);
    if (rc == -2)
        return SEGD_ERR_NOMEM;
    if (rc == -1 || cur_long(c, &branch) || (branch != 0 && branch != 1) ||
        (branch == 1 && cur_bytes(c, &s, &slen)))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    if (branch == 1)
        snprintf(ev->source, sizeof(ev->source), "%.*s", (int)slen, (const char *)s);
    if (rc == -3) /* the whole record was read: a prefix decode may go on after it */
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "more than %zu segments", max_segments);
    if (too_long)
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "user_id longer than %d bytes",
                         SEGD_MAX_USER_ID);
    return SEGD_OK;
}

static segd_err_t fast_decode(const uint8_t *b, size_t len, size_t max_segments,
                              segd_event_t *ev, char *errstr, size_t n)
{
    cursor_t c = {b, b + len};
    segd_err_t err = fast_decode_at(&c, max_segments, ev, errstr, n);
    if (!err && c.p != c.end)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "trailing bytes");
    return err;
}

segd_err_t segd_avro_decode_local_prefix(segd_avro_codec_t *c, const void *buf, size_t len,
                                         size_t *used, segd_event_t *ev, char *errstr,
                                         size_t n)
{
    cursor_t cur = {buf, (const uint8_t *)buf + len};
    segd_err_t err = fast_decode_at(&cur, c->max_segments, ev, errstr, n);
    *used = !err || err == SEGD_ERR_LIMIT ? (size_t)(cur.p - (const uint8_t *)buf) : 0;
    return err;
}

uint64_t segd_avro_codec_fingerprint(const segd_avro_codec_t *c) { return c->local.fp; }

void segd_avro_codec_set_generic_only(segd_avro_codec_t *c, int on) { c->generic_only = on; }

segd_err_t segd_avro_decode(segd_avro_codec_t *c, segd_framing_t framing, const void *buf,
                            size_t len, segd_event_t *ev, char *errstr, size_t n)
{
    resolver_t *r = NULL;
    size_t skip = 0;
    const uint8_t *b = buf;
    segd_err_t err = frame(c, framing, b, len, &r, &skip, errstr, n);
    if (err)
        return err;
    if (r == &c->local && !c->generic_only)
        return fast_decode(b + skip, len - skip, c->max_segments, ev, errstr, n);
    /* Validate by skipping first: avro-c's reader leaks a string buffer when a
     * datum ends inside it, and skipping allocates nothing. */
    const char *body = (const char *)b + skip;
    avro_reader_memory_set_source(c->mem, body, (int64_t)(len - skip));
    if (avro_skip_data(c->mem, r->writer))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "truncated or malformed avro");
    char extra; /* the memory reader's is_eof always says no: probe one byte */
    if (avro_read(c->mem, &extra, 1) == 0)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "trailing bytes");
    avro_reader_memory_set_source(c->mem, body, (int64_t)(len - skip));
    avro_value_reset(&r->value);
    if (avro_value_read(c->mem, r->resolver_iface ? &r->wvalue : &r->value))
        err = segd_errf(SEGD_ERR_DECODE, errstr, n, "malformed avro");
    else
        err = extract(c, r, &r->value, ev, errstr, n);
    /* Emptied again at once: strings left in avro-c's value between messages
     * are invisible to LeakSanitizer from a long-lived codec (the fuzz replay
     * reported them), and a big event's buffers are not kept. */
    avro_value_reset(&r->value);
    return err;
}

segd_err_t segd_avro_encode(segd_avro_codec_t *c, segd_framing_t framing, int32_t schema_id,
                            const segd_event_t *ev, segd_buf_t *out)
{
    size_t size, head = framing == SEGD_FRAMING_CONFLUENT       ? 5
                        : framing == SEGD_FRAMING_SINGLE_OBJECT ? 10
                                                                : 0;
    segd_err_t err = SEGD_ERR_INVALID;
    out->len = 0;
    if (fill_value(&c->local.value, ev) || avro_value_sizeof(&c->local.value, &size))
        goto out_reset_value;
    /* the memory writer never grows: size the buffer first */
    if ((err = segd_buf_reserve(out, head + size)))
        goto out_reset_value;
    if (framing == SEGD_FRAMING_CONFLUENT) {
        out->data[0] = 0;
        for (int i = 0; i < 4; i++)
            out->data[1 + i] = (uint8_t)((uint32_t)schema_id >> (24 - 8 * i));
    } else if (framing == SEGD_FRAMING_SINGLE_OBJECT) {
        out->data[0] = 0xC3;
        out->data[1] = 0x01;
        for (int i = 0; i < 8; i++)
            out->data[2 + i] = (uint8_t)(c->local.fp >> (8 * i));
    }
    avro_writer_memory_set_dest(c->out, (const char *)out->data + head, (int64_t)size);
    err = avro_value_write(c->out, &c->local.value) ? SEGD_ERR_INVALID : SEGD_OK;
    if (!err)
        out->len = head + size;
out_reset_value:
    avro_value_reset(&c->local.value); /* as in decode: keep no strings */
    return err;
}

/* ---------- container files ---------- */

/* libavro trusts a block's size and allocates it: a damaged file could ask
 * for terabytes. Its blocks are walked first (mapped, not read). */
static segd_err_t check_container(const char *path, char *errstr, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        segd_err_t err = segd_errf(SEGD_ERR_DECODE, errstr, n, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return err;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "%s: %s", path, strerror(errno));
    char why[256];
    segd_err_t err = segd_ocf_check_blocks(map, len, why, sizeof(why));
    if (err)
        segd_errf(SEGD_ERR_DECODE, errstr, n, "not a readable Avro container file: %s", why);
    if (len)
        munmap(map, len);
    return err ? SEGD_ERR_DECODE : SEGD_OK;
}

segd_err_t segd_avro_file_foreach(const char *path,
                                  int (*cb)(void *ctx, const segd_event_t *ev, long record_no,
                                            const char *decode_error),
                                  void *ctx, char *errstr, size_t n)
{
    segd_err_t checked = check_container(path, errstr, n);
    if (checked)
        return checked;
    avro_file_reader_t fr;
    if (avro_file_reader(path, &fr))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "not an Avro container file: %s",
                         avro_strerror());
    segd_avro_codec_t *c = NULL;
    segd_event_t ev;
    segd_event_init(&ev);
    resolver_t r = {0};
    char *wjson = NULL;
    size_t wlen = 0;
    FILE *m = open_memstream(&wjson, &wlen);
    avro_writer_t jw = NULL;
    segd_err_t err = m ? segd_avro_codec_new(&c, NULL, NULL, errstr, n) : SEGD_ERR_NOMEM;
    if (!err) { /* the writer schema as JSON, to build a resolver */
        char buf[65536];
        jw = avro_writer_memory(buf, sizeof(buf));
        if (avro_schema_to_json(avro_file_reader_get_writer_schema(fr), jw)) {
            err = segd_errf(SEGD_ERR_DECODE, errstr, n, "unreadable writer schema");
        } else {
            fwrite(buf, 1, (size_t)avro_writer_tell(jw), m);
            fclose(m);
            m = NULL;
            err = resolver_init(&r, c->reader_json, wjson, errstr, n);
        }
    }
    long rec = 0;
    while (!err) {
        avro_value_reset(&r.value);
        int rc = avro_file_reader_read_value(fr, r.resolver_iface ? &r.wvalue : &r.value);
        if (rc == EOF)
            break;
        rec++;
        if (rc) {
            err = segd_errf(SEGD_ERR_DECODE, errstr, n, "record %ld: %s", rec, avro_strerror());
            break;
        }
        char why[256];
        if (cb(ctx, &ev, rec, extract(c, &r, &r.value, &ev, why, sizeof(why)) ? why : NULL))
            break;
    }
    if (m)
        fclose(m);
    if (jw)
        avro_writer_free(jw);
    free(wjson);
    resolver_free(&r);
    segd_avro_codec_destroy(c);
    segd_event_free(&ev);
    avro_file_reader_close(fr);
    return err;
}

struct segd_avro_file_writer {
    avro_file_writer_t fw;
    segd_avro_codec_t *codec;
};

segd_err_t segd_avro_file_writer_open(segd_avro_file_writer_t **out, const char *path,
                                      char *errstr, size_t n)
{
    segd_avro_file_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_avro_codec_new(&w->codec, NULL, NULL, errstr, n);
    if (!err && avro_file_writer_create_with_codec(path, w->codec->local.reduced, &w->fw,
                                                   "deflate", 0))
        err = segd_errf(SEGD_ERR_IO, errstr, n, "create %s: %s", path, avro_strerror());
    if (err) {
        segd_avro_codec_destroy(w->codec);
        free(w);
        return err;
    }
    *out = w;
    return SEGD_OK;
}

segd_err_t segd_avro_file_writer_append(segd_avro_file_writer_t *w, const segd_event_t *ev)
{
    int rc = fill_value(&w->codec->local.value, ev) ||
             avro_file_writer_append_value(w->fw, &w->codec->local.value);
    avro_value_reset(&w->codec->local.value); /* as in decode: keep no strings */
    return rc ? SEGD_ERR_IO : SEGD_OK;
}

segd_err_t segd_avro_file_writer_close(segd_avro_file_writer_t *w)
{
    int rc = avro_file_writer_close(w->fw);
    segd_avro_codec_destroy(w->codec);
    free(w);
    return rc ? SEGD_ERR_IO : SEGD_OK;
}
