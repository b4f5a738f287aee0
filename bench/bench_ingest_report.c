/* `segd bench ingest`'s report: the measured phases as markdown tables,
 * CPU per kind of thread, the pipeline thread's stages, the 10 s windows
 * and the memory against memory.limit.mb. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench_ingest_int.h"
#include "config/memory.h"

/* Peak RSS of the whole process (getrusage's ru_maxrss, KiB on Linux) against
 * memory.limit.mb: the in-process broker, which holds every message produced,
 * and the producer count too, so the figure is an upper bound for segd run. */
double segd_bench_ingest_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024;
}

static double max_window_rss(const run_result_t *r)
{
    double m = 0;
    for (size_t i = 0; i < r->nw; i++)
        if (r->w[i].rss_mib > m)
            m = r->w[i].rss_mib;
    return m;
}

static void print_memory(const ingest_args_t *a, double harness, double during)
{
    segd_memory_split_t m;
    int64_t limit = a->memory_mb ? a->memory_mb : SEGD_MEMORY_DEFAULT_MB;
    segd_memory_split(limit, a->batch, &m);
    double peak = segd_bench_ingest_peak_rss_mib();
    printf("\nmemory: memory.limit.mb = %" PRId64 " (block cache %" PRId64 " MiB, memtables %"
           PRId64 " MiB in %" PRId64 " MiB buffers, fetch queue %" PRId64 " KiB and %" PRId64
           " messages (queued.min.messages), fetch.max.bytes %"
           PRId64 ", batch %" PRId64 " messages, publisher %" PRId64 " entries/cycle and %" PRId64
           " KiB queue%s); peak RSS %.0f MiB (getrusage ru_maxrss, the whole process: broker and "
           "producer included; %.0f MiB before the first pipeline started), %s the budget + 10 %% "
           "(%.0f MiB)\n",
           m.limit_mb, m.block_cache_mb, m.memtable_mb, m.write_buffer_mb, m.fetch_queue_kb,
           m.fetch_queue_messages,
           m.fetch_max_bytes, a->batch ? a->batch : m.batch_max_messages, m.publisher_entries,
           m.producer_queue_kb, a->n_x ? "; the run's -X settings win over these" : "", peak, harness, peak <= (double)limit * 1.1 ? "within" : "OVER",
           (double)limit * 1.1);
    printf("\nmemory while the pipelines ran (VmRSS at each window's end, the harness's "
           "freed memory trimmed before each run; the in-process broker's data included when "
           "there is one): at most %.0f MiB, %s the budget + 10 %%\n", during,
           during <= (double)limit * 1.1 ? "within" : "OVER");
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* The run's windows as a table, and the summary the targets are judged on:
 * the median window's p50 and the worst window's p99 (full windows only
 * when there are any, so a last one of a few entries does not decide). */
static void print_windows(const char *what, const run_result_t *r)
{
    int64_t p50s[MAX_WINDOWS], worst99 = 0, worst = 0;
    size_t n = 0;
    printf("\n%s, per %.0f s window (latency of the outbox entries acknowledged in it; "
           "profiles family's L0 files and pending compaction at its end):\n\n"
           "| window end s | segments/s | p50 ms | p99 ms | max ms | L0 files | pending "
           "compaction MiB | delayed write rate | write stopped | compactions running |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n", what, WINDOW_S);
    for (size_t i = 0; i < r->nw; i++) {
        const window_t *w = &r->w[i], *b = i ? &r->w[i - 1] : NULL;
        double dt = w->end_s - (b ? b->end_s : 0);
        double segs = (double)(w->segments - (b ? b->segments : 0));
        printf("| %.1f | %.0f | %" PRId64 " | %" PRId64 " | %" PRId64 " | %" PRIu64 " | %" PRIu64
               " | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " |\n", w->end_s,
               dt > 0 ? segs / dt : 0, w->p50, w->p99, w->max, w->l0, w->pending_mb,
               w->delayed, w->stopped, w->compacting);
        if (w->max > worst)
            worst = w->max;
        if (i + 1 < r->nw || r->nw == 1) {
            p50s[n++] = w->p50;
            if (w->p99 > worst99)
                worst99 = w->p99;
        }
    }
    if (n)
        qsort(p50s, n, sizeof(*p50s), cmp_i64);
    printf("\n%s: median window p50 %" PRId64 " ms, worst window p99 %" PRId64 " ms, max %"
           PRId64 " ms; RocksDB write stalls %.2f s in total\n", what, n ? p50s[n / 2] : 0,
           worst99, worst, (double)r->stall_micros / 1e6);
}

/* CPU seconds per kind of thread over a run, and per million segments:
 * on a shared machine the wall clock says how busy the neighbours were,
 * the CPU how much the work cost. */
static void print_cpu(const char *what, const run_result_t *r)
{
    const cpu_use_t *a = &r->cpu0, *b = &r->cpu1;
    double msegs = (double)r->st.segments / 1e6, listed = 0;
    if (msegs <= 0)
        return;
    printf("\n%s, CPU over %.2f s wall: process %.2f s = %.3f CPU-s per M segments "
           "(getrusage; %.2f cores busy)", what, r->seconds, b->total - a->total,
           (b->total - a->total) / msegs, (b->total - a->total) / r->seconds);
    for (size_t i = 0; i < b->n; i++) {
        double before = 0;
        for (size_t j = 0; j < a->n; j++)
            if (!strcmp(a->name[j], b->name[i]))
                before = a->s[j];
        /* a thread started inside the run counts whole; one that ended in it
         * is only in the process total */
        double d = b->s[i] - before < 0 ? b->s[i] : b->s[i] - before;
        listed += d;
        if (d >= 0.01)
            printf("; %s %.2f s", b->name[i], d);
    }
    printf("; exited threads %.2f s; the main thread waited %.2f s for a CPU\n",
           (b->total - a->total) - listed, b->main_waited - a->main_waited);
}

/* The pipeline thread's seconds per stage (segd_pipeline_stats_t). */
static void print_stages(const char *what, const run_result_t *r)
{
    const segd_pipeline_stats_t *s = &r->st, *z = &r->st0;
    uint64_t dead = 0;
    for (int i = 0; i < SEGD_DLQ_REASONS; i++)
        dead += s->dlq[i];
    printf("\n%s: %" PRIu64 " messages, %" PRIu64 " events applied, %" PRIu64 " segments, %"
           PRIu64 " dead-lettered (%" PRIu64 " too_late)\n", what, s->messages, s->events,
           s->segments, dead, s->dlq[SEGD_DLQ_TOO_LATE]);
    double check = s->check_s - z->check_s, build = s->build_s - z->build_s;
    double write = s->write_s - z->write_s, commit = s->commit_s - z->commit_s;
    double upkeep = s->upkeep_s - z->upkeep_s, busy = check + build + write + commit + upkeep;
    double waited = s->writer_wait_s - z->writer_wait_s;
    if (waited > 0 || s->writer_wait_s > 0) /* the writer thread wrote: not this thread */
        busy -= write;
    printf("\n%s, the pipeline thread's time from the first message: poll %.2f s (waiting "
           "on or served by consumer_poll), decode + checks %.2f s, WriteBatch build %.2f s, "
           "write (outbox entry + RocksDB) %.2f s%s, commit + kick %.2f s, upkeep %.2f s, held "
           "for the outbox %.2f s, waiting for the writer thread %.2f s; busy %.2f of %.2f s\n",
           what, s->poll_s - z->poll_s, check, build, write,
           waited > 0 ? " (on the writer thread)" : "", commit, upkeep, s->hold_s - z->hold_s,
           waited, busy, r->seconds);
    uint64_t batches = s->batches - z->batches, short_ = s->batches_short - z->batches_short;
    printf("%s: of the poll time, %.2f s in polls that returned nothing (the local queue "
           "empty); %" PRIu64 " batches, %.0f messages each, %" PRIu64 " of them closed "
           "because nothing more was fetched; the fetcher woken %" PRIu64 " times after "
           "the queue had been full\n", what, s->poll_idle_s - z->poll_idle_s, batches,
           batches ? (double)(s->messages - z->messages) / (double)batches : 0.0, short_,
           s->fetch_nudges - z->fetch_nudges);
}

static double run_cpu(const run_result_t *r) { return r->cpu1.total - r->cpu0.total; }

/* --writer both: the two end-to-end runs side by side against the one
 * store pass, each with its own stages and CPU. */
static void print_writer_both(const ingest_run_t *x)
{
    const run_result_t *r[2] = {&x->e2e_off, &x->e2e};
    double sw = (double)x->store.st.segments / x->store.seconds;
    double store_cpu = run_cpu(&x->store) / ((double)x->store.st.segments / 1e6);
    printf("\n| ingest.writer.thread | seconds | segments/s | wall ratio to the store path | "
           "CPU-s per M segments | store path CPU-s per M | main thread waited for a CPU, s |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 2; i++) {
        double segs = (double)r[i]->st.segments;
        printf("| %d | %.2f | %.0f | %.2f | %.3f | %.3f | %.2f |\n", i, r[i]->seconds,
               segs / r[i]->seconds, segs / r[i]->seconds / sw, run_cpu(r[i]) / (segs / 1e6),
               store_cpu, r[i]->cpu1.main_waited - r[i]->cpu0.main_waited);
    }
    print_stages("end to end, writer thread off", &x->e2e_off);
    print_cpu("end to end, writer thread off", &x->e2e_off);
    printf("\n(below: end to end with the writer thread on)\n");
}

void segd_bench_ingest_report(const ingest_args_t *a, const ingest_run_t *x)
{
    double segs = (double)x->res.segments, t = x->e2e.seconds;
    double half = (double)x->res.events / t / 2;
    printf("## segd bench ingest --users %" PRId64 " --partitions %" PRId64, a->users,
           a->partitions);
    if (a->batch)
        printf(" --batch %" PRId64, a->batch);
    if (a->memory_mb)
        printf(" --memory-mb %" PRId64, a->memory_mb);
    if (a->prefill_users)
        printf(" --prefill-users %" PRId64, a->prefill_users);
    if (a->brokers)
        printf(" --brokers ...");
    if (a->producer_process)
        printf(" --producer-process");
    if (a->compact_during)
        printf(" --compact-during");
    if (a->ratio_only)
        printf(" --ratio-only");
    if (a->writer != WRITER_DEFAULT)
        printf(" --writer %s", a->writer == WRITER_BOTH ? "both" : a->writer ? "on" : "off");
    for (int i = 0; i < a->n_x; i++)
        printf(" -X %s", a->x[i]);
    printf("\n\n%" PRIu64 " events, %" PRIu64 " segments, %.1f MB Avro (single-object), %s, "
           "lz4\n\n", x->res.events, x->res.segments, (double)x->res.bytes / 1e6,
           a->brokers ? "a running Kafka cluster" : "in-process mock broker");
    if (a->prefill_users)
        printf("store pre-filled with %" PRIu64 " segments (%" PRId64 " users, the store's own "
               "write path) in %.1f s: %.0f segments/s\n\n", x->prefill.st.segments,
               a->prefill_users, x->prefill.seconds,
               (double)x->prefill.st.segments / x->prefill.seconds);
    printf("| path | seconds | events/s | segments/s |\n|---|---|---|---|\n");
    printf("| raw librdkafka consume (no decode, no store) | %.2f | %.0f | %.0f |\n", x->raw,
           (double)x->res.events / x->raw, segs / x->raw);
    printf("| segd end to end (decode, merge + offsets + outbox WriteBatch, WAL, deltas "
           "published and acknowledged) | %.2f | %.0f | %.0f |\n", t, (double)x->res.events / t,
           segs / t);
    if (!a->prefill_users && !a->ratio_only)
        printf("| the same without the change stream (changes.enable = 0) | %.2f | %.0f | %.0f "
               "|\n", x->bare.seconds, (double)x->res.events / x->bare.seconds,
               segs / x->bare.seconds);
    double sw = (double)x->store.st.segments / x->store.seconds;
    printf("| the store's write path alone, same events, same store afterwards (`segd bench "
           "store`'s writer: one thread, 1000 events per WriteBatch, WAL, no outbox) | %.2f | "
           "%.0f | %.0f |\n", x->store.seconds, (double)x->store.st.messages / x->store.seconds,
           sw);
    printf("\nratio end-to-end / raw: %.2f; end-to-end / store write: %.2f (target >= 0.9); "
           "%" PRIu64 " store batches; target >= 3 M segments/s: %s\n", x->raw / t,
           segs / t / sw, x->e2e.st.batches, segs / t >= 3e6 ? "met" : "missed");
    printf("\nchange stream: %" PRIu64 " deltas carrying %" PRIu64 " entries, %.2f value bytes "
           "per ingested segment (before lz4), %" PRIu64 " publish cycles\n", x->e2e.pub.events,
           x->e2e.pub.segments, (double)x->e2e.pub.bytes / segs, x->e2e.pub.cycles);
    if (a->writer == WRITER_BOTH)
        print_writer_both(x);
    print_stages("end to end", &x->e2e);
    print_cpu("end to end", &x->e2e);
    print_cpu("store write alone", &x->store);
    if (a->prefill_users)
        print_cpu("pre-fill", &x->prefill);
    print_windows("end to end", &x->e2e);
    if (a->prefill_users)
        print_windows("pre-fill (store write path)", &x->prefill);
    if (a->ratio_only) {
        print_memory(a, x->harness, max_window_rss(&x->e2e));
        return;
    }
    printf("\nfreshness, event created -> its delta acknowledged, producer paced %s:\n",
           a->producer_process ? "in its own process (`segd produce --rate`)"
                               : "in a thread of this process");
    printf("\n| load | events/s |\n|---|---|\n| half of peak | %.0f |\n| quarter of peak | "
           "%.0f |\n", half, half / 2);
    print_stages("half of peak", &x->fresh);
    print_cpu("half of peak", &x->fresh);
    print_cpu("quarter of peak", &x->fresh4);
    if (a->compact_during)
        printf("\nhalf of peak: a full compaction of the profiles family (every file through "
               "the merge operator and filter, as the periodic compaction) ran from %.1f s to "
               "%.1f s\n", x->fresh.compact_from, x->fresh.compact_to);
    print_windows("half of peak", &x->fresh);
    print_windows("quarter of peak", &x->fresh4);
    double during = max_window_rss(&x->e2e);
    if (max_window_rss(&x->fresh) > during)
        during = max_window_rss(&x->fresh);
    if (max_window_rss(&x->fresh4) > during)
        during = max_window_rss(&x->fresh4);
    print_memory(a, x->harness, during);
}

