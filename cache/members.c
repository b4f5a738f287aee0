/* The edge cache's identity table; see members.h. Two chained hash tables:
 * registers by id, and groups by master (the registers naming that master,
 * kept sorted by id so that a component is copied out in its answer's
 * order without sorting). A register whose master changes moves from one
 * group to the other; an empty group is freed. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */
#include "cache/members.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/buf.h"

struct group;

typedef struct reg {
    struct reg *next;
    uint64_t h;
    int64_t first_seen_ms, epoch_ms;
    struct group *g;
    uint32_t id_len, master_len;
    char bytes[]; /* id, then master */
} reg_t;

typedef struct group {
    struct group *next;
    uint64_t h;
    reg_t **m; /* sorted by id bytewise */
    size_t n, cap;
    uint32_t master_len;
    char master[];
} group_t;

struct segd_members {
    pthread_rwlock_t lock;
    reg_t **regs;
    size_t nregs_b, nregs;
    group_t **groups;
    size_t ngroups_b, ngroups;
    uint64_t bytes, applied, stale;
};

static const char *reg_master(const reg_t *r) { return r->bytes + r->id_len; }

/* Bytewise order, a prefix first: the store's order of member lists. */
static int bytecmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

static uint64_t hash_id(const char *id, size_t len) { return XXH3_64bits(id, len); }

static size_t reg_bytes(const reg_t *r) { return sizeof(*r) + r->id_len + r->master_len; }

static size_t group_bytes(const group_t *g)
{
    return sizeof(*g) + g->master_len + g->cap * sizeof(*g->m);
}

void segd_member_list_free(segd_member_list_t *l)
{
    free(l->bytes);
    free(l->off);
    memset(l, 0, sizeof(*l));
}

segd_err_t segd_members_new(segd_members_t **out)
{
    segd_members_t *t = calloc(1, sizeof(*t));
    if (!t)
        return SEGD_ERR_NOMEM;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    *out = t;
    return SEGD_OK;
}

void segd_members_destroy(segd_members_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nregs_b; i++)
        for (reg_t *r = t->regs[i], *next; r; r = next) {
            next = r->next;
            free(r);
        }
    for (size_t i = 0; i < t->ngroups_b; i++)
        for (group_t *g = t->groups[i], *next; g; g = next) {
            next = g->next;
            free(g->m);
            free(g);
        }
    free(t->regs);
    free(t->groups);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

/* ---------- hash tables ---------- */

static reg_t **reg_slot(segd_members_t *t, uint64_t h, const char *id, size_t len)
{
    if (!t->nregs_b)
        return NULL;
    reg_t **p = &t->regs[h & (t->nregs_b - 1)];
    for (; *p; p = &(*p)->next)
        if ((*p)->h == h && (*p)->id_len == len && !memcmp((*p)->bytes, id, len))
            return p;
    return p;
}

static group_t **group_slot(segd_members_t *t, uint64_t h, const char *m, size_t len)
{
    if (!t->ngroups_b)
        return NULL;
    group_t **p = &t->groups[h & (t->ngroups_b - 1)];
    for (; *p; p = &(*p)->next)
        if ((*p)->h == h && (*p)->master_len == len && !memcmp((*p)->master, m, len))
            return p;
    return p;
}

/* Doubles a chained table's bucket array when its load passes 1. Each
 * node's `next` and `h` sit at the same place in reg_t and group_t. */
#define GROW(nodes, nb, count, type)                                                          \
    do {                                                                                      \
        if ((count) + 1 <= (nb))                                                              \
            break;                                                                            \
        size_t nnb = (nb) ? (nb) * 2 : 64;                                                    \
        type **nt = calloc(nnb, sizeof(*nt));                                                 \
        if (!nt)                                                                              \
            return SEGD_ERR_NOMEM;                                                            \
        for (size_t i_ = 0; i_ < (nb); i_++)                                                  \
            for (type *x_ = (nodes)[i_], *nx_; x_; x_ = nx_) {                                \
                nx_ = x_->next;                                                               \
                x_->next = nt[x_->h & (nnb - 1)];                                             \
                nt[x_->h & (nnb - 1)] = x_;                                                   \
            }                                                                                 \
        free(nodes);                                                                          \
        (nodes) = nt;                                                                         \
        (nb) = nnb;                                                                           \
    } while (0)

static segd_err_t grow_tables(segd_members_t *t)
{
    GROW(t->regs, t->nregs_b, t->nregs, reg_t);
    GROW(t->groups, t->ngroups_b, t->ngroups, group_t);
    return SEGD_OK;
}

/* ---------- groups ---------- */

/* Where id is, or would go, in g's sorted members. */
static size_t group_pos(const group_t *g, const char *id, size_t len, int *found)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = bytecmp(g->m[mid]->bytes, g->m[mid]->id_len, id, len);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < g->n && !bytecmp(g->m[lo]->bytes, g->m[lo]->id_len, id, len);
    return lo;
}

/* Adds r to the group of its master (created when new). */
static segd_err_t group_add(segd_members_t *t, reg_t *r)
{
    const char *m = reg_master(r);
    uint64_t h = hash_id(m, r->master_len);
    group_t **slot = group_slot(t, h, m, r->master_len), *g = *slot;
    if (!g) {
        if (!(g = calloc(1, sizeof(*g) + r->master_len)))
            return SEGD_ERR_NOMEM;
        g->h = h;
        g->master_len = r->master_len;
        memcpy(g->master, m, r->master_len);
        *slot = g;
        t->ngroups++;
        t->bytes += group_bytes(g);
    }
    int found;
    size_t at = group_pos(g, r->bytes, r->id_len, &found);
    size_t old_cap = g->cap;
    reg_t **arr = segd_array_grow(g->m, &g->cap, g->n + 1, sizeof(*arr));
    if (!arr)
        return SEGD_ERR_NOMEM; /* an empty new group stays: harmless, freed at destroy */
    g->m = arr;
    t->bytes += (g->cap - old_cap) * sizeof(*arr);
    memmove(arr + at + 1, arr + at, (g->n - at) * sizeof(*arr));
    arr[at] = r;
    g->n++;
    r->g = g;
    return SEGD_OK;
}

static void group_remove(segd_members_t *t, reg_t *r)
{
    group_t *g = r->g;
    int found;
    size_t at = group_pos(g, r->bytes, r->id_len, &found);
    if (found) {
        memmove(g->m + at, g->m + at + 1, (g->n - at - 1) * sizeof(*g->m));
        g->n--;
    }
    r->g = NULL;
    if (g->n)
        return;
    group_t **slot = group_slot(t, g->h, g->master, g->master_len);
    *slot = g->next;
    t->ngroups--;
    t->bytes -= group_bytes(g);
    free(g->m);
    free(g);
}

/* ---------- apply ---------- */

static segd_member_t reg_view(const reg_t *r)
{
    segd_member_t v = {0};
    v.id = r->bytes;
    v.id_len = r->id_len;
    v.master = reg_master(r);
    v.master_len = r->master_len;
    v.master_first_seen_ms = r->first_seen_ms;
    v.epoch_ms = r->epoch_ms;
    return v;
}

/* Member events reach a cache in any order and with duplicates (a tail
 * re-reads what a snapshot already holds), so a register is replaced only
 * when the event wins (segd_member_wins: the newer epoch, then the older
 * master). That is what makes every cache converge on the store's masters
 * whatever order it reads (DESIGN §10.6); a losing event is counted as stale
 * and changes nothing. A move to another master builds the new register and
 * adds it to its group before the old one leaves its group, so a failed
 * allocation leaves the table as it was. The whole step holds the write
 * lock, so a reader never sees an id in two groups or in none. */
segd_err_t segd_members_apply(segd_members_t *t, const segd_member_t *m, int *applied)
{
    if (applied)
        *applied = 0;
    if (!m->id_len || m->id_len > SEGD_MEMBERS_MAX_ID || !m->master_len ||
        m->master_len > SEGD_MEMBERS_MAX_ID)
        return SEGD_ERR_INVALID;
    uint64_t h = hash_id(m->id, m->id_len);
    segd_err_t err = SEGD_OK;
    pthread_rwlock_wrlock(&t->lock);
    if ((err = grow_tables(t)))
        goto out;
    reg_t **slot = reg_slot(t, h, m->id, m->id_len), *old = *slot;
    if (old) {
        segd_member_t cur = reg_view(old);
        if (!segd_member_wins(m, &cur)) {
            t->stale++;
            goto out;
        }
        if (!bytecmp(reg_master(old), old->master_len, m->master, m->master_len)) {
            /* same master, a newer epoch or first-seen: no move */
            old->first_seen_ms = m->master_first_seen_ms;
            old->epoch_ms = m->epoch_ms;
            t->applied++;
            if (applied)
                *applied = 1;
            goto out;
        }
    }
    reg_t *r = malloc(sizeof(*r) + m->id_len + m->master_len);
    if (!r) {
        err = SEGD_ERR_NOMEM;
        goto out;
    }
    r->h = h;
    r->first_seen_ms = m->master_first_seen_ms;
    r->epoch_ms = m->epoch_ms;
    r->g = NULL;
    r->id_len = (uint32_t)m->id_len;
    r->master_len = (uint32_t)m->master_len;
    memcpy(r->bytes, m->id, m->id_len);
    memcpy(r->bytes + m->id_len, m->master, m->master_len);
    /* the new group first: on failure the old register stays as it was */
    if ((err = group_add(t, r))) {
        free(r);
        goto out;
    }
    if (old) {
        group_remove(t, old);
        r->next = old->next;
        t->bytes -= reg_bytes(old);
        free(old);
    } else {
        r->next = NULL;
        t->nregs++;
    }
    *slot = r;
    t->bytes += reg_bytes(r);
    t->applied++;
    if (applied)
        *applied = 1;
out:
    pthread_rwlock_unlock(&t->lock);
    return err;
}

/* ---------- reads ---------- */

static segd_err_t list_push(segd_member_list_t *l, const char *id, size_t len)
{
    size_t used = l->n ? l->off[l->n] : 0;
    size_t *off = segd_array_grow(l->off, &l->off_cap, l->n + 2, sizeof(*off));
    if (!off)
        return SEGD_ERR_NOMEM;
    l->off = off;
    char *b = segd_array_grow(l->bytes, &l->bytes_cap, used + len, 1);
    if (!b)
        return SEGD_ERR_NOMEM;
    l->bytes = b;
    memcpy(b + used, id, len);
    off[l->n] = used;
    off[++l->n] = used + len;
    return SEGD_OK;
}

segd_err_t segd_members_component(segd_members_t *t, const char *id, size_t len,
                                  segd_member_list_t *out)
{
    out->n = 0;
    segd_err_t err = SEGD_OK;
    pthread_rwlock_rdlock(&t->lock);
    reg_t **slot = reg_slot(t, hash_id(id, len), id, len);
    const char *master = id;
    size_t mlen = len;
    if (slot && *slot) {
        master = reg_master(*slot);
        mlen = (*slot)->master_len;
    }
    group_t **gs = group_slot(t, hash_id(master, mlen), master, mlen);
    const group_t *g = gs ? *gs : NULL;
    err = list_push(out, master, mlen);
    for (size_t i = 0; !err && g && i < g->n; i++) {
        const reg_t *r = g->m[i];
        if (bytecmp(r->bytes, r->id_len, master, mlen))
            err = list_push(out, r->bytes, r->id_len);
    }
    pthread_rwlock_unlock(&t->lock);
    return err;
}

segd_err_t segd_members_scan(segd_members_t *t, segd_members_scan_cb cb, void *ctx)
{
    segd_err_t err = SEGD_OK;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; !err && i < t->nregs_b; i++)
        for (const reg_t *r = t->regs[i]; !err && r; r = r->next) {
            segd_member_t v = reg_view(r);
            if (cb(ctx, &v))
                err = SEGD_ERR_ABORTED;
        }
    pthread_rwlock_unlock(&t->lock);
    return err;
}

void segd_members_get_stats(segd_members_t *t, segd_members_stats_t *st)
{
    pthread_rwlock_rdlock(&t->lock);
    st->ids = t->nregs;
    st->masters = t->ngroups;
    st->bytes = t->bytes;
    st->applied = t->applied;
    st->stale = t->stale;
    pthread_rwlock_unlock(&t->lock);
}
