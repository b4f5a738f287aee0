/* Tests for load/reader.c: every line of a multi-block file is delivered
 * exactly once with its own line number on 1 and 3 threads; a line longer
 * than a block is reported, counted and skipped with its neighbours intact;
 * a callback that refuses a chunk stops the load (no chunk after it); the
 * operands are the ones segd_applier_add_from would write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/record.h"
#include "load/reader.h"
#include "wire/json_event.h"
#include "workload/seed.h"

#define LINES 4000

typedef struct seen {
    uint8_t *lines;   /* how often each line number was delivered */
    size_t n_lines;
    uint64_t chunks, items, segments;
    int stop_after;   /* refuse the chunk after this many (0: never) */
    char **expect;    /* operand hex per line, to compare (may be NULL) */
} seen_t;

static char path_tmpl[] = "/tmp/segd-load-XXXXXX";
static char *dir;

static void write_file(const char *path, size_t lines, size_t long_line_at, size_t long_len)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    segd_seed_opts_t so;
    segd_seed_t *g;
    segd_event_t ev;
    segd_event_init(&ev);
    segd_seed_opts_default(&so);
    so.users = lines / 50 + 1;
    so.now_ms = 1800000000000LL;
    assert_int_equal(segd_seed_new(&g, &so), SEGD_OK);
    for (size_t i = 1; i <= lines; i++) {
        if (i == long_line_at) {
            for (size_t k = 0; k < long_len; k++)
                fputc('x', f);
            fputc('\n', f);
            continue;
        }
        assert_true(segd_seed_next(g, &ev));
        assert_int_equal(segd_json_event_write(&ev, f), 0);
    }
    segd_seed_destroy(g);
    segd_event_free(&ev);
    assert_int_equal(fclose(f), 0);
}

static int on_chunk(void *ctx, const segd_load_chunk_t *c)
{
    seen_t *s = ctx;
    if (s->stop_after && s->chunks == (uint64_t)s->stop_after)
        fail_msg("a chunk arrived after the callback refused one");
    s->chunks++;
    for (size_t i = 0; i < c->n_items; i++) {
        const segd_load_item_t *it = &c->items[i];
        assert_true(it->record_no >= 1 && (size_t)it->record_no <= s->n_lines);
        s->lines[it->record_no - 1]++;
        s->segments += it->n_segments;
        assert_true(it->user_len > 0 && it->operand_len > 0);
        segd_profile_t p;
        segd_profile_init(&p);
        assert_int_equal(segd_record_decode(it->operand, it->operand_len, &p), SEGD_OK);
        assert_int_equal(p.n, it->n_segments); /* seed ids are distinct per event */
        segd_profile_free(&p);
    }
    s->items += c->n_items;
    return s->stop_after && s->chunks == (uint64_t)s->stop_after ? -1 : 0;
}

static segd_load_opts_t opts(int threads)
{
    segd_load_opts_t o = {.prog = "test", .threads = threads, .granularity_s = 3600,
                          .errors = stderr};
    segd_limits_default(&o.limits);
    return o;
}

static void test_every_line_once(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/a.jsonl", dir);
    write_file(path, LINES, 0, 0);
    for (int threads = 1; threads <= 3; threads += 2) {
        seen_t s = {calloc(LINES, 1), LINES, 0, 0, 0, 0, NULL};
        segd_load_opts_t o = opts(threads);
        segd_load_stats_t st;
        char err[256], *paths[] = {path};
        assert_int_equal(segd_load_files(&o, paths, 1, on_chunk, &s, &st, err, sizeof(err)),
                         SEGD_OK);
        for (size_t i = 0; i < LINES; i++)
            if (s.lines[i] != 1)
                fail_msg("threads %d: line %zu delivered %d times", threads, i + 1,
                         s.lines[i]);
        assert_int_equal(st.events, LINES);
        assert_int_equal(st.segments, (uint64_t)LINES * 20);
        assert_int_equal(s.segments, st.segments);
        assert_int_equal(st.skipped, 0);
        assert_false(st.stopped);
        assert_true(s.chunks > 3); /* several blocks: the numbering crossed them */
        free(s.lines);
    }
    unlink(path);
}

static void test_long_line(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/long.jsonl", dir);
    write_file(path, 1000, 500, 3u << 20); /* 3 MiB: longer than a block */
    seen_t s = {calloc(1000, 1), 1000, 0, 0, 0, 0, NULL};
    segd_load_opts_t o = opts(2);
    segd_load_stats_t st;
    char err[256], *paths[] = {path};
    assert_int_equal(segd_load_files(&o, paths, 1, on_chunk, &s, &st, err, sizeof(err)),
                     SEGD_OK);
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(s.lines[i], i == 499 ? 0 : 1);
    assert_int_equal(st.skipped, 1);
    assert_int_equal(st.events, 999);
    free(s.lines);
    unlink(path);
}

static void test_callback_stops(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/b.jsonl", dir);
    write_file(path, LINES, 0, 0);
    seen_t s = {calloc(LINES, 1), LINES, 0, 0, 0, 2, NULL};
    segd_load_opts_t o = opts(3);
    segd_load_stats_t st;
    char err[256], *paths[] = {path, path};
    assert_int_equal(segd_load_files(&o, paths, 2, on_chunk, &s, &st, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(s.chunks, 2);
    assert_true(st.stopped);
    assert_true(st.events < LINES);
    free(s.lines);
    unlink(path);
}

static void test_missing_file(void **state)
{
    (void)state;
    seen_t s = {calloc(1, 1), 1, 0, 0, 0, 0, NULL};
    segd_load_opts_t o = opts(2);
    segd_load_stats_t st;
    char err[256], *paths[] = {"/nonexistent/x.jsonl", dir};
    assert_int_equal(segd_load_files(&o, paths, 2, on_chunk, &s, &st, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(st.skipped, 2); /* neither a missing file nor a directory reads */
    assert_int_equal(s.chunks, 0);
    free(s.lines);
}

static int setup(void **state)
{
    (void)state;
    dir = mkdtemp(path_tmpl);
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_line_once),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
