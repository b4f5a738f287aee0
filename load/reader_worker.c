/* The file reader's decoding threads (reader_int.h). Each worker takes
 * a block from the work queue, decodes it with its format's decoder and
 * state of its own (nothing is shared between workers) and puts the chunk
 * on the done queue. The work done per event is in reader_chunk.c, because
 * the producer does it as well on the fallback OCF path. */
#include <string.h>

#include "load/reader_int.h"

void *segd_loader_worker_main(void *arg)
{
    worker_t *w = arg;
    loader_t *l = w->l;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->work.head && !l->producer_done)
            pthread_cond_wait(&l->cv_work, &l->mu);
        slot_t *s = segd_loader_queue_pop(&l->work);
        int skip = segd_loader_stopping(l);
        pthread_mutex_unlock(&l->mu);
        if (!s)
            return NULL; /* the producer is done and the queue empty */
        const reader_format_t *f =
            s->kind == UNIT_JSON ? &segd_loader_format_json : &segd_loader_format_ocf;
        if (!skip && f->decode(w, s))
            s->failed = 1;
        segd_loader_finish_chunk(s);
        segd_loader_push_done(l, s);
    }
}

void segd_loader_worker_init(worker_t *w, loader_t *l)
{
    memset(w, 0, sizeof(*w));
    w->l = l;
    segd_event_init(&w->ev);
    segd_profile_init(&w->prof);
}

void segd_loader_worker_free(worker_t *w)
{
    segd_event_free(&w->ev);
    segd_profile_free(&w->prof);
    segd_buf_free(&w->operand);
    segd_buf_free(&w->scratch);
    segd_avro_codec_destroy(w->codec);
    if (w->z_ready)
        inflateEnd(&w->z);
    ZSTD_freeDCtx(w->zd);
}
