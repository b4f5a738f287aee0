/* Convergence (DESIGN §5/§6): a random workload (upserts, removes, erases,
 * retirements, expiries, duplicates) goes through the mock broker into a
 * real `segd run`; a snapshot is exported mid-stream beside the running
 * writer; segd is SIGKILLed and restarted between the snapshot and the end,
 * and stopped once for `segd segments retire`. An edge cache that loads the
 * snapshot and tails the change topic from the manifest's positions ends
 * equal to the store for every user and every field at several clock values;
 * so does one that tails from the beginning of the topic (earlier than the
 * manifest says: re-joined deltas are harmless). */
#include <librdkafka/rdkafka.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "cache/edge.h"
#include "cache/edge_load.h"
#include "cache/tail.h"
#include "wire/avro_codec.h"
#include "workload/dev_broker.h"
#include "snapread/snapshot.h"
#include "publisher/snapshot.h"
#include "core/query.h"
#include "store/store.h"

#define TOPIC "events"
#define CHANGES "segments.changes"
#define PARTITIONS 4
#define USERS 250
#define SEGMENTS 64

typedef struct fixture {
    segd_dev_broker_t *broker;
    char dir[64], db[128], log[128], snap[128];
    rd_kafka_t *producer;
    segd_avro_codec_t *codec;
    int64_t t0_ms; /* the workload's "now": the wall clock at start */
    uint64_t produced;
    /* sent messages, for duplicates */
    segd_buf_t *sent;
    char (*sent_key)[32];
    size_t n_sent;
    unsigned rng;
} fixture_t;

static unsigned rnd(fixture_t *f)
{
    f->rng = f->rng * 1103515245u + 12345u;
    return (f->rng >> 8) & 0xffffff;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    const char *topics[] = {TOPIC, TOPIC ".dlq", CHANGES};
    char err[256];
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-converge-XXXXXX");
    if (!mkdtemp(f->dir) ||
        segd_dev_broker_new(&f->broker, 1, PARTITIONS, topics, 3, err, sizeof(err)) ||
        segd_avro_codec_new(&f->codec, NULL, NULL, err, sizeof(err)))
        return -1;
    snprintf(f->db, sizeof(f->db), "%s/db", f->dir);
    snprintf(f->log, sizeof(f->log), "%s/run.log", f->dir);
    snprintf(f->snap, sizeof(f->snap), "%s/snap", f->dir);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", segd_dev_broker_bootstraps(f->broker), err,
                      sizeof(err));
    f->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    f->t0_ms = (int64_t)time(NULL) * 1000;
    f->rng = 12345;
    f->sent = calloc(20000, sizeof(*f->sent));
    f->sent_key = calloc(20000, sizeof(*f->sent_key));
    *state = f;
    return f->producer ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    rd_kafka_destroy(f->producer);
    segd_avro_codec_destroy(f->codec);
    segd_dev_broker_destroy(f->broker);
    for (size_t i = 0; i < f->n_sent; i++)
        segd_buf_free(&f->sent[i]);
    free(f->sent);
    free(f->sent_key);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

/* ---------- the workload ---------- */

static void produce(fixture_t *f, const char *key, const void *val, size_t len)
{
    while (rd_kafka_producev(f->producer, RD_KAFKA_V_TOPIC(TOPIC),
                             RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE((void *)val, len),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END))
        rd_kafka_poll(f->producer, 10);
    f->produced++;
}

/* One random event; timestamps stay within 24 h, inside the late-arrival horizon
 * of the whole run, TTLs make some entries expire before, during and after
 * the clocks the comparison uses. 10% are exact duplicates of earlier ones. */
static void random_event(fixture_t *f, segd_event_t *ev)
{
    if (f->n_sent > 10 && rnd(f) % 10 == 0) {
        size_t i = rnd(f) % f->n_sent;
        produce(f, f->sent_key[i], f->sent[i].data, f->sent[i].len);
        return;
    }
    char user[32];
    snprintf(user, sizeof(user), "user-%04u", rnd(f) % USERS);
    segd_event_reset(ev);
    segd_event_set_user(ev, user, strlen(user));
    ev->ts_ms = f->t0_ms - 20 * 3600 * 1000LL + (int64_t)(rnd(f) % (20 * 3600)) * 1000;
    unsigned r = rnd(f) % 100;
    static const int32_t ttls[] = {600, 3600, 6 * 3600, 86400, 3 * 86400, 7 * 86400};
    ev->op = r < 75 ? SEGD_OP_UPSERT : r < 96 ? SEGD_OP_REMOVE : SEGD_OP_ERASE_USER;
    int nseg = ev->op == SEGD_OP_ERASE_USER ? 0 : 1 + (int)(rnd(f) % 6);
    for (int i = 0; i < nseg; i++) {
        segd_seg_update_t u = {rnd(f) % SEGMENTS, ttls[rnd(f) % 6], (int32_t)(rnd(f) % 3) - 1,
                               (int32_t)(rnd(f) % 4)};
        segd_event_add_segment(ev, &u);
    }
    size_t i = f->n_sent < 20000 ? f->n_sent++ : rnd(f) % 20000;
    assert_int_equal(segd_avro_encode(f->codec, SEGD_FRAMING_SINGLE_OBJECT, 0, ev, &f->sent[i]),
                     SEGD_OK);
    snprintf(f->sent_key[i], sizeof(f->sent_key[i]), "%s", user);
    produce(f, user, f->sent[i].data, f->sent[i].len);
}

static void produce_events(fixture_t *f, int n)
{
    segd_event_t ev;
    segd_event_init(&ev);
    for (int i = 0; i < n; i++)
        random_event(f, &ev);
    segd_event_free(&ev);
    rd_kafka_flush(f->producer, 10000);
}

/* ---------- segd run as a child process ---------- */

static pid_t spawn_run(const fixture_t *f)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *out = freopen(f->log, "a", stderr);
        (void)out;
        execl(SEGD_BIN, "segd", "run", "--brokers", segd_dev_broker_bootstraps(f->broker),
              "--topic", TOPIC, "--group", "g-converge", "--db", f->db, "-X",
              "session.timeout.ms=6000", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_run(pid_t pid, int sig)
{
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    if (sig == SIGTERM)
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static segd_store_t *open_ro(const fixture_t *f, int64_t now_ms)
{
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = f->db;
    o.read_only = 1;
    o.block_cache_mb = 8;
    o.now_ms = now_ms;
    segd_store_t *s = NULL;
    char err[256];
    return segd_store_open(&s, &o, err, sizeof(err)) == SEGD_OK ? s : NULL;
}

static int count_cb(void *ctx, uint64_t seq, const uint8_t *v, size_t n)
{
    (void)seq, (void)v, (void)n;
    (*(size_t *)ctx)++;
    return 0;
}

/* Consumed input (sum of stored offsets) and unpublished outbox entries. */
static void progress(const fixture_t *f, uint64_t *consumed, size_t *outbox)
{
    *consumed = 0;
    *outbox = SIZE_MAX;
    segd_store_t *s = open_ro(f, 0);
    if (!s)
        return;
    char err[256];
    for (int p = 0; p < PARTITIONS; p++) {
        int64_t next;
        if (segd_store_offset_get(s, TOPIC, p, &next, err, sizeof(err)) == SEGD_OK)
            *consumed += (uint64_t)next;
    }
    size_t n = 0;
    if (segd_store_outbox_scan(s, 0, SIZE_MAX, count_cb, &n, err, sizeof(err)) == SEGD_OK)
        *outbox = n;
    segd_store_close(s);
}

/* Waits until everything produced is applied and published; a segd run
 * that dies on the way fails the test at once, with its log. */
static void wait_applied(const fixture_t *f, pid_t run)
{
    uint64_t consumed = 0;
    size_t outbox = SIZE_MAX;
    int status, died = 0;
    for (int i = 0; i < 600 && !died; i++) {
        progress(f, &consumed, &outbox);
        if (consumed >= f->produced && outbox == 0)
            return;
        died = waitpid(run, &status, WNOHANG) == run;
        usleep(100000);
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "tail -20 %s >&2", f->log);
    if (system(cmd) != 0)
        fprintf(stderr, "no log\n");
    fail_msg("%sapplied %llu of %llu, outbox %zu", died ? "segd run died; " : "",
             (unsigned long long)consumed, (unsigned long long)f->produced, outbox);
}

/* ---------- the comparison ---------- */

/* Every user, live entries at `clock`: the store (read at that clock) and
 * the cache (asked at that clock) agree on every field. */
static void assert_cache_equals_store(const fixture_t *f, segd_edge_t *cache, int64_t clock_ms)
{
    segd_store_t *s = open_ro(f, clock_ms);
    assert_non_null(s);
    segd_edge_set_now(cache, clock_ms);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_query_t q = {0};
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t *want = calloc(SEGMENTS, sizeof(*want)), *got = calloc(SEGMENTS, sizeof(*got));
    char user[32], err[256];
    size_t users_live = 0, entries = 0;
    for (int u = 0; u < USERS; u++) {
        snprintf(user, sizeof(user), "user-%04d", u);
        assert_int_equal(segd_store_get(s, user, strlen(user), &p, err, sizeof(err)), SEGD_OK);
        size_t nw = segd_query_select(&p, &rule, &q, want);
        size_t ng = 0;
        assert_int_equal(segd_edge_lookup(cache, user, strlen(user), got, SEGMENTS, &ng), SEGD_OK);
        if (nw != ng)
            fail_msg("%s at %lld: store %zu live, cache %zu", user, (long long)clock_ms, nw, ng);
        if (nw)
            assert_memory_equal(want, got, nw * sizeof(*want));
        users_live += nw > 0;
        entries += nw;
    }
    fprintf(stderr, "  clock t0%+lld s: %zu users with %zu live entries agree\n",
            (long long)(clock_ms - f->t0_ms) / 1000, users_live, entries);
    free(want);
    free(got);
    segd_profile_free(&p);
    segd_store_close(s);
}

/* A cache: every snapshot unit (on two threads, as segd cache), then the
 * change topic from the units' folded positions until caught up. */
static segd_edge_t *build_cache(const fixture_t *f, int from_beginning)
{
    segd_manifest_t m;
    char err[512];
    segd_edge_t *cache = NULL;
    assert_int_equal(segd_edge_new(&cache, NULL), SEGD_OK);
    segd_snapshot_read_opts_t ro = {.threads = 2};
    /* records, retirements and each unit's W, as segd cache loads them */
    assert_int_equal(segd_edge_load_snapshot(cache, f->snap, &ro, &m, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(m.units, (uint32_t)m.partitions); /* one unit per input partition */
    assert_int_equal(segd_edge_partitions(cache), m.partitions);
    segd_tail_t *t = NULL;
    segd_tail_opts_t to;
    segd_tail_opts_default(&to);
    to.brokers = segd_dev_broker_bootstraps(f->broker);
    to.topic = CHANGES;
    to.from_beginning = from_beginning;
    assert_int_equal(segd_tail_new(&t, cache, &to, from_beginning ? NULL : &m, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(segd_tail_catch_up(t, 60000, err, sizeof(err)), SEGD_OK);
    segd_tail_stats_t ts;
    segd_tail_get_stats(t, &ts);
    fprintf(stderr, "  cache (%s): %zu snapshot users, %llu deltas applied, %llu skipped\n",
            from_beginning ? "tail from the beginning" : "tail from the manifest",
            (size_t)m.records, (unsigned long long)ts.applied, (unsigned long long)ts.skipped);
    assert_int_equal(ts.skipped, 0);
    segd_edge_stats_t es;
    segd_edge_get_stats(cache, &es);
    assert_int_equal(es.retirements, 2); /* segments 7 and 8, from RETIRE events */
    assert_true(es.control_events >= 1);
    segd_tail_destroy(t);
    segd_manifest_free(&m);
    return cache;
}

static void export_snapshot(const fixture_t *f)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(SEGD_BIN, "segd", "snapshot", "export", "--db", f->db, "--to", f->snap,
              (char *)NULL); /* units of the input partitions the store holds offsets of */
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void retire(const fixture_t *f, int64_t segment_id)
{
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)segment_id);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *out = freopen("/dev/null", "w", stdout);
        (void)out;
        execl(SEGD_BIN, "segd", "segments", "retire", "--db", f->db, id, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_cache_converges_to_store(void **state)
{
    fixture_t *f = *state;
    produce_events(f, 3000);
    pid_t run = spawn_run(f);
    wait_applied(f, run);
    /* mid-stream: more events flow while the snapshot is taken */
    produce_events(f, 1500);
    export_snapshot(f);
    produce_events(f, 1500);
    usleep(300000);
    stop_run(run, SIGKILL); /* between the snapshot and the end */
    produce_events(f, 1000);
    run = spawn_run(f);
    wait_applied(f, run);
    stop_run(run, SIGTERM);
    retire(f, 7); /* published as a RETIRE event by the next run */
    retire(f, 8);
    run = spawn_run(f);
    produce_events(f, 1500);
    wait_applied(f, run);
    stop_run(run, SIGTERM);

    static const int64_t offsets_s[] = {1, 3600, 2 * 86400, 5 * 86400};
    for (int from_beginning = 0; from_beginning < 2; from_beginning++) {
        segd_edge_t *cache = build_cache(f, from_beginning);
        for (size_t i = 0; i < sizeof(offsets_s) / sizeof(offsets_s[0]); i++)
            assert_cache_equals_store(f, cache, f->t0_ms + offsets_s[i] * 1000);
        segd_edge_destroy(cache);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cache_converges_to_store, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
