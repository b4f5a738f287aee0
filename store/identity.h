/* The identity graph in the store (DESIGN §10): the `links` family (edge
 * LWW registers) and the `ids` family (per id: first-seen, link count and
 * master; per master: its member list), the online union-find that applies
 * link events into a segd_batch_t, the super-node guard, the two-read
 * lookups and the offline rebuild. Pure store layer: callers decode events
 * (wire/link_event.h) and route refusals to the DLQ.
 * Writes: one segd_ident_t per writer thread, used with one batch at a time;
 * its overlay makes reads inside a batch see the batch's own earlier events.
 * Reads (check, members, the codec functions) are thread-safe.
 * The code is in store/identity_*.c; store/identity_int.h says which
 * module owns what. */
#ifndef SEGD_IDENTITY_H
#define SEGD_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "store/store.h"

#define SEGD_IDENT_VERSION 1
#define SEGD_IDENT_MAX_ID 256 /* as SEGD_MAX_USER_ID */

#define SEGD_IDENT_MIN_WEIGHT 0.5
#define SEGD_IDENT_MAX_COMPONENT 1000
#define SEGD_IDENT_MAX_LINKS 10000

/* The counter (meta `count/<name>`) of links refused by the guard. */
#define SEGD_IDENT_SUPERNODE_COUNTER "identity_supernode"
/* The store's identity epoch (meta `count/identity_epoch`, DESIGN §10.6):
 * 0 until the first rebuild, then raised by every rebuild to
 * max(previous + 1, wall ms); every membership change carries it. */
#define SEGD_IDENT_EPOCH_COUNTER "identity_epoch"
/* The rebuild mark (meta `count/identity_rebuild_in_progress`, DESIGN
 * §10.5): the epoch of a rebuild that has written a batch of `ids` but not
 * its last one, 0 otherwise. While it is set the `ids` family mixes old and
 * new components: segd run, backfill and the reads refuse
 * (SEGD_ERR_INVALID, SEGD_IDENT_REBUILD_MSG) until a rebuild completes. */
#define SEGD_IDENT_REBUILD_COUNTER "identity_rebuild_in_progress"
#define SEGD_IDENT_REBUILD_MSG \
    "an identity rebuild was interrupted: run segd identity rebuild again"

typedef enum segd_link_op { SEGD_LINK = 0, SEGD_UNLINK = 1 } segd_link_op_t;

/* A decoded, validated link event. Ids are borrowed by the apply call. */
typedef struct segd_link_event {
    const char *id_a;
    size_t id_a_len;
    const char *id_b;
    size_t id_b_len;
    segd_link_op_t op;
    int64_t ts_ms;
    double weight;
} segd_link_event_t;

/* An edge's LWW register (the `links` value). */
typedef struct segd_link_state {
    int64_t ts_ms;
    double weight;
    int linked; /* 1 LINK, 0 UNLINK */
} segd_link_state_t;

/* One id's `i` record. */
typedef struct segd_ident_rec {
    int64_t first_seen_ms;
    uint32_t n_links;
    char master[SEGD_IDENT_MAX_ID];
    size_t master_len;
} segd_ident_rec_t;

/* A membership change: id now has master (DESIGN §10.3). The bytes are
 * borrowed for the callback only. The three times together are the key of
 * the change stream's register (wire/member.h). */
typedef struct segd_ident_change {
    const char *id;
    size_t id_len;
    const char *master;
    size_t master_len;
    int64_t ts_ms;                /* of the event that caused it, or a rebuild's wall clock */
    int64_t master_first_seen_ms; /* the master's first-seen when the change was made */
    int64_t epoch_ms;             /* the store's identity epoch */
} segd_ident_change_t;
/* Called for each membership change while a link event is applied, in the
 * order made; a non-zero return fails the apply with SEGD_ERR_NOMEM (the
 * caller could not record it) and the batch must then be dropped. */
typedef int (*segd_ident_change_cb)(void *ctx, const segd_ident_change_t *c);

typedef struct segd_ident_opts {
    double min_weight;       /* default SEGD_IDENT_MIN_WEIGHT */
    uint32_t max_component;  /* default SEGD_IDENT_MAX_COMPONENT */
    uint32_t max_links;      /* default SEGD_IDENT_MAX_LINKS */
} segd_ident_opts_t;

void segd_ident_opts_default(segd_ident_opts_t *o);

/* ---------- codecs (pure; DESIGN §10.2) ---------- */

/* The `links` key of an id pair (either order): min ‖ 0x00 ‖ max. */
segd_err_t segd_link_key(const char *a, size_t a_len, const char *b, size_t b_len,
                         segd_buf_t *out);
void segd_link_state_encode(const segd_link_state_t *st, uint8_t out[18]);
/* SEGD_ERR_CORRUPT for anything segd_link_state_encode did not write. */
segd_err_t segd_link_state_decode(const uint8_t *data, size_t len, segd_link_state_t *st);
/* The LWW join: the larger (ts_ms, unlinked, weight). */
segd_link_state_t segd_link_state_join(const segd_link_state_t *x, const segd_link_state_t *y);
/* Whether a LINK of this weight joins components. */
int segd_link_joins(const segd_ident_opts_t *o, segd_link_op_t op, double weight);
/* 0 when ev is well-formed (ids 1..256 bytes without 0x00, distinct, weight
 * finite in [0, 1]); otherwise SEGD_ERR_INVALID with the reason in errstr. */
segd_err_t segd_link_event_check(const segd_link_event_t *ev, char *errstr,
                                 size_t errstr_size);

/* ---------- online apply ---------- */

typedef struct segd_ident segd_ident_t;

/* Reads the supernode counter's stored total. *out freed with
 * segd_ident_destroy. The store is borrowed until then. SEGD_ERR_INVALID
 * (SEGD_IDENT_REBUILD_MSG) while an interrupted rebuild's mark is set:
 * online joins over a half-rewritten `ids` family would spread the mix. */
segd_err_t segd_ident_new(segd_store_t *s, const segd_ident_opts_t *o, segd_ident_t **out,
                          char *errstr, size_t errstr_size);
void segd_ident_destroy(segd_ident_t *id);

/* The outcome of one apply. */
typedef enum segd_ident_result {
    SEGD_IDENT_APPLIED = 0,
    SEGD_IDENT_SUPERNODE_COMPONENT, /* refused: the join exceeds max_component */
    SEGD_IDENT_SUPERNODE_LINKS      /* refused: a new edge for an id at max_links */
} segd_ident_result_t;

/* Applies ev (checked with segd_link_event_check) into b: the edge, the
 * `ids` records and, for a refusal, the supernode counter (nothing else is
 * written then; the caller sends the event to the DLQ with reason
 * "supernode"). cb (may be NULL) hears every membership change. Reads go
 * to the overlay of what this handle wrote into b since the last
 * segd_ident_reset, then to the store. All of a batch's link events must go
 * through one handle. SEGD_ERR_IO etc. on a store read failure: the batch
 * is then in an unknown state and must be cleared with a reset. */
segd_err_t segd_ident_apply(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                            segd_ident_change_cb cb, void *ctx, segd_ident_result_t *result,
                            char *errstr, size_t errstr_size);
/* Drops the overlay: call after the batch was written or cleared. A failed
 * write that the caller retries with the same batch keeps it. */
void segd_ident_reset(segd_ident_t *id);
/* Link events applied and refused since segd_ident_new, and the stored
 * supernode total (what the batch carries). */
uint64_t segd_ident_applied(const segd_ident_t *id);
int64_t segd_ident_supernode_total(const segd_ident_t *id);

/* ---------- reads (at most two point reads per id) ---------- */
/* SEGD_OK, or SEGD_ERR_INVALID with SEGD_IDENT_REBUILD_MSG in errstr while
 * the rebuild mark is set (check, members, get_linked and the view scan
 * test it through their view). */
segd_err_t segd_ident_rebuild_check(segd_store_t *s, char *errstr, size_t errstr_size);
/* check, members and get_linked each read through one RocksDB snapshot of
 * their own (a store view): all their reads see one state of the store, so
 * a concurrent writer (segd run applying links or segments) cannot make
 * them mix the graph of one moment with records of another. The _view_
 * forms read through the caller's view. */

/* SEGD_ERR_NOTFOUND when the graph does not know id (it is then a
 * component of itself). */
segd_err_t segd_ident_get(segd_store_t *s, const char *id, size_t id_len, segd_ident_rec_t *rec,
                          char *errstr, size_t errstr_size);
/* *connected = 1 and master filled when a and b share a master (both
 * records read through one view). */
segd_err_t segd_ident_check(segd_store_t *s, const char *a, size_t a_len, const char *b,
                            size_t b_len, int *connected, segd_ident_rec_t *master,
                            char *errstr, size_t errstr_size);
/* Calls cb for the members of id's component, the master first, then the
 * others in bytewise order; an unknown id yields itself alone. cb returns
 * non-zero to stop. Bytes borrowed for the call. */
typedef int (*segd_ident_member_cb)(void *ctx, const char *member, size_t len);
segd_err_t segd_ident_members(segd_store_t *s, const char *id, size_t id_len,
                              segd_ident_member_cb cb, void *ctx, char *errstr,
                              size_t errstr_size);
segd_err_t segd_ident_view_members(segd_store_view_t *v, const char *id, size_t id_len,
                                   segd_ident_member_cb cb, void *ctx, char *errstr,
                                   size_t errstr_size);

/* The §3 join of the records of every member of id's component into out
 * (replaced), each member's erase marker applied to its own record only
 * (the result has none). cb (may be NULL) hears each member, the master
 * first; non-zero from it stops with SEGD_ERR_ABORTED. One point read per
 * member (segd_store_view_get) after the two graph reads, all through one
 * view: the member list and every record are of the same store state. */
segd_err_t segd_ident_get_linked(segd_store_t *s, const char *id, size_t id_len,
                                 segd_profile_t *out, segd_ident_member_cb cb, void *ctx,
                                 char *errstr, size_t errstr_size);
segd_err_t segd_ident_view_get_linked(segd_store_view_t *v, const char *id, size_t id_len,
                                      segd_profile_t *out, segd_ident_member_cb cb, void *ctx,
                                      char *errstr, size_t errstr_size);

/* Every stored edge in key order; cb returns non-zero to stop. */
typedef int (*segd_link_cb)(void *ctx, const char *a, size_t a_len, const char *b,
                            size_t b_len, const segd_link_state_t *st);
segd_err_t segd_ident_scan_links(segd_store_t *s, segd_link_cb cb, void *ctx, char *errstr,
                                 size_t errstr_size);

/* Every id of the graph as a view holds it (DESIGN §10.6: a snapshot's
 * members files): cb(ctx, id, master, the master's first-seen), in key
 * order; non-zero from cb stops. *epoch_ms = the view's identity epoch.
 * A store without the families has no ids. SEGD_ERR_CORRUPT for a record
 * that does not decode or a master without one. */
typedef int (*segd_ident_entry_cb)(void *ctx, const char *id, size_t id_len, const char *master,
                                   size_t master_len, int64_t master_first_seen_ms);
segd_err_t segd_ident_view_scan(segd_store_view_t *v, segd_ident_entry_cb cb, void *ctx,
                                int64_t *epoch_ms, char *errstr, size_t errstr_size);

/* ---------- offline rebuild (DESIGN §10.5) ---------- */

typedef struct segd_ident_rebuild_stats {
    uint64_t ids;               /* ids in the graph */
    uint64_t edges_used;        /* linked edges at or above min_weight */
    uint64_t refused;           /* unions the component guard refused */
    uint64_t components;        /* all, singletons included */
    uint64_t linked_components; /* of more than one id */
    uint64_t repointed;         /* ids whose master changed */
    uint64_t repaired;          /* ids whose `i` record was corrupt or absent: rebuilt
                                 * from the links family (or deleted when no edge
                                 * names the id) */
    int64_t epoch_ms;           /* the epoch the rebuild started */
} segd_ident_rebuild_stats_t;
/* Hears a membership change the rebuild makes, with the batch that will
 * carry it, and then c == NULL just before that batch is written (to
 * append one outbox entry of the changes heard); non-zero stops the
 * rebuild (SEGD_ERR_NOMEM). ts_ms of a rebuild change is the rebuild's wall
 * clock. Every batch also sets the epoch counter. */
typedef int (*segd_ident_rebuild_cb)(void *ctx, segd_batch_t *b, const segd_ident_change_t *c);
/* Recomputes the components over linked edges with weight >= min_weight
 * and rewrites the `ids` family to match, in batches of bounded size. It
 * writes the `i` records whose master changes and every member list, and
 * deletes the lists of ids that are no longer masters.
 * An `i` record that does not decode, or that an edge's end lacks, is
 * rebuilt from the id's edges (DESIGN §10.5). A `links` key or value, or an
 * `ids` key, that does not decode fails with SEGD_ERR_CORRUPT naming it.
 * Every batch but the last sets the rebuild mark and the last clears it. A
 * rebuild cut short leaves the mark set, and the next one (which does not
 * test it) completes and clears it.
 * progress (may be NULL) is called with (done, total) ids, and cb (may be
 * NULL) hears every change. Offline: no other writer may run. */
segd_err_t segd_ident_rebuild(segd_store_t *s, const segd_ident_opts_t *o,
                              void (*progress)(void *ctx, uint64_t done, uint64_t total),
                              void *pctx, segd_ident_rebuild_cb cb, void *cctx,
                              segd_ident_rebuild_stats_t *st, char *errstr,
                              size_t errstr_size);

#endif
