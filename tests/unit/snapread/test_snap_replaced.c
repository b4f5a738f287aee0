/* Tests for snapread/ and cache/edge_load.c when a snapshot unit is replaced
 * while a profile reader (a cache) reads it: after some of the old unit's
 * profiles reached the reader, a `segd rebuild` swap exports a unit that
 * lacks a user and an entry the old one had. A cache must then hold exactly
 * the new unit, not the old one's profiles joined with the new one's; a
 * reader that cannot drop what it took fails (SEGD_ERR_UNSORTED) instead of
 * loading the mix; and the table's drop of one partition's users that the
 * cache's loader uses then. CMakeLists.txt links this test with
 * -Wl,--wrap=segd_dest_get_mem_in, the moment of the replacement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "store_util.h"

#include "cache/edge.h"
#include "cache/edge_load.h"
#include "core/partition.h"
#include "core/record.h"
#include "publisher/snapshot.h"
#include "snapread/snapshot.h"
#include "wire/change.h"
#include "wire/manifest.h"

#define NOW_MS 1800000000000LL
#define USERS 20
#define GONE_USER 3  /* the rebuilt store has no such user */
#define SHRUNK_USER 5 /* the rebuilt store lacks this user's second entry */

/* A shell command run once, just before the fetch of the file named
 * swap_before: it stands for an export that replaces the unit between two
 * of the reader's fetches (publisher/snapshot.c: new files, new manifest,
 * then the old files deleted). */
static char swap_cmd[2048], swap_before[64];
/* A table a change is applied to at the swap, as a change topic's follower
 * beside the load would (NULL = none). */
static segd_edge_t *apply_at_swap;

static void apply_delta(segd_edge_t *e, const char *user)
{
    segd_change_t c;
    segd_change_init(&c);
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = user;
    c.user_id_len = strlen(user);
    segd_entry_t en = {.segment_id = 9, .ts_ms = NOW_MS - 1000, .expiry_s = NOW_MS / 1000 + 3600};
    assert_int_equal(segd_profile_push(&c.profile, &en), SEGD_OK);
    assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    segd_change_free(&c);
}
segd_err_t __real_segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                       segd_buf_t *out, char *errstr, size_t n);
segd_err_t __wrap_segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                       segd_buf_t *out, char *errstr, size_t n);
segd_err_t __wrap_segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                       segd_buf_t *out, char *errstr, size_t n)
{
    if (swap_cmd[0] && !strcmp(name, swap_before)) {
        assert_int_equal(system(swap_cmd), 0);
        swap_cmd[0] = 0;
        if (apply_at_swap)
            apply_delta(apply_at_swap, "user-late");
    }
    return __real_segd_dest_get_mem_in(d, dir, name, out, errstr, n);
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void run(const char *cmd)
{
    assert_int_equal(system(cmd), 0);
}

/* Users first..last-1 (bar GONE_USER when rebuilt), each with entries i
 * and 1000 + i (bar SHRUNK_USER's second when rebuilt), exported as one
 * unit (topic "bk", P = 1) under root/name/snap. */
static void export_users(const char *root, const char *name, int first, int last, int rebuilt)
{
    char db[256], snap[256], err[512], user[32];
    snprintf(db, sizeof(db), "%s/%s", root, name);
    assert_int_equal(mkdir(db, 0755), 0);
    snprintf(db, sizeof(db), "%s/%s/db", root, name);
    snprintf(snap, sizeof(snap), "%s/%s/snap", root, name);
    segd_store_t *s = test_store_open(db, NOW_MS);
    segd_batch_t *b;
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_profile_init(&p);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int i = first; i < last; i++) {
        if (rebuilt && i == GONE_USER)
            continue;
        segd_profile_clear(&p);
        for (int k = 0; k < 2; k++) {
            if (rebuilt && i == SHRUNK_USER && k == 1)
                continue;
            segd_entry_t e = {.segment_id = i + 1000 * k, .ts_ms = NOW_MS - 1000,
                              .expiry_s = NOW_MS / 1000 + 86400};
            assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
        }
        buf.len = 0;
        assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
        snprintf(user, sizeof(user), "user-%d", i);
        segd_batch_merge(b, user, strlen(user), buf.data, buf.len);
    }
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&buf);
    segd_profile_free(&p);
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "bk";
    o.buckets = 1;
    segd_manifest_t m;
    if (segd_snapshot_export(s, snap, &o, &m, NULL, err, sizeof(err)))
        fail_msg("export %s: %s", name, err);
    assert_int_equal(m.units, 1);
    segd_manifest_free(&m);
    segd_store_close(s);
}

static void read_manifest(const char *path, segd_manifest_t *m)
{
    char err[256], text[16384];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(text, 1, sizeof(text), fp);
    fclose(fp);
    segd_manifest_init(m);
    assert_int_equal(segd_manifest_parse(text, n, m, err, sizeof(err)), SEGD_OK);
}

/* The unit the reader starts on, at root/snap/bk/p-00000: a's file and b's
 * file under one manifest (a writer may split a unit into several files),
 * so that a's profiles reach the reader before it fetches b's file. Returns
 * b's file name, where the replacement happens. */
static void old_unit(const char *root, char *b_file, size_t cap)
{
    char path[512], cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s/snap && mkdir -p %s/snap/bk/p-00000 && cp %s/a/snap/bk/topology.json "
             "%s/snap/bk/ && cp %s/a/snap/bk/p-00000/*.avro %s/b/snap/bk/p-00000/*.avro "
             "%s/snap/bk/p-00000/", root, root, root, root, root, root, root);
    run(cmd);
    segd_manifest_t a, b;
    snprintf(path, sizeof(path), "%s/a/snap/bk/p-00000/manifest.json", root);
    read_manifest(path, &a);
    snprintf(path, sizeof(path), "%s/b/snap/bk/p-00000/manifest.json", root);
    read_manifest(path, &b);
    assert_int_equal(a.n_files, 1);
    assert_int_equal(b.n_files, 1);
    assert_string_not_equal(a.files[0].name, b.files[0].name);
    a.files = realloc(a.files, 2 * sizeof(*a.files));
    assert_non_null(a.files);
    a.files[a.n_files++] = b.files[0];
    a.records += b.records;
    a.segments += b.segments;
    snprintf(b_file, cap, "%s", b.files[0].name);
    char *json = segd_manifest_dump(&a, "deflate");
    assert_non_null(json);
    snprintf(path, sizeof(path), "%s/snap/bk/p-00000/manifest.json", root);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(json, fp);
    fclose(fp);
    free(json);
    segd_manifest_free(&a);
    segd_manifest_free(&b);
}

/* Arms the swap: the rebuilt unit replaces the old one just before the
 * reader fetches the old unit's second file. */
static void arm_swap(const char *root, const char *b_file)
{
    snprintf(swap_before, sizeof(swap_before), "%s", b_file);
    snprintf(swap_cmd, sizeof(swap_cmd),
             "rm %s/snap/bk/p-00000/*.avro && cp %s/rebuilt/snap/bk/p-00000/* "
             "%s/snap/bk/p-00000/", root, root, root);
}

static int64_t rebuilt_created(const char *root)
{
    char path[512];
    segd_manifest_t m;
    snprintf(path, sizeof(path), "%s/rebuilt/snap/bk/p-00000/manifest.json", root);
    read_manifest(path, &m);
    int64_t t = m.created_at_ms;
    segd_manifest_free(&m);
    return t;
}

static int count_cb(void *ctx, int32_t partition, const char *user, size_t len,
                    const segd_profile_t *p)
{
    (void)partition, (void)user, (void)len, (void)p;
    (*(int *)ctx)++;
    return 0;
}

static void test_rebuilt_unit_replaces_mid_read(void **state)
{
    test_dir_t *f = *state;
    char src[256], b_file[64], err[512] = "";
    export_users(f->dir, "a", 0, USERS / 2, 0);
    sleep_ms(5); /* each export's created_at_ms (and file name) differs */
    export_users(f->dir, "b", USERS / 2, USERS, 0);
    sleep_ms(5);
    export_users(f->dir, "rebuilt", 0, USERS, 1);
    snprintf(src, sizeof(src), "%s/snap/bk", f->dir);

    /* the cache's loader: it drops what it took from the old unit and holds
     * exactly the rebuilt one */
    old_unit(f->dir, b_file, sizeof(b_file));
    arm_swap(f->dir, b_file);
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = NOW_MS;
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, &eo), SEGD_OK);
    segd_manifest_t m;
    segd_err_t rc = segd_edge_load_snapshot(e, src, NULL, &m, err, sizeof(err));
    if (rc)
        fail_msg("load: %s", err);
    assert_int_equal(swap_cmd[0], 0); /* the replacement did happen mid-read */
    assert_int_equal(m.created_at_ms, rebuilt_created(f->dir));
    assert_int_equal(m.records, USERS - 1);
    segd_manifest_free(&m);
    segd_profile_t p;
    segd_profile_init(&p);
    for (int i = 0; i < USERS; i++) {
        char user[32];
        snprintf(user, sizeof(user), "user-%d", i);
        segd_err_t got = segd_edge_get_profile(e, user, strlen(user), &p);
        if (i == GONE_USER) {
            assert_int_equal(got, SEGD_ERR_NOTFOUND); /* not resurrected */
            continue;
        }
        assert_int_equal(got, SEGD_OK);
        assert_int_equal(p.n, i == SHRUNK_USER ? 1 : 2);
        assert_int_equal(p.entries[0].segment_id, i);
    }
    segd_profile_free(&p);
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    assert_int_equal(st.users, USERS - 1);
    assert_int_equal(st.entries, 2 * USERS - 3);
    segd_edge_destroy(e);

    /* a profile reader that cannot drop what it took is told so rather
     * than handed the old unit's profiles joined with the new one's */
    old_unit(f->dir, b_file, sizeof(b_file));
    arm_swap(f->dir, b_file);
    int seen = 0;
    assert_int_equal(segd_snapshot_read(src, NULL, &m, count_cb, &seen, err, sizeof(err)),
                     SEGD_ERR_UNSORTED);
    segd_manifest_free(&m);
    assert_int_equal(swap_cmd[0], 0);
    assert_non_null(strstr(err, "replaced"));
    assert_int_equal(seen, USERS / 2); /* a's file only, then the replacement */
}

/* A table that held something before the load, or took a change during
 * it, cannot drop only the old unit's users: the load fails and keeps what
 * the table had (a follower may be past that change; dropping it would lose
 * it for good). */
static void test_replaced_unit_keeps_the_tables_own(void **state)
{
    test_dir_t *f = *state;
    char src[256], b_file[64], err[512] = "";
    export_users(f->dir, "a", 0, USERS / 2, 0);
    sleep_ms(5);
    export_users(f->dir, "b", USERS / 2, USERS, 0);
    sleep_ms(5);
    export_users(f->dir, "rebuilt", 0, USERS, 1);
    snprintf(src, sizeof(src), "%s/snap/bk", f->dir);
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = NOW_MS;
    segd_profile_t p;
    segd_profile_init(&p);
    for (int held_before = 1; held_before >= 0; held_before--) {
        old_unit(f->dir, b_file, sizeof(b_file));
        arm_swap(f->dir, b_file);
        segd_edge_t *e = NULL;
        assert_int_equal(segd_edge_new(&e, &eo), SEGD_OK);
        if (held_before)
            apply_delta(e, "user-late");
        else
            apply_at_swap = e;
        segd_manifest_t m;
        assert_int_equal(segd_edge_load_snapshot(e, src, NULL, &m, err, sizeof(err)),
                         SEGD_ERR_UNSORTED);
        segd_manifest_free(&m);
        apply_at_swap = NULL;
        assert_int_equal(swap_cmd[0], 0); /* the replacement did happen mid-read */
        assert_non_null(strstr(err, "replaced"));
        assert_int_equal(segd_edge_get_profile(e, "user-late", 9, &p), SEGD_OK);
        assert_int_equal(p.n, 1);
        segd_edge_destroy(e);
    }
    segd_profile_free(&p);
}

/* segd_edge_drop_partition drops exactly the users of one partition, with
 * enough users per shard that records sit off their home slot (probe chains
 * the removal shifts back) */
static void test_edge_drop_partition(void **state)
{
    (void)state;
    enum { N = 5000, P = 4, DROP = 2 };
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = NOW_MS;
    eo.shards = 4;
    segd_edge_t *e = NULL;
    assert_int_equal(segd_edge_new(&e, &eo), SEGD_OK);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t en = {.segment_id = 1, .ts_ms = NOW_MS - 1000, .expiry_s = NOW_MS / 1000 + 86400};
    assert_int_equal(segd_profile_push(&p, &en), SEGD_OK);
    char user[32];
    uint64_t kept = 0;
    for (int i = 0; i < N; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        assert_int_equal(segd_edge_put(e, user, strlen(user), &p), SEGD_OK);
        kept += segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, strlen(user), P) != DROP;
    }
    assert_true(kept < N && kept > N / 2);
    segd_edge_drop_partition(e, SEGD_PARTITIONER_MURMUR2, P, DROP);
    for (int i = 0; i < N; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        int dropped = segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, strlen(user), P) == DROP;
        assert_int_equal(segd_edge_get_profile(e, user, strlen(user), &p),
                         dropped ? SEGD_ERR_NOTFOUND : SEGD_OK);
    }
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    assert_int_equal(st.users, kept);
    assert_int_equal(st.entries, kept);
    segd_profile_free(&p);
    segd_edge_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_drop_partition),
        cmocka_unit_test_setup_teardown(test_rebuilt_unit_replaces_mid_read, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_replaced_unit_keeps_the_tables_own, test_dir_setup,
                                        test_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
