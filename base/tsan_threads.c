/* C11 threads over pthreads, linked only into ThreadSanitizer builds
 * (SEGD_TSAN). librdkafka starts its threads with thrd_create and locks
 * with mtx_lock and cnd_wait, which glibc 2.34+ implements without going
 * through pthread_create or pthread_mutex_lock, and no ThreadSanitizer
 * runtime (GCC 12's, nor clang 14's, 16's or 19's) intercepts the C11
 * names: a thread TSan never saw start crashes on its first allocation, and
 * a message handed from librdkafka's thread to ours through its queue looks
 * like a race. Defined in the executable, these take the place of glibc's
 * for librdkafka too (the executable comes first in symbol lookup), and
 * TSan's pthread interceptors see every thread, lock and wait. glibc's
 * mtx_t, cnd_t and once_flag are its pthread types by another name (its
 * own C11 functions cast them the same way). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct start {
    thrd_start_t func;
    void *arg;
} start_t;

static void *trampoline(void *p)
{
    start_t s = *(start_t *)p;
    free(p);
    return (void *)(intptr_t)s.func(s.arg);
}

static int thrd_result(int rc)
{
    return rc == 0 ? thrd_success : rc == ENOMEM || rc == EAGAIN ? thrd_nomem : thrd_error;
}

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
    start_t *s = malloc(sizeof(*s));
    if (!s)
        return thrd_nomem;
    s->func = func;
    s->arg = arg;
    pthread_t t;
    int rc = pthread_create(&t, NULL, trampoline, s);
    if (rc) {
        free(s);
        return thrd_result(rc);
    }
    *thr = (thrd_t)t;
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret = NULL;
    int rc = pthread_join((pthread_t)thr, &ret);
    if (!rc && res)
        *res = (int)(intptr_t)ret;
    return thrd_result(rc);
}

int thrd_detach(thrd_t thr)
{
    return thrd_result(pthread_detach((pthread_t)thr));
}

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "glibc's mtx_t is a pthread mutex");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "glibc's cnd_t is a pthread cond");
_Static_assert(sizeof(once_flag) == sizeof(pthread_once_t), "glibc's once_flag");

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return thrd_result(rc);
}

int mtx_lock(mtx_t *m) { return thrd_result(pthread_mutex_lock((pthread_mutex_t *)m)); }

int mtx_trylock(mtx_t *m)
{
    int rc = pthread_mutex_trylock((pthread_mutex_t *)m);
    return rc == EBUSY ? thrd_busy : thrd_result(rc);
}

int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict until)
{
    int rc = pthread_mutex_timedlock((pthread_mutex_t *)m, until);
    return rc == ETIMEDOUT ? thrd_timedout : thrd_result(rc);
}

int mtx_unlock(mtx_t *m) { return thrd_result(pthread_mutex_unlock((pthread_mutex_t *)m)); }

void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

int cnd_init(cnd_t *c) { return thrd_result(pthread_cond_init((pthread_cond_t *)c, NULL)); }

int cnd_signal(cnd_t *c) { return thrd_result(pthread_cond_signal((pthread_cond_t *)c)); }

int cnd_broadcast(cnd_t *c) { return thrd_result(pthread_cond_broadcast((pthread_cond_t *)c)); }

int cnd_wait(cnd_t *c, mtx_t *m)
{
    return thrd_result(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict until)
{
    int rc = pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, until);
    return rc == ETIMEDOUT ? thrd_timedout : thrd_result(rc);
}

void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }

void call_once(once_flag *flag, void (*func)(void)) { pthread_once((pthread_once_t *)flag, func); }
