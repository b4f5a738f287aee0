/* Merge thread -> writer thread in two batches; see handoff.h. A batch is
 * flat: the users' bytes, their entries, and one descriptor per user; the
 * merge fills one while the writer empties the other. */
#include "load/handoff.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct user_desc {
    size_t uoff, ulen, eoff, n;
    int64_t erased;
    uint64_t items;
} user_desc_t;

typedef struct batch {
    segd_buf_t users;
    segd_entry_t *e;
    size_t ne, cap_e;
    user_desc_t *u;
    size_t nu, cap_u;
    int full, last;
    segd_err_t err;
    char errstr[256];
} batch_t;

struct segd_handoff {
    segd_extsort_t *x;
    size_t limit;
    pthread_t thread;
    int thread_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    batch_t b[2];
    int stop;
    int ci, have; /* the writer's batch, and whether it holds it */
    size_t cu;    /* its next user */
    segd_profile_t view;
};

static segd_err_t batch_add(batch_t *b, const char *user, size_t ulen,
                            const segd_profile_t *p, uint64_t items)
{
    /* + 1: never an unallocated array, even for users without entries */
    segd_entry_t *e = segd_array_grow(b->e, &b->cap_e, b->ne + p->n + 1, sizeof(*e));
    if (!e)
        return SEGD_ERR_NOMEM;
    b->e = e;
    user_desc_t *u = segd_array_grow(b->u, &b->cap_u, b->nu + 1, sizeof(*u));
    if (!u)
        return SEGD_ERR_NOMEM;
    b->u = u;
    size_t uoff = b->users.len;
    if (segd_buf_append(&b->users, user, ulen))
        return SEGD_ERR_NOMEM;
    if (p->n)
        memcpy(b->e + b->ne, p->entries, p->n * sizeof(*p->entries));
    b->u[b->nu++] = (user_desc_t){uoff, ulen, b->ne, p->n, p->erased_before_ms, items};
    b->ne += p->n;
    return SEGD_OK;
}

/* Fills b until it holds limit bytes or the merge ends (last) or fails. */
static void fill(segd_handoff_t *h, batch_t *b)
{
    b->users.len = 0;
    b->ne = b->nu = 0;
    while (b->ne * sizeof(segd_entry_t) + b->users.len < h->limit) {
        const char *user;
        size_t ulen;
        segd_profile_t *p;
        uint64_t items;
        int done;
        b->err = segd_extsort_next(h->x, &user, &ulen, &p, &items, &done, b->errstr,
                                   sizeof(b->errstr));
        if (!b->err && !done && (b->err = batch_add(b, user, ulen, p, items)))
            segd_errf(b->err, b->errstr, sizeof(b->errstr), "out of memory");
        if (b->err || done) {
            b->last = 1;
            return;
        }
    }
}

static void *merge_main(void *arg)
{
    segd_handoff_t *h = arg;
    for (int i = 0;; i = !i) {
        pthread_mutex_lock(&h->mu);
        while (h->b[i].full && !h->stop)
            pthread_cond_wait(&h->cv, &h->mu);
        int stop = h->stop;
        pthread_mutex_unlock(&h->mu);
        if (stop)
            return NULL;
        fill(h, &h->b[i]);
        pthread_mutex_lock(&h->mu);
        h->b[i].full = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        if (h->b[i].last)
            return NULL;
    }
}

segd_err_t segd_handoff_start(segd_handoff_t **out, segd_extsort_t *x, size_t batch_bytes,
                              char *errstr, size_t n)
{
    *out = NULL;
    segd_handoff_t *h = calloc(1, sizeof(*h));
    if (!h)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    h->x = x;
    h->limit = batch_bytes ? batch_bytes : 1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thread, NULL, merge_main, h)) {
        segd_handoff_stop(h);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "cannot start the merge thread");
    }
    h->thread_on = 1;
    *out = h;
    return SEGD_OK;
}

segd_err_t segd_handoff_next(segd_handoff_t *h, const char **user, size_t *ulen,
                             segd_profile_t **joined, uint64_t *items, int *done,
                             char *errstr, size_t n)
{
    for (;;) {
        batch_t *b = &h->b[h->ci];
        if (h->have && h->cu < b->nu) {
            const user_desc_t *u = &b->u[h->cu++];
            *user = (const char *)b->users.data + u->uoff;
            *ulen = u->ulen;
            *items = u->items;
            h->view = (segd_profile_t){u->erased, b->e + u->eoff, u->n, u->n};
            *joined = &h->view;
            *done = 0;
            return SEGD_OK;
        }
        if (h->have && b->last) { /* stays full: the thread has ended */
            *done = !b->err;
            return b->err ? segd_errf(b->err, errstr, n, "%s", b->errstr) : SEGD_OK;
        }
        pthread_mutex_lock(&h->mu);
        if (h->have) { /* hand the emptied batch back */
            b->full = 0;
            pthread_cond_broadcast(&h->cv);
            h->ci = !h->ci;
            h->have = 0;
            b = &h->b[h->ci];
        }
        while (!b->full)
            pthread_cond_wait(&h->cv, &h->mu);
        pthread_mutex_unlock(&h->mu);
        h->have = 1;
        h->cu = 0;
    }
}

void segd_handoff_stop(segd_handoff_t *h)
{
    if (!h)
        return;
    if (h->thread_on) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    for (int i = 0; i < 2; i++) {
        segd_buf_free(&h->b[i].users);
        free(h->b[i].e);
        free(h->b[i].u);
    }
    free(h);
}
