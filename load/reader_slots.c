/* The file reader's slots (reader_int.h). A fixed set of slots cycles
 * free -> producer -> workers -> caller -> free. Waiting for a free slot is
 * the reader's back-pressure, and the number of slots is its memory bound.
 * The producer's skipped files are counted here, under the same lock. */
#include <stdlib.h>

#include "load/reader_int.h"

static void q_push(queue_t *q, slot_t *s)
{
    s->next = NULL;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
}

slot_t *segd_loader_queue_pop(queue_t *q)
{
    slot_t *s = q->head;
    if (s) {
        q->head = s->next;
        if (!q->head)
            q->tail = NULL;
    }
    return s;
}

/* abort is written under mu but read anywhere: atomically */
int segd_loader_stopping(loader_t *l)
{
    return __atomic_load_n(&l->abort, __ATOMIC_RELAXED) || (l->o->stop && *l->o->stop);
}

void segd_loader_set_abort(loader_t *l) { __atomic_store_n(&l->abort, 1, __ATOMIC_RELAXED); }

/* A free slot for the producer, emptied; NULL once the load is stopping. */
slot_t *segd_loader_take_free(loader_t *l)
{
    pthread_mutex_lock(&l->mu);
    while (!l->free_list && !segd_loader_stopping(l))
        pthread_cond_wait(&l->cv_free, &l->mu);
    slot_t *s = segd_loader_stopping(l) ? NULL : l->free_list;
    if (s)
        l->free_list = s->next;
    pthread_mutex_unlock(&l->mu);
    if (s) {
        s->in_len = s->n_blocks = s->n_items = 0;
        s->arena.len = 0;
        s->segments = s->skipped = s->bytes = 0;
        s->failed = 0;
        s->first_line = 0;
    }
    return s;
}

void segd_loader_give_back(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    s->next = l->free_list;
    l->free_list = s;
    pthread_cond_signal(&l->cv_free);
    pthread_mutex_unlock(&l->mu);
}

void segd_loader_push_work(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    q_push(&l->work, s);
    pthread_cond_signal(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
}

void segd_loader_push_done(loader_t *l, slot_t *s)
{
    pthread_mutex_lock(&l->mu);
    q_push(&l->done, s);
    pthread_cond_signal(&l->cv_done);
    pthread_mutex_unlock(&l->mu);
}

void segd_loader_count_skip(loader_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->producer_skipped++;
    pthread_mutex_unlock(&l->mu);
}

int segd_loader_grow_in(slot_t *s, size_t cap)
{
    if (s->in_cap >= cap)
        return 0;
    uint8_t *p = realloc(s->in, cap);
    if (!p)
        return -1;
    s->in = p;
    s->in_cap = cap;
    return 0;
}
