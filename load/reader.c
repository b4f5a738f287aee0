/* The file reader's driver (reader.h). segd_load_files starts one producer
 * thread, which reads and decompresses each file into blocks (whole JSON
 * lines, or whole container blocks of an OCF), and `threads` workers, which
 * turn blocks into chunks of encoded items. The caller's thread hands the
 * chunks to the callback. The formats live in reader_json.c and
 * reader_ocf.c, the decoding threads in reader_worker.c, what a decoded
 * event becomes in reader_chunk.c, the slots that carry blocks between
 * threads in reader_slots.c. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "load/reader_int.h"

/* ---------- producer thread ---------- */

typedef struct producer_args {
    loader_t *l;
    char *const *paths;
    int n_paths;
} producer_args_t;

static void produce_file(loader_t *l, const char *path)
{
    char why[512];
    segd_source_t *src = NULL;
    uint8_t magic[4];
    uint64_t accounted = 0;
    ssize_t r = 0;
    size_t got = 0;
    if (segd_source_open(&src, path, why, sizeof(why)) != SEGD_OK) {
        fprintf(l->o->errors, "%s: %s\n", l->o->prog, why);
        segd_loader_count_skip(l);
        return;
    }
    /* the inner format by its first decompressed bytes */
    while (got < 4 && (r = segd_source_read(src, magic + got, 4 - got, why, sizeof(why))) > 0)
        got += (size_t)r;
    segd_source_close(src);
    int ocf = got == 4 && !memcmp(magic, "Obj\x01", 4);
    /* reopened: each format's reader is then one straight pass */
    if (segd_source_open(&src, path, why, sizeof(why)) != SEGD_OK) {
        fprintf(l->o->errors, "%s: %s\n", l->o->prog, why);
        segd_loader_count_skip(l);
        return;
    }
    (ocf ? &segd_loader_format_ocf : &segd_loader_format_json)->produce(l, src, path, &accounted);
    segd_source_close(src);
}

static void *producer_main(void *arg)
{
    producer_args_t *a = arg;
    loader_t *l = a->l;
    for (int i = 0; i < a->n_paths && !segd_loader_stopping(l); i++)
        produce_file(l, a->paths[i]);
    pthread_mutex_lock(&l->mu);
    l->producer_done = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_done);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------- the caller's side ---------- */

uint64_t segd_load_total_size(char *const *paths, int n)
{
    uint64_t t = 0;
    struct stat st;
    for (int i = 0; i < n; i++)
        if (!stat(paths[i], &st) && S_ISREG(st.st_mode))
            t += (uint64_t)st.st_size;
    return t;
}

/* Hands done chunks to cb until the producer and every slot are done. */
static segd_err_t consume(loader_t *l, segd_load_chunk_fn cb, void *ctx, segd_load_stats_t *st,
                          char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        size_t free_n = 0;
        for (slot_t *f = l->free_list; f; f = f->next)
            free_n++;
        if (!l->done.head && l->producer_done && free_n == l->n_slots)
            break;
        if (!l->done.head) {
            struct timespec ts;
            segd_realtime_after(&ts, 200); /* a signal does not wake a condvar */
            pthread_cond_timedwait(&l->cv_done, &l->mu, &ts);
            if (segd_loader_stopping(l)) { /* wake the producer waiting for a slot */
                st->stopped = 1;
                pthread_cond_broadcast(&l->cv_free);
            }
            continue;
        }
        slot_t *s = segd_loader_queue_pop(&l->done);
        int skip = segd_loader_stopping(l);
        pthread_mutex_unlock(&l->mu);
        if (s->failed && !err)
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory while decoding");
        st->skipped += s->skipped;
        if (!skip && !err) {
            segd_load_chunk_t c = {s->file, s->items, s->n_items, s->segments, s->skipped,
                                   s->bytes};
            if (cb(ctx, &c)) {
                skip = 1;
            } else {
                st->events += s->n_items;
                st->segments += s->segments;
            }
        }
        pthread_mutex_lock(&l->mu);
        if (skip || err) {
            segd_loader_set_abort(l);
            st->stopped = 1;
            pthread_cond_broadcast(&l->cv_free);
        }
        s->next = l->free_list;
        l->free_list = s;
        pthread_cond_signal(&l->cv_free);
    }
    st->skipped += l->producer_skipped;
    pthread_mutex_unlock(&l->mu);
    return err;
}

/* The lock, the slots on the free list, and the fingerprint of
 * SegmentEvent's own schema, which picks a container's fast path. On
 * failure too, loader_close undoes what was done. */
static segd_err_t loader_open(loader_t *l, const segd_load_opts_t *o, int threads, char *errstr,
                              size_t n)
{
    memset(l, 0, sizeof(*l));
    l->o = o;
    l->json_block = o->limits.max_message + 64 * 1024 > JSON_BLOCK_MIN
                        ? o->limits.max_message + 64 * 1024
                        : JSON_BLOCK_MIN;
    l->n_slots = (size_t)threads * 2 + 2;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_free, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_done, NULL);
    l->slots = calloc(l->n_slots, sizeof(*l->slots));
    if (!l->slots)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < l->n_slots; i++) {
        l->slots[i].next = l->free_list;
        l->free_list = &l->slots[i];
    }
    segd_loader_worker_init(&l->producer_w, l);
    segd_avro_codec_t *probe;
    segd_err_t err = segd_avro_codec_new(&probe, NULL, NULL, errstr, n);
    if (err)
        return err;
    l->local_fp = segd_avro_codec_fingerprint(probe);
    segd_avro_codec_destroy(probe);
    return SEGD_OK;
}

static void loader_close(loader_t *l)
{
    segd_loader_worker_free(&l->producer_w);
    if (l->slots)
        for (size_t i = 0; i < l->n_slots; i++) {
            free(l->slots[i].in);
            free(l->slots[i].blocks);
            free(l->slots[i].items);
            segd_buf_free(&l->slots[i].arena);
        }
    free(l->slots);
    pthread_cond_destroy(&l->cv_free);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_done);
    pthread_mutex_destroy(&l->mu);
}

/* Starts the decoding threads; *started counts those running, which
 * stop_workers joins whatever happens next. */
static segd_err_t start_workers(loader_t *l, worker_t *ws, int threads, int *started,
                                char *errstr, size_t n)
{
    for (int i = 0; i < threads; i++) {
        segd_loader_worker_init(&ws[i], l);
        segd_err_t err = segd_avro_codec_new(&ws[i].codec, NULL, NULL, errstr, n);
        if (err)
            return err;
        if (pthread_create(&ws[i].th, NULL, segd_loader_worker_main, &ws[i]))
            return segd_errf(SEGD_ERR_NOMEM, errstr, n, "cannot start a thread");
        (*started)++;
    }
    return SEGD_OK;
}

/* Joins the workers. A worker leaves once the producer is done and the work
 * queue is empty, so when no producer ever started that end is announced
 * here, or the workers would wait for work for ever. */
static void stop_workers(loader_t *l, worker_t *ws, int threads, int started,
                         int producer_started)
{
    if (!producer_started) {
        pthread_mutex_lock(&l->mu);
        l->producer_done = 1;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
    }
    for (int i = 0; i < started; i++)
        pthread_join(ws[i].th, NULL);
    for (int i = 0; i < threads; i++)
        if (ws[i].l)
            segd_loader_worker_free(&ws[i]);
}

segd_err_t segd_load_files(const segd_load_opts_t *o, char *const *paths, int n_paths,
                           segd_load_chunk_fn cb, void *ctx, segd_load_stats_t *st,
                           char *errstr, size_t n)
{
    loader_t l;
    int threads = o->threads < 1 ? 1 : o->threads;
    int started = 0, producer_started = 0;
    worker_t *ws = NULL;
    producer_args_t pa = {&l, paths, n_paths};
    pthread_t producer;
    memset(st, 0, sizeof(*st));
    st->bytes_total = segd_load_total_size(paths, n_paths);
    segd_err_t err = loader_open(&l, o, threads, errstr, n);
    if (!err && !(ws = calloc((size_t)threads, sizeof(*ws))))
        err = SEGD_ERR_NOMEM;
    if (err)
        goto out_close;
    err = start_workers(&l, ws, threads, &started, errstr, n);
    if (!err) {
        if (pthread_create(&producer, NULL, producer_main, &pa))
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "cannot start a thread");
        else
            producer_started = 1;
    }
    if (producer_started) {
        err = consume(&l, cb, ctx, st, errstr, n);
        pthread_join(producer, NULL);
    }
    stop_workers(&l, ws, threads, started, producer_started);
out_close:
    loader_close(&l);
    free(ws);
    if (o->stop && *o->stop)
        st->stopped = 1;
    return err;
}
