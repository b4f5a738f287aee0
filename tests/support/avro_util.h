/* Test helper: encodes a SegmentEvent with an arbitrary (evolved) writer
 * schema through avro-c's generic values, independent of the codec under
 * test. Fields the writer lacks are skipped; an "extra" field is filled. */
#ifndef SEGD_TEST_AVRO_UTIL_H
#define SEGD_TEST_AVRO_UTIL_H

#include <avro.h>
#include <string.h>

#include "wire/avro_codec.h"
#include "core/event.h"

static int set_num(avro_value_t *rec, const char *name, int64_t v)
{
    avro_value_t f;
    if (avro_value_get_by_name(rec, name, &f, NULL))
        return 0;
    switch (avro_value_get_type(&f)) {
    case AVRO_INT32: return avro_value_set_int(&f, (int32_t)v);
    case AVRO_INT64: return avro_value_set_long(&f, v);
    case AVRO_DOUBLE: return avro_value_set_double(&f, (double)v);
    default: return -1;
    }
}

/* Writes ev as Avro binary of writer_json into buf; returns the size or -1. */
static int64_t encode_with_writer(const char *writer_json, const segd_event_t *ev, char *buf,
                                  size_t cap)
{
    avro_schema_t s;
    avro_value_t v, f, arr, item, branch;
    if (avro_schema_from_json_length(writer_json, strlen(writer_json), &s))
        return -1;
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_generic_value_new(iface, &v);
    int rc = avro_value_get_by_name(&v, "user_id", &f, NULL) ||
             avro_value_set_string_len(&f, ev->user_id, ev->user_id_len + 1) ||
             set_num(&v, "ts_ms", ev->ts_ms) || avro_value_get_by_name(&v, "op", &f, NULL) ||
             avro_value_set_enum(&f, (int)ev->op) ||
             avro_value_get_by_name(&v, "segments", &arr, NULL);
    for (size_t i = 0; !rc && i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        rc = avro_value_append(&arr, &item, NULL) || set_num(&item, "segment_id", u->segment_id) ||
             set_num(&item, "ttl_s", u->ttl_s) || set_num(&item, "flags", u->flags) ||
             set_num(&item, "partner_id", u->partner_id) || set_num(&item, "weight", 3);
    }
    if (!rc && !avro_value_get_by_name(&v, "source", &f, NULL))
        rc = avro_value_set_branch(&f, ev->source[0] ? 1 : 0, &branch) ||
             (ev->source[0] ? avro_value_set_string(&branch, ev->source)
                            : avro_value_set_null(&branch));
    rc = rc || set_num(&v, "extra", 42);
    avro_writer_t w = avro_writer_memory(buf, (int64_t)cap);
    int64_t size = rc || avro_value_write(w, &v) ? -1 : avro_writer_tell(w);
    avro_writer_free(w);
    avro_value_decref(&v);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    return size;
}

/* Writer schemas of the evolution cases: (a) lacks partner_id and source,
 * (b) has extra fields the reader lacks, (c) segment_id is an int. */
static const char *const WRITER_NO_DEFAULTS =
    "{\"type\":\"record\",\"name\":\"SegmentEvent\",\"namespace\":\"segd\",\"fields\":["
    "{\"name\":\"user_id\",\"type\":\"string\"},{\"name\":\"ts_ms\",\"type\":\"long\"},"
    "{\"name\":\"op\",\"type\":{\"type\":\"enum\",\"name\":\"Op\",\"symbols\":[\"UPSERT\","
    "\"REMOVE\",\"ERASE_USER\"]}},{\"name\":\"segments\",\"type\":{\"type\":\"array\","
    "\"items\":{\"type\":\"record\",\"name\":\"SegmentUpdate\",\"fields\":["
    "{\"name\":\"segment_id\",\"type\":\"long\"},{\"name\":\"ttl_s\",\"type\":\"int\"},"
    "{\"name\":\"flags\",\"type\":\"int\",\"default\":0}]}}}]}";
static const char *const WRITER_EXTRA =
    "{\"type\":\"record\",\"name\":\"SegmentEvent\",\"namespace\":\"segd\",\"fields\":["
    "{\"name\":\"user_id\",\"type\":\"string\"},{\"name\":\"extra\",\"type\":\"long\"},"
    "{\"name\":\"ts_ms\",\"type\":\"long\"},"
    "{\"name\":\"op\",\"type\":{\"type\":\"enum\",\"name\":\"Op\",\"symbols\":[\"UPSERT\","
    "\"REMOVE\",\"ERASE_USER\"]}},{\"name\":\"segments\",\"type\":{\"type\":\"array\","
    "\"items\":{\"type\":\"record\",\"name\":\"SegmentUpdate\",\"fields\":["
    "{\"name\":\"segment_id\",\"type\":\"long\"},{\"name\":\"ttl_s\",\"type\":\"int\"},"
    "{\"name\":\"weight\",\"type\":\"double\"},"
    "{\"name\":\"flags\",\"type\":\"int\",\"default\":0},"
    "{\"name\":\"partner_id\",\"type\":\"int\",\"default\":0}]}}},"
    "{\"name\":\"source\",\"type\":[\"null\",\"string\"],\"default\":null}]}";
static const char *const WRITER_INT_ID =
    "{\"type\":\"record\",\"name\":\"SegmentEvent\",\"namespace\":\"segd\",\"fields\":["
    "{\"name\":\"user_id\",\"type\":\"string\"},{\"name\":\"ts_ms\",\"type\":\"long\"},"
    "{\"name\":\"op\",\"type\":{\"type\":\"enum\",\"name\":\"Op\",\"symbols\":[\"UPSERT\","
    "\"REMOVE\",\"ERASE_USER\"]}},{\"name\":\"segments\",\"type\":{\"type\":\"array\","
    "\"items\":{\"type\":\"record\",\"name\":\"SegmentUpdate\",\"fields\":["
    "{\"name\":\"segment_id\",\"type\":\"int\"},{\"name\":\"ttl_s\",\"type\":\"int\"},"
    "{\"name\":\"flags\",\"type\":\"int\",\"default\":0},"
    "{\"name\":\"partner_id\",\"type\":\"int\",\"default\":0}]}}},"
    "{\"name\":\"source\",\"type\":[\"null\",\"string\"],\"default\":null}]}";


/* A single-object frame (0xC3 0x01, writer fingerprint LE, body) of ev
 * encoded with writer_json into msg; returns the frame length or 0. */
static inline size_t single_object_frame(const char *writer_json, const segd_event_t *ev,
                                         uint8_t *msg, size_t cap)
{
    uint64_t fp;
    int64_t n = encode_with_writer(writer_json, ev, (char *)msg + 10, cap - 10);
    if (n <= 0 || segd_avro_fingerprint(writer_json, &fp) != SEGD_OK)
        return 0;
    msg[0] = 0xC3;
    msg[1] = 0x01;
    for (int i = 0; i < 8; i++)
        msg[2 + i] = (uint8_t)(fp >> (8 * i));
    return (size_t)n + 10;
}

#endif
