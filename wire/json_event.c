/* JSON-lines SegmentEvent parsing and writing; see json_event.h. The reference
 * parser and the writer use jansson; segd_json_event_parse (the second half)
 * is a hand-written strict parser for the one SegmentEvent shape, held equal
 * to the reference by tests/unit/wire/test_json_event.c and fuzz/fuzz_json_event.c.
 * This file holds its SegmentEvent fields; the parser under them is
 * json_scan.c (tokens) and json_walk.c (objects and arrays). */
#include "wire/json_event.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wire/json_int.h"
#include "wire/json_scan.h"

static int get_int(json_t *obj, const char *name, int required, long long lo,
                   long long hi, long long dflt, long long *out, char *errstr, size_t n)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (required)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field %s", name), -1;
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "field %s is not an integer", name), -1;
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "field %s out of range", name), -1;
    *out = x;
    return 0;
}

static segd_err_t parse_segment(json_t *s, segd_event_t *ev, char *errstr, size_t n)
{
    long long id, ttl, flags, partner;
    if (!json_is_object(s))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segment is not an object");
    if (get_int(s, "segment_id", 1, INT64_MIN, INT64_MAX, 0, &id, errstr, n) ||
        get_int(s, "ttl_s", ev->op == SEGD_OP_UPSERT, INT32_MIN, INT32_MAX, 0, &ttl,
                errstr, n) ||
        get_int(s, "flags", 0, INT32_MIN, INT32_MAX, 0, &flags, errstr, n) ||
        get_int(s, "partner_id", 0, INT32_MIN, INT32_MAX, 0, &partner, errstr, n))
        return SEGD_ERR_DECODE;
    segd_seg_update_t u = {id, (int32_t)ttl, (int32_t)flags, (int32_t)partner};
    return segd_event_add_segment(ev, &u);
}

static segd_err_t parse_object(json_t *root, segd_event_t *ev, char *errstr, size_t n)
{
    json_t *user = json_object_get(root, "user_id"), *op = json_object_get(root, "op");
    json_t *segs = json_object_get(root, "segments"), *src = json_object_get(root, "source");
    long long ts;
    if (!json_is_string(user))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "user_id missing or not a string");
    if (segd_event_set_user(ev, json_string_value(user), json_string_length(user)))
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "user_id longer than %d bytes",
                         SEGD_MAX_USER_ID);
    if (get_int(root, "ts_ms", 1, INT64_MIN, INT64_MAX, 0, &ts, errstr, n))
        return SEGD_ERR_DECODE;
    ev->ts_ms = ts;
    if (!json_is_string(op) || segd_op_parse(json_string_value(op), &ev->op))
        return segd_errf(SEGD_ERR_DECODE, errstr, n,
                         "op must be UPSERT, REMOVE or ERASE_USER");
    if (src && json_is_string(src))
        snprintf(ev->source, sizeof(ev->source), "%s", json_string_value(src));
    else if (src && !json_is_null(src))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "source is not a string");
    if (!segs && ev->op == SEGD_OP_ERASE_USER)
        return SEGD_OK;
    if (!json_is_array(segs))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segments missing or not an array");
    size_t i;
    json_t *s;
    json_array_foreach(segs, i, s)
    {
        segd_err_t err = parse_segment(s, ev, errstr, n);
        if (err)
            return err;
    }
    return SEGD_OK;
}

segd_err_t segd_json_event_parse_reference(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    json_error_t jerr;
    segd_event_reset(ev);
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: %s", jerr.text);
    segd_err_t err = json_is_object(root)
                         ? parse_object(root, ev, errstr, n)
                         : segd_errf(SEGD_ERR_DECODE, errstr, n, "not a JSON object");
    json_decref(root);
    return err;
}

int segd_json_event_write(const segd_event_t *ev, FILE *f)
{
    json_t *segs = json_array();
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        json_array_append_new(segs, json_pack("{s:I,s:i,s:i,s:i}", "segment_id",
                                              (json_int_t)u->segment_id, "ttl_s", u->ttl_s,
                                              "flags", u->flags, "partner_id",
                                              u->partner_id));
    }
    json_t *root = json_pack("{s:s%,s:I,s:s,s:o}", "user_id", ev->user_id, ev->user_id_len,
                             "ts_ms", (json_int_t)ev->ts_ms, "op", segd_op_name(ev->op),
                             "segments", segs);
    if (!root)
        return -1;
    if (ev->source[0])
        json_object_set_new(root, "source", json_string(ev->source));
    int rc = json_dumpf(root, f, JSON_COMPACT) || fputc('\n', f) == EOF ? -1 : 0;
    json_decref(root);
    return rc;
}

/* ---------- the fast parser: the SegmentEvent fields ---------- */

/* An integer field's value: null (= absent) or an integer in [lo, hi]. */
static int jp_int_field(jp_t *j, const char *name, long long lo, long long hi, int *present,
                        long long *out)
{
    int is_int = 0;
    if (segd_jp_enter(j))
        return -1;
    j->depth--; /* a scalar: counted, nothing nested */
    if (j->p < j->end && *j->p == 'n') {
        *present = 0;
        return segd_jp_literal(j);
    }
    if (j->p >= j->end || !(*j->p == '-' || (*j->p >= '0' && *j->p <= '9')))
        return segd_jp_fail(j, SEGD_ERR_DECODE, "field %s is not an integer", name);
    if (segd_jp_number(j, &is_int, out))
        return -1;
    if (!is_int)
        return segd_jp_fail(j, SEGD_ERR_DECODE, "field %s is not an integer", name);
    if (*out < lo || *out > hi)
        return segd_jp_fail(j, SEGD_ERR_DECODE, "field %s out of range", name);
    *present = 1;
    return 0;
}

/* A string field's value into o; *is_null for null. */
static int jp_str_field(jp_t *j, jp_out_t *o, int *is_null)
{
    if (segd_jp_enter(j))
        return -1;
    j->depth--;
    *is_null = 0;
    if (j->p < j->end && *j->p == '"')
        return segd_jp_string(j, o);
    if (j->p < j->end && *j->p == 'n' && !segd_jp_literal(j)) {
        *is_null = 1;
        return 0;
    }
    return -2; /* not a string: the caller says why */
}

enum { F_USER = 1, F_TS = 2, F_OP = 4, F_SEGS = 8, F_SOURCE = 16,
       F_SEG_ID = 1, F_TTL = 2, F_FLAGS = 4, F_PARTNER = 8 };

typedef struct jp_event {
    segd_event_t *ev;
    unsigned seen;
    int op_set, ts_set;
    size_t missing_ttl; /* segments without ttl_s: refused if op is UPSERT */
} jp_event_t;

typedef struct jp_seg {
    segd_seg_update_t u;
    unsigned seen;
    int has_id, has_ttl;
} jp_seg_t;

#define KEY_IS(key, len, lit) ((len) == sizeof(lit) - 1 && !memcmp((key), lit, sizeof(lit) - 1))

static int seg_field(jp_t *j, const char *key, size_t len, void *ctx)
{
    jp_seg_t *s = ctx;
    long long v;
    int present, *has = NULL;
    unsigned bit;
    const char *name;
    if (KEY_IS(key, len, "segment_id"))
        bit = F_SEG_ID, name = "segment_id", has = &s->has_id;
    else if (KEY_IS(key, len, "ttl_s"))
        bit = F_TTL, name = "ttl_s", has = &s->has_ttl;
    else if (KEY_IS(key, len, "flags"))
        bit = F_FLAGS, name = "flags";
    else if (KEY_IS(key, len, "partner_id"))
        bit = F_PARTNER, name = "partner_id";
    else
        return 0;
    if (s->seen & bit)
        return segd_jp_syntax(j, "duplicate object key");
    s->seen |= bit;
    int wide = bit == F_SEG_ID;
    if (jp_int_field(j, name, wide ? INT64_MIN : INT32_MIN, wide ? INT64_MAX : INT32_MAX,
                     &present, &v))
        return -1;
    if (!present)
        v = 0;
    if (has)
        *has = present;
    if (bit == F_SEG_ID)
        s->u.segment_id = v;
    else if (bit == F_TTL)
        s->u.ttl_s = (int32_t)v;
    else if (bit == F_FLAGS)
        s->u.flags = (int32_t)v;
    else
        s->u.partner_id = (int32_t)v;
    return 1;
}

static int seg_elem(jp_t *j, void *ctx)
{
    jp_event_t *e = ctx;
    jp_seg_t s;
    memset(&s, 0, sizeof(s));
    if (segd_jp_enter(j))
        return -1;
    if (j->p >= j->end || *j->p != '{') {
        /* the reference reads the whole document first: a syntax error
         * later in the line is refused all the same */
        return segd_jp_fail(j, SEGD_ERR_DECODE, "segment is not an object", NULL);
    }
    if (segd_jp_object(j, seg_field, &s))
        return -1;
    j->depth--;
    if (!s.has_id)
        return segd_jp_fail(j, SEGD_ERR_DECODE, "missing field %s", "segment_id");
    if (!s.has_ttl)
        e->missing_ttl++;
    if (segd_event_add_segment(e->ev, &s.u))
        return segd_jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
    return 0;
}

static int ev_field(jp_t *j, const char *key, size_t len, void *ctx)
{
    jp_event_t *e = ctx;
    segd_event_t *ev = e->ev;
    unsigned bit;
    if (KEY_IS(key, len, "user_id"))
        bit = F_USER;
    else if (KEY_IS(key, len, "ts_ms"))
        bit = F_TS;
    else if (KEY_IS(key, len, "op"))
        bit = F_OP;
    else if (KEY_IS(key, len, "segments"))
        bit = F_SEGS;
    else if (KEY_IS(key, len, "source"))
        bit = F_SOURCE;
    else
        return 0;
    if (e->seen & bit)
        return segd_jp_syntax(j, "duplicate object key");
    e->seen |= bit;
    int is_null, rc;
    if (bit == F_USER) {
        jp_out_t o = {ev->user_id, SEGD_MAX_USER_ID, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (rc || is_null)
            return segd_jp_fail(j, SEGD_ERR_DECODE, "user_id missing or not a string", NULL);
        if (o.len > SEGD_MAX_USER_ID)
            return segd_jp_fail(j, SEGD_ERR_LIMIT, "user_id longer than 256 bytes", NULL);
        ev->user_id[o.len] = 0;
        ev->user_id_len = o.len;
    } else if (bit == F_TS) {
        long long v;
        if (jp_int_field(j, "ts_ms", INT64_MIN, INT64_MAX, &e->ts_set, &v))
            return -1;
        ev->ts_ms = v;
    } else if (bit == F_OP) {
        char name[16];
        jp_out_t o = {name, sizeof(name) - 1, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (!rc && !is_null && o.len < sizeof(name)) {
            name[o.len] = 0;
            if (strlen(name) == o.len && !segd_op_parse(name, &ev->op)) {
                e->op_set = 1;
                return 1;
            }
        }
        return segd_jp_fail(j, SEGD_ERR_DECODE, "op must be UPSERT, REMOVE or ERASE_USER", NULL);
    } else if (bit == F_SOURCE) {
        jp_out_t o = {ev->source, sizeof(ev->source) - 1, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (rc)
            return segd_jp_fail(j, SEGD_ERR_DECODE, "source is not a string", NULL);
        /* as snprintf("%s") into the field: cut at its size */
        ev->source[is_null ? 0 : o.len < sizeof(ev->source) ? o.len : sizeof(ev->source) - 1] =
            0;
    } else {
        if (segd_jp_enter(j))
            return -1;
        if (j->p >= j->end || *j->p != '[')
            return segd_jp_fail(j, SEGD_ERR_DECODE, "segments missing or not an array", NULL);
        if (segd_jp_array(j, seg_elem, e))
            return -1;
        j->depth--;
    }
    return 1;
}

segd_err_t segd_json_event_parse(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    jp_t j = {(const uint8_t *)line, (const uint8_t *)line + len, 0, errstr, n, SEGD_OK};
    jp_event_t e = {ev, 0, 0, 0, 0};
    segd_event_reset(ev);
    jp_ws(&j);
    if (j.p >= j.end || *j.p != '{') {
        if (j.p < j.end && *j.p == '[') { /* valid JSON, but not an object */
            if (segd_jp_skip_value(&j))
                return j.code ? j.code : SEGD_ERR_DECODE;
            jp_ws(&j);
            if (j.p != j.end)
                return segd_jp_syntax(&j, "end of input expected"), j.code;
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "not a JSON object");
        }
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: '[' or '{' expected");
    }
    j.depth = 1;
    if (segd_jp_object(&j, ev_field, &e))
        return j.code ? j.code : SEGD_ERR_DECODE;
    jp_ws(&j);
    if (j.p != j.end)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: end of input expected");
    if (!(e.seen & F_USER))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "user_id missing or not a string");
    if (!e.ts_set)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field ts_ms");
    if (!e.op_set)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "op must be UPSERT, REMOVE or ERASE_USER");
    if (!(e.seen & F_SEGS) && ev->op != SEGD_OP_ERASE_USER)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segments missing or not an array");
    if (ev->op == SEGD_OP_UPSERT && e.missing_ttl)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field ttl_s");
    return SEGD_OK;
}
