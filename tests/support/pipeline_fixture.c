/* The pipeline tests' shared fixture; see pipeline_fixture.h. */
#include "pipeline_fixture.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "consumer/apply.h"
#include "core/profile.h"
#include "workload/seed_producer.h"

int fx_setup(void **state, const fx_opts_t *o)
{
    fx_t *f = calloc(1, sizeof(*f));
    char err[256];
    size_t n_topics = 0;
    if (!f)
        return -1;
    while (o->topics[n_topics])
        n_topics++;
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-%s-XXXXXX", o->name);
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    if (segd_dev_broker_new(&f->broker, 1, o->partitions, o->topics, n_topics, err,
                            sizeof(err))) {
        print_error("fixture: %s\n", err);
        rmdir(f->dir);
        free(f);
        return -1;
    }
    f->mcl = segd_dev_broker_mock(f->broker);
    f->topic = o->topics[0];
    f->partitions = o->partitions;
    f->horizon_s = o->horizon_s;
    *state = f;
    return 0;
}

int fx_teardown(void **state)
{
    fx_t *f = *state;
    char cmd[128];
    if (f->store)
        segd_store_close(f->store);
    segd_dev_broker_destroy(f->broker);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

const char *fx_bootstraps(const fx_t *f)
{
    return segd_dev_broker_bootstraps(f->broker);
}

segd_store_t *fx_open_store_in(const char *dir, const char *name, int64_t horizon_ms)
{
    char path[256], err[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = path;
    o.now_ms = FX_NOW_S * 1000;
    o.block_cache_mb = 8;
    if (horizon_ms)
        o.horizon_ms = horizon_ms;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    return s;
}

segd_store_t *fx_open_store(const fx_t *f, const char *name)
{
    return fx_open_store_in(f->dir, name, f->horizon_s * 1000);
}

void fx_config(segd_config_t *cfg, const fx_t *f, const char *group, const char *db,
               const char *const *kv)
{
    char err[256], horizon[32];
    snprintf(horizon, sizeof(horizon), "%" PRId64, f->horizon_s);
    segd_config_init(cfg);
    const char *const base[] = {"brokers", fx_bootstraps(f), "topics", f->topic, "group", group,
                                "db", db, "retry.max.ms", "200",
                                f->horizon_s ? "store.horizon.s" : NULL, horizon, NULL};
    for (size_t i = 0; base[i]; i += 2)
        assert_int_equal(segd_config_set(cfg, base[i], base[i + 1], err, sizeof(err)), SEGD_OK);
    for (size_t i = 0; kv && kv[i]; i += 2)
        assert_int_equal(segd_config_set(cfg, kv[i], kv[i + 1], err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set_x(cfg, "session.timeout.ms=6000", err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(segd_config_finish(cfg, err, sizeof(err)), SEGD_OK);
}

segd_err_t fx_seed_produce(const fx_t *f, uint64_t users, uint64_t seed, uint64_t *events)
{
    segd_seed_produce_opts_t o = {0};
    segd_seed_produce_result_t res = {0};
    char err[256];
    o.brokers = fx_bootstraps(f);
    o.topic = f->topic;
    segd_seed_opts_default(&o.seed);
    o.seed.users = users;
    o.seed.seed = seed;
    o.seed.now_ms = FX_NOW_S * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    segd_err_t e = segd_seed_produce(&o, NULL, &res, err, sizeof(err));
    if (e)
        print_error("seed: %s\n", err);
    *events = res.events;
    return e;
}

void fx_produce_seed(const fx_t *f, uint64_t users, uint64_t seed)
{
    uint64_t events = 0;
    assert_int_equal(fx_seed_produce(f, users, seed, &events), SEGD_OK);
    assert_int_equal(events, users * 50);
}

segd_store_t *fx_reference_store(const fx_t *f, const char *dir, uint64_t users, uint64_t seed)
{
    segd_store_t *s = fx_open_store_in(dir, "reference", f->horizon_s * 1000);
    segd_seed_opts_t so;
    segd_seed_opts_default(&so);
    so.users = users;
    so.seed = seed;
    so.now_ms = FX_NOW_S * 1000;
    segd_seed_t *g;
    segd_event_t ev;
    segd_applier_t ap;
    char err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_seed_new(&g, &so), SEGD_OK);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    while (segd_seed_next(g, &ev))
        assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_seed_destroy(g);
    segd_event_free(&ev);
    return s;
}

static void print_entries(const char *what, const segd_profile_t *p)
{
    print_message("  %s: %zu entries:", what, p->n);
    for (size_t i = 0; i < p->n && i < 8; i++)
        print_message(" %" PRId64 "@%" PRId64 "/%" PRId64, p->entries[i].segment_id,
                      p->entries[i].ts_ms, p->entries[i].expiry_s);
    print_message("\n");
}

static void print_differing(const char *uid, const segd_profile_t *ref,
                            const segd_profile_t *parts, size_t n)
{
    char what[32];
    print_message("user %s differs from the reference\n", uid);
    print_entries("reference", ref);
    for (size_t i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "store %zu", i);
        print_entries(what, &parts[i]);
    }
}

uint64_t fx_users_missing(segd_store_t *ref, segd_store_t **got, size_t n, uint64_t users)
{
    segd_profile_t a, b, parts[FX_MAX_STORES];
    const segd_profile_t *in[FX_MAX_STORES];
    char err[256], uid[32];
    uint64_t missing = 0;
    assert_true(n <= FX_MAX_STORES);
    segd_profile_init(&a);
    segd_profile_init(&b);
    for (size_t i = 0; i < n; i++)
        segd_profile_init(&parts[i]);
    for (uint64_t u = 0; u < users; u++) {
        segd_seed_user_id(u, uid, sizeof(uid));
        assert_int_equal(segd_store_get(ref, uid, strlen(uid), &a, err, sizeof(err)), SEGD_OK);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(segd_store_get(got[i], uid, strlen(uid), &parts[i], err,
                                            sizeof(err)), SEGD_OK);
            in[i] = &parts[i];
        }
        assert_int_equal(segd_profile_join(&b, in, n, NULL), SEGD_OK);
        assert_true(a.n > 0);
        int differs = a.n != b.n || memcmp(a.entries, b.entries, a.n * sizeof(a.entries[0]));
        if (differs && missing < 2) /* what a failure looked like, for the log */
            print_differing(uid, &a, parts, n);
        missing += differs;
    }
    for (size_t i = 0; i < n; i++)
        segd_profile_free(&parts[i]);
    segd_profile_free(&a);
    segd_profile_free(&b);
    return missing;
}

void fx_assert_stores_equal(segd_store_t *ref, segd_store_t **got, size_t n, uint64_t users)
{
    assert_int_equal(fx_users_missing(ref, got, n, users), 0);
}

static int count_entry(void *ctx, uint64_t seq, const uint8_t *v, size_t vlen)
{
    (void)seq, (void)v, (void)vlen;
    ++*(uint64_t *)ctx;
    return 0;
}

uint64_t fx_outbox_entries(segd_store_t *s)
{
    uint64_t n = 0;
    char err[256];
    assert_int_equal(segd_store_outbox_scan(s, 0, SIZE_MAX, count_entry, &n, err, sizeof(err)),
                     SEGD_OK);
    return n;
}
