/* Tests for wire/avro_codec.c: round trips in every framing, rejection
 * of truncations and garbage, container files, schema evolution. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/varint.h"
#include "wire/avro_codec.h"
#include "tests/support/avro_util.h"

static void sample(segd_event_t *ev, segd_op_t op, const char *source)
{
    segd_event_reset(ev);
    segd_event_set_user(ev, "cookie-123", 10);
    ev->ts_ms = 1799990000123;
    ev->op = op;
    snprintf(ev->source, sizeof(ev->source), "%s", source);
    for (int i = 0; op != SEGD_OP_ERASE_USER && i < 3; i++) {
        segd_seg_update_t u = {1000000000000LL + i, 86400 * (i + 1), i - 1, 7 * i};
        segd_event_add_segment(ev, &u);
    }
}

static void assert_events_equal(const segd_event_t *a, const segd_event_t *b)
{
    assert_int_equal(a->user_id_len, b->user_id_len);
    assert_memory_equal(a->user_id, b->user_id, a->user_id_len);
    assert_int_equal(a->ts_ms, b->ts_ms);
    assert_int_equal(a->op, b->op);
    assert_string_equal(a->source, b->source);
    assert_int_equal(a->n_segments, b->n_segments);
    for (size_t i = 0; i < a->n_segments; i++) { /* field by field: the struct has padding */
        assert_int_equal(a->segments[i].segment_id, b->segments[i].segment_id);
        assert_int_equal(a->segments[i].ttl_s, b->segments[i].ttl_s);
        assert_int_equal(a->segments[i].flags, b->segments[i].flags);
        assert_int_equal(a->segments[i].partner_id, b->segments[i].partner_id);
    }
}

static void test_roundtrip_framings(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t ev, out;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    segd_op_t ops[] = {SEGD_OP_UPSERT, SEGD_OP_REMOVE, SEGD_OP_ERASE_USER};
    for (int o = 0; o < 3; o++)
        for (int s = 0; s < 2; s++) {
            sample(&ev, ops[o], s ? "dmp-a" : "");
            assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_RAW, 0, &ev, &buf), SEGD_OK);
            assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_RAW, buf.data, buf.len, &out, err,
                                              sizeof(err)), SEGD_OK);
            assert_events_equal(&ev, &out);
            assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_SINGLE_OBJECT, 0, &ev, &buf),
                             SEGD_OK);
            assert_int_equal(buf.data[0], 0xC3);
            assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, buf.data, buf.len, &out, err,
                                              sizeof(err)), SEGD_OK);
            assert_events_equal(&ev, &out);
        }
    /* a Confluent frame without a registry is undecodable input, not a fault */
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_CONFLUENT, 9, &ev, &buf), SEGD_OK);
    assert_memory_equal(buf.data, "\x00\x00\x00\x00\x09", 5);
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, buf.data, buf.len, &out, err,
                                      sizeof(err)), SEGD_ERR_SCHEMA);
    assert_non_null(strstr(err, "schema id 9"));
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

static void test_fingerprint_known_value(void **state)
{
    (void)state;
    /* CRC-64-AVRO of the canonical form "int" (Avro specification) */
    uint64_t fp;
    assert_int_equal(segd_avro_fingerprint("\"int\"", &fp), SEGD_OK);
    assert_int_equal(fp, 0x7275d51a3f395c8fULL);
    /* whitespace, doc and defaults do not change the canonical form */
    uint64_t a, b;
    assert_int_equal(segd_avro_fingerprint("{\"type\":\"record\",\"name\":\"R\",\"fields\":"
                                           "[{\"name\":\"x\",\"type\":\"int\"}]}", &a), SEGD_OK);
    assert_int_equal(segd_avro_fingerprint("{ \"name\": \"R\", \"doc\": \"d\", \"type\": "
                                           "\"record\", \"fields\": [{\"name\": \"x\", "
                                           "\"type\": {\"type\": \"int\"}, \"default\": 1}]}",
                                           &b), SEGD_OK);
    assert_int_equal(a, b);
    /* The local schema's fingerprint as python3-avro computes it (CRC-64-AVRO
     * of its canonical_form): nested names and namespaces canonicalized alike. */
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t ev;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_avro_fingerprint(segd_avro_codec_reader_json(c), &fp), SEGD_OK);
    assert_int_equal(fp, 0xe5489f98e9f604c1ULL);
    sample(&ev, SEGD_OP_ERASE_USER, "");
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_SINGLE_OBJECT, 0, &ev, &buf), SEGD_OK);
    assert_memory_equal(buf.data, "\xc3\x01\xc1\x04\xf6\xe9\x98\x9f\x48\xe5", 10);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_avro_codec_destroy(c);
}

static void test_truncations_and_garbage_rejected(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t ev, out;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    sample(&ev, SEGD_OP_UPSERT, "x");
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_SINGLE_OBJECT, 0, &ev, &buf), SEGD_OK);
    for (size_t len = 0; len < buf.len; len++) {
        uint8_t *t = malloc(len + 1);
        memcpy(t, buf.data, len);
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_SINGLE_OBJECT, t, len, &out, err,
                                          sizeof(err)), SEGD_ERR_DECODE);
        free(t);
    }
    /* one byte too many */
    assert_int_equal(segd_buf_reserve(&buf, 1), SEGD_OK);
    buf.data[buf.len] = 0;
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_SINGLE_OBJECT, buf.data, buf.len + 1, &out,
                                      err, sizeof(err)), SEGD_ERR_DECODE);
    assert_string_equal(err, "trailing bytes");
    uint64_t rng = 1;
    for (int i = 0; i < 20000; i++) {
        uint8_t g[48];
        size_t len = 1 + i % 47;
        for (size_t j = 0; j < len; j++)
            g[j] = (uint8_t)((rng = rng * 6364136223846793005ull + 1) >> 56);
        segd_err_t e = segd_avro_decode(c, SEGD_FRAMING_RAW, g, len, &out, err, sizeof(err));
        assert_true(e == SEGD_OK || e == SEGD_ERR_DECODE || e == SEGD_ERR_SCHEMA || e == SEGD_ERR_LIMIT);
    }
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

/* Single-object frames written with evolved writer schemas. */
static void test_schema_evolution(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    uint8_t msg[600];
    segd_event_t ev, out;
    segd_event_init(&ev);
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    const char *writers[] = {WRITER_NO_DEFAULTS, WRITER_EXTRA, WRITER_INT_ID};
    for (int w = 0; w < 3; w++) {
        sample(&ev, SEGD_OP_UPSERT, w == 0 ? "" : "dmp");
        if (w == 2)
            for (size_t i = 0; i < ev.n_segments; i++)
                ev.segments[i].segment_id = 70000 + (int64_t)i;
        size_t len = single_object_frame(writers[w], &ev, msg, sizeof(msg));
        assert_true(len > 10);
        /* unknown until the schema is added */
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, len, &out, err,
                                          sizeof(err)), SEGD_ERR_SCHEMA);
        assert_int_equal(segd_avro_codec_add_schema(c, writers[w], err, sizeof(err)), SEGD_OK);
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, len, &out, err,
                                          sizeof(err)), SEGD_OK);
        if (w == 0) /* partner_id and source come from the reader's defaults */
            for (size_t i = 0; i < ev.n_segments; i++)
                ev.segments[i].partner_id = 0;
        assert_events_equal(&ev, &out);
    }
    segd_event_free(&ev);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

/* The hand-written decoder of the local schema agrees with avro-c's generic
 * values: whatever it accepts avro-c reads identically, and both accept every
 * valid event; truncated and corrupted inputs exercise the first rule. */
static void test_fast_path_matches_avro_c(void **state)
{
    (void)state;
    segd_avro_codec_t *fast, *slow;
    char err[256];
    segd_event_t ev, a, b;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    segd_event_init(&a);
    segd_event_init(&b);
    assert_int_equal(segd_avro_codec_new(&fast, NULL, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_avro_codec_new(&slow, NULL, NULL, err, sizeof(err)), SEGD_OK);
    segd_avro_codec_set_generic_only(slow, 1);
    uint64_t rng = 99;
    for (int round = 0; round < 3000; round++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        sample(&ev, (segd_op_t)(rng >> 62) % 3, (rng >> 40) & 1 ? "s" : "");
        for (int i = 0; i < (int)((rng >> 20) % 200); i++) {
            segd_seg_update_t u = {(int64_t)(rng >> (i % 20)), (int32_t)(rng >> 33),
                                   -(int32_t)i, (int32_t)(rng >> 50)};
            segd_event_add_segment(&ev, &u);
        }
        assert_int_equal(segd_avro_encode(fast, SEGD_FRAMING_RAW, 0, &ev, &buf), SEGD_OK);
        size_t cut = round % 2 ? buf.len : (size_t)(rng >> 8) % (buf.len + 1);
        if (round % 3 == 0 && cut) /* corrupt a byte too */
            buf.data[(rng >> 16) % cut] ^= (uint8_t)(rng >> 24);
        segd_err_t ea = segd_avro_decode(fast, SEGD_FRAMING_RAW, buf.data, cut, &a, err, sizeof(err));
        segd_err_t eb = segd_avro_decode(slow, SEGD_FRAMING_RAW, buf.data, cut, &b, err, sizeof(err));
        /* the fast path may be stricter (over-long varints), never laxer */
        if (ea == SEGD_OK) {
            assert_int_equal(eb, SEGD_OK);
            assert_events_equal(&a, &b);
        }
        if (round % 2 && round % 3) /* untouched input: both accept */
            assert_int_equal(eb, SEGD_OK);
        if (round % 2 && round % 3)
            assert_events_equal(&ev, &a);
    }
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_event_free(&a);
    segd_event_free(&b);
    segd_avro_codec_destroy(fast);
    segd_avro_codec_destroy(slow);
}

/* Headers alone, short or unknown: rejected with their stable reasons. */
static void test_framing_errors(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t out;
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_avro_codec_add_schema(c, WRITER_EXTRA, err, sizeof(err)), SEGD_OK);
    static const struct {
        const char *bytes;
        size_t len;
        segd_framing_t framing;
        const char *reason;
        segd_err_t err; /* schema problems have a code of their own (DLQ unknown_schema) */
    } cases[] = {
        {"\x00", 1, SEGD_FRAMING_AUTO, "truncated confluent header", SEGD_ERR_DECODE},
        {"\x00\x00\x00\x01", 4, SEGD_FRAMING_AUTO, "truncated confluent header", SEGD_ERR_DECODE},
        {"\x02", 1, SEGD_FRAMING_CONFLUENT, "bad magic byte", SEGD_ERR_DECODE},
        {"", 0, SEGD_FRAMING_CONFLUENT, "bad magic byte", SEGD_ERR_DECODE},
        /* id -1 must not find the locally added schemas, cached under -1 */
        {"\x00\xff\xff\xff\xff\x02", 6, SEGD_FRAMING_AUTO, "unknown schema id -1", SEGD_ERR_SCHEMA},
        {"\xc3\x01\x00", 3, SEGD_FRAMING_AUTO, "truncated single-object header", SEGD_ERR_DECODE},
        {"\xc3\x02", 2, SEGD_FRAMING_SINGLE_OBJECT, "bad magic byte", SEGD_ERR_DECODE},
        {"\xc3\x01\x01\x02\x03\x04\x05\x06\x07\x08\x02", 11, SEGD_FRAMING_AUTO,
         "unknown schema fingerprint 0807060504030201", SEGD_ERR_SCHEMA},
        {"", 0, SEGD_FRAMING_RAW, "truncated or malformed avro", SEGD_ERR_DECODE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(segd_avro_decode(c, cases[i].framing, cases[i].bytes, cases[i].len,
                                          &out, err, sizeof(err)), cases[i].err);
        assert_string_equal(err, cases[i].reason);
    }
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

/* More segments than the limit stop the decode, in both decoders. */
static void test_segment_limit(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    segd_event_t ev, out;
    segd_buf_t buf = {0};
    segd_limits_t lim;
    segd_event_init(&ev);
    segd_event_init(&out);
    segd_limits_default(&lim);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    sample(&ev, SEGD_OP_UPSERT, "");
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_RAW, 0, &ev, &buf), SEGD_OK);
    for (int generic = 0; generic < 2; generic++) {
        segd_avro_codec_set_generic_only(c, generic);
        lim.max_segments = 3;
        segd_avro_codec_set_limits(c, &lim);
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_RAW, buf.data, buf.len, &out, err,
                                          sizeof(err)), SEGD_OK);
        lim.max_segments = 2;
        segd_avro_codec_set_limits(c, &lim);
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_RAW, buf.data, buf.len, &out, err,
                                          sizeof(err)), SEGD_ERR_LIMIT);
        assert_string_equal(err, "more than 2 segments");
    }
    /* in a container block (records back to back), a record over the limit is
     * refused as a whole: the next one decodes from where it ended */
    size_t one = buf.len, used = 0;
    segd_buf_t second = {0};
    sample(&ev, SEGD_OP_REMOVE, "next");
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_RAW, 0, &ev, &second), SEGD_OK);
    assert_int_equal(segd_buf_append(&buf, second.data, second.len), SEGD_OK);
    segd_buf_free(&second);
    segd_avro_codec_set_generic_only(c, 0);
    assert_int_equal(segd_avro_decode_local_prefix(c, buf.data, buf.len, &used, &out, err,
                                                   sizeof(err)), SEGD_ERR_LIMIT);
    assert_int_equal(used, one);
    assert_true(out.n_segments <= 2); /* nothing past the limit is kept */
    assert_int_equal(segd_avro_decode_local_prefix(c, buf.data + one, buf.len - one, &used,
                                                   &out, err, sizeof(err)), SEGD_ERR_LIMIT);
    lim.max_segments = 3;
    segd_avro_codec_set_limits(c, &lim);
    assert_int_equal(segd_avro_decode_local_prefix(c, buf.data + one, buf.len - one, &used,
                                                   &out, err, sizeof(err)), SEGD_OK);
    assert_int_equal(used, buf.len - one);
    assert_events_equal(&out, &ev);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

/* The avro-c path (evolved writers through a resolver) on every truncation,
 * single-byte corruptions and random bodies: no crash, no leak, no
 * out-of-bounds read (ASan), and only DECODE / LIMIT errors. */
static void test_evolved_truncations_and_garbage(void **state)
{
    (void)state;
    segd_avro_codec_t *c;
    char err[256];
    uint8_t msg[600];
    segd_event_t ev, out;
    segd_event_init(&ev);
    segd_event_init(&out);
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    const char *writers[] = {WRITER_NO_DEFAULTS, WRITER_EXTRA, WRITER_INT_ID};
    uint64_t rng = 7;
    for (int w = 0; w < 3; w++) {
        assert_int_equal(segd_avro_codec_add_schema(c, writers[w], err, sizeof(err)), SEGD_OK);
        sample(&ev, SEGD_OP_UPSERT, w ? "dmp" : "");
        for (size_t i = 0; w == 2 && i < ev.n_segments; i++)
            ev.segments[i].segment_id = (int64_t)i;
        size_t len = single_object_frame(writers[w], &ev, msg, sizeof(msg) - 1);
        assert_true(len > 10);
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *t = malloc(cut + 1); /* exact size: ASan sees any overread */
            memcpy(t, msg, cut);
            assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, t, cut, &out, err,
                                              sizeof(err)), SEGD_ERR_DECODE);
            free(t);
        }
        msg[len] = 0;
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_AUTO, msg, len + 1, &out, err,
                                          sizeof(err)), SEGD_ERR_DECODE);
        assert_string_equal(err, "trailing bytes");
        for (int round = 0; round < 4000; round++) {
            uint8_t t[600];
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            memcpy(t, msg, len);
            size_t tlen = len;
            if (round % 2) { /* flip one body byte */
                t[10 + (rng >> 20) % (uint64_t)(len - 10)] ^= (uint8_t)((rng >> 40) | 1);
            } else { /* random body after a known header */
                tlen = 10 + (rng >> 30) % 40;
                for (size_t j = 10; j < tlen; j++)
                    t[j] = (uint8_t)((rng = rng * 6364136223846793005ull + 1) >> 56);
            }
            segd_err_t e = segd_avro_decode(c, SEGD_FRAMING_AUTO, t, tlen, &out, err, sizeof(err));
            assert_true(e == SEGD_OK || e == SEGD_ERR_DECODE || e == SEGD_ERR_SCHEMA || e == SEGD_ERR_LIMIT);
        }
    }
    segd_event_free(&ev);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

typedef struct collect {
    segd_event_t ev[8];
    int n, errors;
} collect_t;

static int collect_cb(void *ctx, const segd_event_t *ev, long no, const char *error)
{
    collect_t *c = ctx;
    assert_int_equal(no, c->n + c->errors + 1);
    if (error) {
        c->errors++;
        return 0;
    }
    segd_event_init(&c->ev[c->n]);
    segd_event_set_user(&c->ev[c->n], ev->user_id, ev->user_id_len);
    c->ev[c->n].ts_ms = ev->ts_ms;
    c->ev[c->n].op = ev->op;
    memcpy(c->ev[c->n].source, ev->source, sizeof(ev->source));
    for (size_t i = 0; i < ev->n_segments; i++)
        segd_event_add_segment(&c->ev[c->n], &ev->segments[i]);
    c->n++;
    return 0;
}

static void test_container_file_roundtrip(void **state)
{
    (void)state;
    char path[] = "/tmp/segd-test-avro-XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    remove(path);
    segd_avro_file_writer_t *w;
    segd_event_t ev[3];
    assert_int_equal(segd_avro_file_writer_open(&w, path, err, sizeof(err)), SEGD_OK);
    segd_op_t ops[] = {SEGD_OP_UPSERT, SEGD_OP_REMOVE, SEGD_OP_ERASE_USER};
    for (int i = 0; i < 3; i++) {
        segd_event_init(&ev[i]);
        sample(&ev[i], ops[i], i == 1 ? "src" : "");
        assert_int_equal(segd_avro_file_writer_append(w, &ev[i]), SEGD_OK);
    }
    assert_int_equal(segd_avro_file_writer_close(w), SEGD_OK);
    collect_t c = {0};
    assert_int_equal(segd_avro_file_foreach(path, collect_cb, &c, err, sizeof(err)), SEGD_OK);
    assert_int_equal(c.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_events_equal(&ev[i], &c.ev[i]);
        segd_event_free(&ev[i]);
        segd_event_free(&c.ev[i]);
    }
    remove(path);
    assert_int_equal(segd_avro_file_foreach("/nonexistent.avro", collect_cb, &c, err,
                                            sizeof(err)), SEGD_ERR_DECODE);
}

static segd_err_t counting_lookup(void *ctx, int32_t id, const char **json, char *errstr,
                                  size_t n)
{
    (void)json;
    ++*(int *)ctx;
    return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "no schema %d", id);
}

/* An id the registry does not know is remembered for a while: a flood of
 * such messages costs one round trip, not one each. */
static void test_unknown_schema_id_negative_cache(void **state)
{
    (void)state;
    int calls = 0;
    segd_schema_source_t src = {counting_lookup, &calls};
    segd_avro_codec_t *c;
    char err[256];
    assert_int_equal(segd_avro_codec_new(&c, NULL, &src, err, sizeof(err)), SEGD_OK);
    segd_event_t out;
    segd_event_init(&out);
    const uint8_t msg[] = {0, 0, 0, 0, 77, 2, 'u'};
    for (int i = 0; i < 100; i++) {
        assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_CONFLUENT, msg, sizeof(msg), &out,
                                          err, sizeof(err)), SEGD_ERR_SCHEMA);
        assert_string_equal(err, "unknown schema id 77");
    }
    assert_int_equal(calls, 1);
    const uint8_t other[] = {0, 0, 0, 0, 78, 2, 'u'};
    assert_int_equal(segd_avro_decode(c, SEGD_FRAMING_CONFLUENT, other, sizeof(other), &out,
                                      err, sizeof(err)), SEGD_ERR_SCHEMA);
    assert_int_equal(calls, 2);
    segd_event_free(&out);
    segd_avro_codec_destroy(c);
}

/* A damaged block size must be refused before libavro sees it: libavro
 * allocates whatever a block claims (here 2^40 bytes). */
static void test_container_file_damaged_block_size(void **state)
{
    (void)state;
    char path[] = "/tmp/segd-test-avro-XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    remove(path);
    segd_avro_file_writer_t *w;
    segd_event_t ev;
    segd_event_init(&ev);
    sample(&ev, SEGD_OP_UPSERT, "");
    assert_int_equal(segd_avro_file_writer_open(&w, path, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_avro_file_writer_append(w, &ev), SEGD_OK);
    assert_int_equal(segd_avro_file_writer_close(w), SEGD_OK);
    segd_event_free(&ev);
    FILE *f = fopen(path, "rb");
    uint8_t data[65536];
    size_t len = fread(data, 1, sizeof(data), f);
    fclose(f);
    assert_true(len > 32 && len < sizeof(data));
    /* the sync marker ends the file and the header: the first block follows */
    const uint8_t *sync = data + len - 16;
    size_t hdr = 0;
    while (memcmp(data + hdr, sync, 16))
        hdr++;
    hdr += 16;
    const uint8_t *p = data + hdr, *end = data + len;
    int64_t count = 0, size = 0;
    assert_int_equal(segd_zz_get(&p, end, &count), 0);
    assert_int_equal(segd_zz_get(&p, end, &size), 0);
    uint8_t bad[65600];
    size_t n = hdr;
    memcpy(bad, data, hdr);
    n += segd_zz_put(bad + n, count);
    n += segd_zz_put(bad + n, (int64_t)1 << 40);
    memcpy(bad + n, p, (size_t)(end - p));
    n += (size_t)(end - p);
    f = fopen(path, "wb");
    assert_int_equal(fwrite(bad, 1, n, f), n);
    fclose(f);
    collect_t c = {0};
    assert_int_equal(segd_avro_file_foreach(path, collect_cb, &c, err, sizeof(err)),
                     SEGD_ERR_DECODE);
    assert_non_null(strstr(err, "block 0 at byte"));
    assert_int_equal(c.n, 0);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_framings),
        cmocka_unit_test(test_fingerprint_known_value),
        cmocka_unit_test(test_truncations_and_garbage_rejected),
        cmocka_unit_test(test_schema_evolution),
        cmocka_unit_test(test_container_file_roundtrip),
        cmocka_unit_test(test_container_file_damaged_block_size),
        cmocka_unit_test(test_unknown_schema_id_negative_cache),
        cmocka_unit_test(test_fast_path_matches_avro_c),
        cmocka_unit_test(test_framing_errors),
        cmocka_unit_test(test_segment_limit),
        cmocka_unit_test(test_evolved_truncations_and_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
