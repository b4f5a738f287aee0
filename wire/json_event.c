/* JSON-lines SegmentEvent parsing and writing with jansson; see json_event.h. */
#include "wire/json_event.h"

#include <jansson.h>
#include <string.h>

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

segd_err_t segd_json_event_parse(const char *line, size_t len, segd_event_t *ev,
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
