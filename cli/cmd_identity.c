/* `segd identity`: the identity graph of a store (DESIGN §10).
 *   rebuild --db DIR [--min-weight W] [--max-component N]: offline components
 *   check --db DIR A B: "connected master=M" (exit 0) or "not connected" (1)
 *   members --db DIR ID: the component, the master first
 *   components --db DIR [--min-size N] [--limit N] [--json]: every component
 *     of N ids or more, largest first (store/identity_components.h)
 *   stats --db DIR [--topic T]: links the super-node guard refused
 *     (count/identity_supernode) and the sum of the links topic's stored offsets
 *   produce --brokers B [--topic T] [--framing F] FILE|-: JSON-lines link
 *     events to the links topic as Avro, keyed by the smaller id
 *   backfill --db DIR [--no-changes] FILE...: JSON-lines link events applied
 *     straight into the store (as segd run applies the links topic)
 * --config FILE: segd run's configuration gives db, identity.min.weight,
 * identity.max.component, identity.max.links and identity.links.topic, so an
 * offline command applies the guard segd run applies; explicit flags win
 * over the file. produce takes brokers, the links topic and the kafka.*
 * connection settings (TLS, SASL) from it. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "cli/cli.h"
#include "config/config.h"
#include "consumer/member_outbox.h"
#include "store/identity.h"
#include "store/identity_components.h"
#include "transport/kproducer.h"
#include "wire/link_event.h"
#include "wire/profile_json.h"

typedef struct id_args {
    const char *db, *brokers, *topic, *config;
    double min_weight;
    int64_t max_component, max_links; /* 0: not given */
    int64_t min_size, limit;          /* components */
    int weight_given, no_changes, json;
    segd_framing_t framing;
    segd_config_t cfg; /* --config's, when given */
    const char *cmd;   /* "identity SUB", for messages */
} id_args_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: segd identity rebuild --db DIR [--min-weight W] [--max-component N]\n"
            "       segd identity check --db DIR A B\n"
            "       segd identity members --db DIR ID\n"
            "       segd identity components --db DIR [--min-size N] [--limit N] [--json]\n"
            "       segd identity stats --db DIR [--topic T]\n"
            "       segd identity produce --brokers HOST:PORT|--config FILE [--topic T]\n"
            "                             [--framing raw|single-object] FILE|-\n"
            "       segd identity backfill --db DIR [--min-weight W] [--max-component N]\n"
            "                              [--max-links N] [--no-changes] FILE...\n"
            "  --config FILE: segd run's configuration: db, and\n"
            "    identity.min.weight, identity.max.component, identity.max.links,\n"
            "    identity.links.topic as defaults (the same guard as segd run);\n"
            "    --db, --min-weight, --max-component, --max-links, --topic win over it;\n"
            "    produce takes brokers and the kafka.* connection settings (TLS, SASL)\n"
            "  rebuild: connected components over the linked edges of weight >= W\n"
            "    (default 0.5, identity.min.weight), master = the oldest first-seen;\n"
            "    where UNLINKs split components. Offline: stop segd run first.\n"
            "  check: exit 0 and \"connected master=M\", or exit 1 \"not connected\"\n"
            "  check, members, components, stats: read-only, they work beside a running\n"
            "    segd run (one consistent view of the store)\n"
            "  components: each component of at least --min-size ids (default 2; one id\n"
            "    alone is never listed), largest first, ties by master id, at most\n"
            "    --limit (default all): \"MASTER size=N members=M,A,B\" (the master\n"
            "    first; beyond 20 members \"\u2026+K more\"), --json: one\n"
            "    {\"master\",\"size\",\"members\"} a line, every member. Cost on a large\n"
            "    graph: one scan of the member lists (one key per component of 2+ ids),\n"
            "    memory for each matching (master, size) pair, and one read per\n"
            "    component printed\n"
            "  produce: JSON lines {\"id_a\",\"id_b\",\"op\",\"ts_ms\",\"weight\"?,\"source\"?}\n"
            "    to the links topic (default segments.links); prints \"produced N link\n"
            "    events (L links, U unlinks) to TOPIC: delivered D of N\" and exits 1\n"
            "    unless a broker acknowledged every one, saying why (\"no broker answered\n"
            "    at B: ...\"); SIGINT/SIGTERM drops what is queued, counted undelivered\n"
            "  backfill: the same JSON lines applied to the store in file order, as\n"
            "    segd run applies the links topic (guard included); membership changes\n"
            "    go to the outbox for the next segd run to publish (--no-changes: not;\n"
            "    caches then keep their masters until they load a later snapshot).\n"
            "    Lines refused (malformed, invalid, supernode) are named on stderr as\n"
            "    FILE:LINE and exit 3. Offline: stop segd run first.\n");
}

/* Each subcommand's flags, as the vals of parse's table: a flag of a
 * sibling is refused, not taken and ignored. */
static const struct {
    const char *name, *flags;
} subs[] = {
    {"rebuild", "dwmCh"}, {"check", "dCh"},    {"members", "dCh"},
    {"stats", "dtCh"},    {"produce", "btfCh"}, {"backfill", "dwmLnCh"},
    {"components", "dsljCh"},
};

/* The flags of the subcommand sub; NULL when there is no such one. */
static const char *sub_flags(const char *sub)
{
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        if (!strcmp(sub, subs[i].name))
            return subs[i].flags;
    return NULL;
}

/* argv[0] is the subcommand; cmd ("identity SUB") names it in messages. */
static int parse(const char *cmd, int argc, char **argv, id_args_t *a)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"topic", required_argument, 0, 't'},
                                         {"framing", required_argument, 0, 'f'},
                                         {"min-weight", required_argument, 0, 'w'},
                                         {"max-component", required_argument, 0, 'm'},
                                         {"max-links", required_argument, 0, 'L'},
                                         {"config", required_argument, 0, 'C'},
                                         {"no-changes", no_argument, 0, 'n'},
                                         {"min-size", required_argument, 0, 's'},
                                         {"limit", required_argument, 0, 'l'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct option mine[sizeof(opts) / sizeof(opts[0])];
    int c;
    segd_args_pick(opts, sub_flags(argv[0]), mine, sizeof(opts) / sizeof(opts[0]));
    optind = 1;
    while ((c = segd_args_next(cmd, argc, argv, "h", mine)) != -1) {
        char *end;
        switch (c) {
        case 'd': a->db = optarg; break;
        case 'b': a->brokers = optarg; break;
        case 't': a->topic = optarg; break;
        case 'f':
            if (!strcmp(optarg, "raw"))
                a->framing = SEGD_FRAMING_RAW;
            else if (!strcmp(optarg, "single-object"))
                a->framing = SEGD_FRAMING_SINGLE_OBJECT;
            else
                return fprintf(stderr, "segd %s: --framing raw|single-object\n", cmd), -1;
            break;
        case 'w':
            a->min_weight = strtod(optarg, &end);
            if (*end || !(a->min_weight >= 0 && a->min_weight <= 1))
                return fprintf(stderr, "segd %s: --min-weight: a number in [0, 1]\n", cmd), -1;
            a->weight_given = 1;
            break;
        case 'L':
            if (segd_arg_int(cmd, "--max-links", optarg, 1, 100000000, &a->max_links))
                return -1;
            break;
        case 'C': a->config = optarg; break;
        case 'm':
            if (segd_arg_int(cmd, "--max-component", optarg, 2, 1000000,
                             &a->max_component))
                return -1;
            break;
        case 'n': a->no_changes = 1; break;
        case 's':
            if (segd_arg_int(cmd, "--min-size", optarg, 2, 100000000, &a->min_size))
                return -1;
            break;
        case 'l':
            if (segd_arg_int(cmd, "--limit", optarg, 1, INT64_MAX, &a->limit))
                return -1;
            break;
        case 'j': a->json = 1; break;
        case 'h': usage(stdout); return 1;
        default: return -1; /* said by segd_args_next */
        }
    }
    return 0;
}

/* --config's values as defaults under the flags (as segd snapshot export's
 * resolve_export): 0, or -1 after naming the problem. */
static int resolve_config(id_args_t *a, int topic_given)
{
    if (!a->config)
        return 0;
    char err[512];
    if (segd_config_load_file(&a->cfg, a->config, err, sizeof(err))) {
        fprintf(stderr, "segd %s: %s\n", a->cmd, err);
        return -1;
    }
    if (!a->db)
        a->db = a->cfg.db;
    if (!topic_given && a->cfg.identity_links_topic)
        a->topic = a->cfg.identity_links_topic;
    if (!a->weight_given)
        a->min_weight = a->cfg.identity_min_weight;
    if (!a->max_component)
        a->max_component = a->cfg.identity_max_component;
    if (!a->max_links)
        a->max_links = a->cfg.identity_max_links;
    return 0;
}

/* The guard of rebuild and backfill: defaults, then --config, then flags. */
static void ident_opts(const id_args_t *a, segd_ident_opts_t *o)
{
    segd_ident_opts_default(o);
    o->min_weight = a->min_weight;
    if (a->max_component)
        o->max_component = (uint32_t)a->max_component;
    if (a->max_links)
        o->max_links = (uint32_t)a->max_links;
}

static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    segd_progress_t *p = ctx;
    p->total = total;
    segd_progress_update(p, done, 0, 0);
}

/* Puts the rebuild's membership changes into the outbox entries of the
 * batches it writes, so the next `segd run` publishes them as MemberEvents
 * (DESIGN §10.6). A NULL c says that b is about to be written. */
static int rebuild_change(void *ctx, segd_batch_t *b, const segd_ident_change_t *c)
{
    segd_member_outbox_t *mo = ctx;
    return (c ? segd_member_outbox_add(mo, b, c) : segd_member_outbox_flush(mo, b)) != SEGD_OK;
}

static int cmd_rebuild(const id_args_t *a)
{
    segd_store_t *s = segd_app_open_store(a->cmd, a->db, 0, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_ident_opts_t o;
    ident_opts(a, &o);
    segd_progress_t bar;
    segd_progress_init(&bar, stderr, "ids", 0, 0);
    segd_ident_rebuild_stats_t st;
    char err[512] = "";
    segd_member_outbox_t mo;
    segd_member_outbox_init(&mo);
    segd_err_t e = segd_ident_rebuild(s, &o, show_progress, &bar, rebuild_change, &mo, &st,
                                      err, sizeof(err));
    segd_progress_end(&bar);
    segd_member_outbox_free(&mo);
    segd_store_close(s);
    if (e) {
        fprintf(stderr, "segd identity rebuild: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    printf("ids=%llu edges_used=%llu components=%llu linked_components=%llu repointed=%llu "
           "refused=%llu epoch_ms=%lld repaired=%llu\n",
           (unsigned long long)st.ids, (unsigned long long)st.edges_used,
           (unsigned long long)st.components, (unsigned long long)st.linked_components,
           (unsigned long long)st.repointed, (unsigned long long)st.refused,
           (long long)st.epoch_ms, (unsigned long long)st.repaired);
    return SEGD_EXIT_OK;
}

static int cmd_check(const id_args_t *a, const char *x, const char *y)
{
    segd_store_t *s = segd_app_open_reader(a->cmd, a->db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    int connected = 0;
    segd_ident_rec_t m;
    char err[512] = "";
    segd_err_t e = segd_ident_check(s, x, strlen(x), y, strlen(y), &connected, &m, err,
                                    sizeof(err));
    segd_store_close(s);
    if (e) {
        fprintf(stderr, "segd identity check: %s\n", err);
        return SEGD_EXIT_USAGE;
    }
    if (connected)
        printf("connected master=%.*s\n", (int)m.master_len, m.master);
    else
        printf("not connected\n");
    return connected ? SEGD_EXIT_OK : SEGD_EXIT_FAIL;
}

static int print_member(void *ctx, const char *m, size_t len)
{
    (void)ctx;
    printf("%.*s\n", (int)len, m);
    return 0;
}

static int cmd_members(const id_args_t *a, const char *x)
{
    segd_store_t *s = segd_app_open_reader(a->cmd, a->db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    char err[512] = "";
    segd_err_t e = segd_ident_members(s, x, strlen(x), print_member, NULL, err, sizeof(err));
    segd_store_close(s);
    if (e)
        fprintf(stderr, "segd identity members: %s\n", err);
    return e ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}

/* ---------- components ---------- */

#define COMPONENT_TEXT_MEMBERS 20 /* a line stays readable; --json has them all */

static int print_component_text(const segd_ident_component_t *c)
{
    printf("%.*s size=%zu members=", (int)c->master_len, c->master, c->size);
    size_t shown = c->size > COMPONENT_TEXT_MEMBERS ? COMPONENT_TEXT_MEMBERS : c->size;
    for (size_t i = 0; i < shown; i++)
        printf("%s%.*s", i ? "," : "", (int)c->members[i].len, c->members[i].s);
    if (shown < c->size)
        printf(" \u2026+%zu more", c->size - shown);
    return putchar('\n') == EOF;
}

static int print_component_json(segd_buf_t *out, const segd_ident_component_t *c)
{
    out->len = 0;
    segd_err_t e = segd_buf_append(out, "{\"master\":", 10);
    if (!e)
        e = segd_json_string_text(out, c->master, c->master_len);
    char mid[48];
    int k = snprintf(mid, sizeof(mid), ",\"size\":%zu,\"members\":[", c->size);
    if (!e)
        e = segd_buf_append(out, mid, (size_t)k);
    for (size_t i = 0; !e && i < c->size; i++) {
        if (i)
            e = segd_buf_append(out, ",", 1);
        if (!e)
            e = segd_json_string_text(out, c->members[i].s, c->members[i].len);
    }
    if (!e)
        e = segd_buf_append(out, "]}\n", 3);
    return e || fwrite(out->data, 1, out->len, stdout) != out->len;
}

typedef struct comp_print {
    int json;
    segd_buf_t line;
    int failed; /* stdout refused a line (a closed pipe): stop */
} comp_print_t;

static int print_component(void *ctx, const segd_ident_component_t *c)
{
    comp_print_t *p = ctx;
    p->failed = p->json ? print_component_json(&p->line, c) : print_component_text(c);
    return p->failed;
}

static int cmd_components(const id_args_t *a)
{
    segd_store_t *s = segd_app_open_reader("identity", a->db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_ident_list_opts_t o = {.min_size = a->min_size ? (uint32_t)a->min_size : 2,
                                .limit = (uint64_t)a->limit};
    comp_print_t p = {.json = a->json};
    char err[512] = "";
    segd_err_t e = segd_ident_components(s, &o, print_component, &p, NULL, err, sizeof(err));
    segd_buf_free(&p.line);
    segd_store_close(s);
    if (e)
        fprintf(stderr, "segd identity components: %s\n", err);
    else if (p.failed || fflush(stdout))
        fprintf(stderr, "segd identity components: cannot write the listing\n");
    return e || p.failed ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}

typedef struct sum_ctx {
    const char *topic;
    int64_t sum;
} sum_ctx_t;

static int sum_offsets(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    sum_ctx_t *c = ctx;
    (void)partition;
    if (!strcmp(topic, c->topic))
        c->sum += next;
    return 0;
}

static int cmd_stats(const id_args_t *a)
{
    segd_store_t *s = segd_app_open_reader(a->cmd, a->db, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    int64_t refused = 0;
    char err[512] = "";
    segd_err_t e = segd_store_counter_get(s, SEGD_IDENT_SUPERNODE_COUNTER, &refused, err,
                                          sizeof(err));
    sum_ctx_t sc = {a->topic, 0};
    segd_store_view_t *v = NULL;
    if (!e)
        e = segd_store_view_open(s, &v, err, sizeof(err));
    if (!e)
        e = segd_store_view_positions(v, "offset", sum_offsets, &sc, err, sizeof(err));
    segd_store_view_close(v);
    segd_store_close(s);
    if (e) {
        fprintf(stderr, "segd identity stats: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    printf("supernode_refused %lld\nlinks_offsets_sum %lld\n", (long long)refused,
           (long long)sc.sum);
    return SEGD_EXIT_OK;
}

/* ---------- produce ---------- */

/* Stops the producing on SIGINT/SIGTERM: what is queued is purged and the
 * report counts only what a broker acknowledged, as segd produce does. */
static volatile sig_atomic_t produce_stop;
static void on_produce_signal(int sig) { (void)sig, produce_stop = 1; }

/* The link events of each kind queued, for the summary line. */
typedef struct link_queued {
    unsigned long long links, unlinks;
} link_queued_t;

static int produce_line(segd_kproducer_t *kp, const id_args_t *a, segd_link_codec_t *codec,
                        const char *line, size_t len, segd_buf_t *out, long line_no,
                        link_queued_t *q)
{
    segd_wire_link_t w;
    char err[512];
    if (segd_link_json_parse(codec, line, len, &w, err, sizeof(err))) {
        fprintf(stderr, "segd identity produce: line %ld: %s\n", line_no, err);
        return 1;
    }
    if (segd_link_encode(&w, a->framing, 0, out))
        return -1;
    int a_first = strcmp(w.id_a, w.id_b) <= 0; /* JSON ids hold no NUL: refused before */
    const char *key = a_first ? w.id_a : w.id_b;
    size_t klen = a_first ? w.id_a_len : w.id_b_len;
    segd_err_t e = segd_kproducer_send(kp, a->topic, key, klen, out->data, out->len,
                                       &produce_stop, err, sizeof(err));
    if (e == SEGD_ERR_ABORTED)
        return -1;
    if (e) {
        fprintf(stderr, "segd identity produce: %s\n", err);
        return -1;
    }
    if (w.op == SEGD_WIRE_LINK)
        q->links++;
    else
        q->unlinks++;
    segd_kproducer_poll(kp);
    return 0;
}

/* The summary line, and whether every event was acknowledged. */
static int produce_report(const id_args_t *a, segd_kproducer_t *kp, const link_queued_t *q)
{
    segd_kproducer_counts_t c;
    segd_kproducer_counts(kp, &c);
    unsigned long long n = q->links + q->unlinks;
    printf("produced %llu link events (%llu links, %llu unlinks) to %s: delivered %llu of %llu\n",
           n, q->links, q->unlinks, a->topic, (unsigned long long)c.delivered, n);
    char err[1024];
    if (!segd_kproducer_report(kp, a->topic, "link events", n, err, sizeof(err)))
        return 0;
    fprintf(stderr, "segd identity produce: %s\n", err);
    return -1;
}

static segd_err_t links_connection(void *ctx, rd_kafka_conf_t *conf, char *errstr, size_t n)
{
    const id_args_t *a = ctx;
    return segd_config_apply_connection(&a->cfg, conf, "links producer", errstr, n);
}

static int cmd_produce(const id_args_t *a, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f)
        return perror(path), SEGD_EXIT_FAIL;
    char errbuf[512];
    /* message.timeout.ms bounds the wait for acknowledgements, after which
     * librdkafka fails what is left: every event then has its report. */
    static const char *const defaults[] = {"enable.idempotence", "true", NULL};
    segd_kproducer_opts_t ko = {.brokers = a->brokers,
                                .what = "links producer",
                                .defaults = defaults,
                                .delivery_timeout_ms = 30000,
                                .configure = links_connection, /* a secured cluster's TLS, SASL */
                                .configure_ctx = (void *)a};
    segd_kproducer_t *kp = NULL;
    segd_link_codec_t *codec = NULL;
    if (segd_kproducer_new(&kp, &ko, errbuf, sizeof(errbuf)) ||
        segd_link_codec_new(&codec, NULL, errbuf, sizeof(errbuf))) {
        fprintf(stderr, "segd identity produce: %s\n", errbuf);
        segd_kproducer_destroy(kp);
        if (f != stdin)
            fclose(f);
        return SEGD_EXIT_FAIL;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_produce_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0, bad = 0;
    int rc = 0;
    segd_buf_t out = {0};
    link_queued_t q = {0};
    while (rc >= 0 && !produce_stop && (len = getline(&line, &cap, f)) > 0) {
        no++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len && (rc = produce_line(kp, a, codec, line, (size_t)len, &out, no, &q)) > 0)
            bad++;
    }
    if (produce_stop)
        segd_kproducer_interrupted(kp);
    segd_kproducer_drain(kp, &produce_stop);
    int left = produce_report(a, kp, &q);
    free(line);
    segd_buf_free(&out);
    segd_link_codec_destroy(codec);
    segd_kproducer_destroy(kp);
    if (f != stdin)
        fclose(f);
    return rc < 0 || left ? SEGD_EXIT_FAIL : bad ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
}

/* ---------- backfill ---------- */

#define BACKFILL_BATCH 1000

typedef struct link_backfill {
    const id_args_t *a;
    segd_store_t *s;
    segd_ident_t *ident;
    segd_batch_t *b;
    segd_link_codec_t *codec;
    segd_member_outbox_t members;
    size_t in_batch;
    uint64_t applied, refused;
} link_backfill_t;

static int backfill_change(void *ctx, const segd_ident_change_t *c)
{
    link_backfill_t *lb = ctx;
    return lb->a->no_changes ? 0 : segd_member_outbox_add(&lb->members, lb->b, c) != SEGD_OK;
}

/* The batch with its outbox entry of membership changes (DESIGN §10.6). */
static segd_err_t backfill_flush(link_backfill_t *lb, char *err, size_t n)
{
    if (!lb->in_batch)
        return SEGD_OK;
    if (segd_member_outbox_flush(&lb->members, lb->b))
        return segd_errf(SEGD_ERR_NOMEM, err, n, "out of memory");
    segd_err_t e = segd_store_write(lb->s, lb->b, err, n);
    if (e)
        return e;
    segd_batch_clear(lb->b);
    segd_ident_reset(lb->ident);
    lb->members.appended = 0;
    lb->in_batch = 0;
    return SEGD_OK;
}

/* One line: 0 applied, 1 refused (named on stderr), <0 a failure (err). */
static int backfill_line(link_backfill_t *lb, const char *path, long no, const char *line,
                         size_t len, char *err, size_t n)
{
    segd_wire_link_t w;
    char why[512];
    segd_ident_result_t res = SEGD_IDENT_APPLIED;
    if (segd_link_json_parse(lb->codec, line, len, &w, why, sizeof(why)) == SEGD_OK) {
        segd_link_event_t ev = {w.id_a, w.id_a_len, w.id_b, w.id_b_len,
                                w.op == SEGD_WIRE_LINK ? SEGD_LINK : SEGD_UNLINK, w.ts_ms,
                                w.weight};
        if (segd_link_event_check(&ev, why, sizeof(why)) == SEGD_OK) {
            segd_err_t e = segd_ident_apply(lb->ident, lb->b, &ev, backfill_change, lb, &res,
                                            err, n);
            if (e)
                return -1;
            lb->in_batch++;
            if (res == SEGD_IDENT_APPLIED) {
                lb->applied++;
                return lb->in_batch >= BACKFILL_BATCH && backfill_flush(lb, err, n) ? -1 : 0;
            }
            snprintf(why, sizeof(why), "supernode: %s",
                     res == SEGD_IDENT_SUPERNODE_LINKS ? "an id already has identity.max.links edges"
                                                       : "the component would exceed "
                                                         "identity.max.component");
        }
    }
    fprintf(stderr, "%s:%ld: %s\n", path, no, why);
    lb->refused++;
    return 1;
}

static int backfill_file(link_backfill_t *lb, const char *path, char *err, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0;
    int rc = 0;
    while (rc >= 0 && (len = getline(&line, &cap, f)) > 0) {
        no++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len)
            rc = backfill_line(lb, path, no, line, (size_t)len, err, n);
    }
    free(line);
    fclose(f);
    return rc < 0 ? -1 : 0;
}

static int cmd_backfill(const id_args_t *a, char **files, int nfiles)
{
    segd_store_t *s = segd_app_open_store(a->cmd, a->db, 0, 0);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_ident_opts_t o;
    ident_opts(a, &o);
    link_backfill_t lb = {.a = a, .s = s};
    segd_member_outbox_init(&lb.members);
    char err[512] = "";
    int rc = segd_ident_new(s, &o, &lb.ident, err, sizeof(err)) ||
                     segd_batch_new(s, &lb.b) ||
                     segd_link_codec_new(&lb.codec, NULL, err, sizeof(err))
                 ? -1
                 : 0;
    for (int i = 0; !rc && i < nfiles; i++)
        rc = backfill_file(&lb, files[i], err, sizeof(err));
    if (!rc && backfill_flush(&lb, err, sizeof(err)))
        rc = -1;
    segd_link_codec_destroy(lb.codec);
    segd_batch_destroy(lb.b);
    segd_ident_destroy(lb.ident);
    segd_member_outbox_free(&lb.members);
    segd_store_close(s);
    if (rc) { /* the batch in hand is not written: applying the files again is harmless */
        fprintf(stderr, "segd identity backfill: %s\n", err[0] ? err : "out of memory");
        return SEGD_EXIT_FAIL;
    }
    printf("applied %llu link events, refused %llu\n", (unsigned long long)lb.applied,
           (unsigned long long)lb.refused);
    return lb.refused ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
}

static int run_sub(id_args_t *a, const char *sub, int topic_given, char **args, int nargs)
{
    if (resolve_config(a, topic_given))
        return SEGD_EXIT_USAGE;
    if (!a->brokers)
        a->brokers = a->cfg.brokers;
    if (!strcmp(sub, "produce") && a->brokers && nargs == 1)
        return cmd_produce(a, args[0]);
    if (!a->db) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    if (!strcmp(sub, "rebuild") && nargs == 0)
        return cmd_rebuild(a);
    if (!strcmp(sub, "check") && nargs == 2)
        return cmd_check(a, args[0], args[1]);
    if (!strcmp(sub, "stats") && nargs == 0)
        return cmd_stats(a);
    if (!strcmp(sub, "members") && nargs == 1)
        return cmd_members(a, args[0]);
    if (!strcmp(sub, "components") && nargs == 0)
        return cmd_components(a);
    if (!strcmp(sub, "backfill") && nargs >= 1)
        return cmd_backfill(a, args, nargs);
    usage(stderr);
    return SEGD_EXIT_USAGE;
}

int segd_cmd_identity(int argc, char **argv)
{
    id_args_t a = {.min_weight = SEGD_IDENT_MIN_WEIGHT, .framing = SEGD_FRAMING_SINGLE_OBJECT};
    if (argc < 2) {
        usage(stderr);
        return SEGD_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        usage(stdout);
        return SEGD_EXIT_OK;
    }
    if (!sub_flags(sub)) {
        fprintf(stderr, "segd identity: unknown subcommand '%s' (see segd identity --help)\n",
                sub);
        return SEGD_EXIT_USAGE;
    }
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "identity %s", sub);
    a.cmd = cmd;
    int rc = parse(cmd, argc - 1, argv + 1, &a);
    if (rc)
        return rc > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    int topic_given = a.topic != NULL;
    if (!a.topic)
        a.topic = "segments.links";
    segd_config_init(&a.cfg);
    rc = run_sub(&a, sub, topic_given, argv + 1 + optind, argc - 1 - optind);
    segd_config_free(&a.cfg); /* after: a's strings may point into it */
    return rc;
}
