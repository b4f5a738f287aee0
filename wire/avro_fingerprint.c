/* The schema fingerprint (segd_avro_fingerprint): CRC-64-AVRO over a
 * schema's Parsing Canonical Form, as the Avro spec defines it, so a
 * single-object message's fingerprint matches what other Avro libraries
 * compute for the same schema. The codec keys its resolvers by it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "wire/avro_codec.h"

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
