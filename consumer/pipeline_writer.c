/* The pipeline's writer thread; see pipeline_writer.h. One mutex and one
 * condition variable order every hand-over: the applier is written to by
 * the pipeline's thread before segd_pwriter_start and after
 * segd_pwriter_wait, by this thread only in between. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include "consumer/pipeline_writer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"

struct segd_pwriter {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*written)(void *ctx);
    void *ctx;
    /* under mu */
    segd_applier_t *a; /* the batch in its hands; NULL when none */
    int done;          /* its write has finished (err says how) */
    int quit;
    segd_err_t err;
    char errstr[512];
    double write_s;
};

static void *writer_main(void *arg)
{
    segd_pwriter_t *w = arg;
    char errstr[512];
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !(w->a && !w->done))
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit)
            break;
        segd_applier_t *a = w->a;
        pthread_mutex_unlock(&w->mu);
        double t0 = segd_mono_s();
        errstr[0] = 0;
        segd_err_t err = segd_applier_flush(a, errstr, sizeof(errstr));
        double dt = segd_mono_s() - t0;
        /* the publisher learns of the batch as soon as it is stored, not when
         * the pipeline's thread next looks */
        if (!err && w->written)
            w->written(w->ctx);
        pthread_mutex_lock(&w->mu);
        w->err = err;
        snprintf(w->errstr, sizeof(w->errstr), "%s", errstr);
        w->write_s = dt;
        w->done = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

segd_err_t segd_pwriter_new(segd_pwriter_t **out, void (*written)(void *ctx), void *ctx,
                            char *errstr, size_t n)
{
    segd_pwriter_t *w = calloc(1, sizeof(*w));
    if (!w)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "writer thread: out of memory");
    w->written = written;
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w)) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "writer thread: cannot start it");
    }
    pthread_setname_np(w->thread, "segd:writer");
    *out = w;
    return SEGD_OK;
}

void segd_pwriter_destroy(segd_pwriter_t *w)
{
    if (!w)
        return;
    char err[16];
    double s;
    segd_pwriter_wait(w, &s, err, sizeof(err)); /* never quit mid-write */
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void segd_pwriter_start(segd_pwriter_t *w, segd_applier_t *a)
{
    pthread_mutex_lock(&w->mu);
    w->a = a;
    w->done = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

segd_err_t segd_pwriter_wait(segd_pwriter_t *w, double *write_s, char *errstr, size_t n)
{
    pthread_mutex_lock(&w->mu);
    while (w->a && !w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    segd_err_t err = SEGD_OK;
    *write_s = 0;
    if (w->a) {
        err = w->err;
        *write_s = w->write_s;
        if (err)
            snprintf(errstr, n, "%s", w->errstr);
        w->a = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    return err;
}
