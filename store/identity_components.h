/* Listing the identity graph's components (DESIGN §10.5): every master
 * with its members, largest component first. Read-only, through one store
 * view, so it runs beside a live segd run and sees one state of the graph.
 * Called by `segd identity components`.
 * The cost is one scan of the `ids` family's `m` records (one per component
 * of two or more ids; only each list's 5-byte head is decoded), memory for
 * one (master, size) pair per component kept, a sort, then one point read
 * per component reported. Components of one id have no `m` record (DESIGN
 * §10.2), so they are never listed: min_size is at least 2. */
#ifndef SEGD_IDENTITY_COMPONENTS_H
#define SEGD_IDENTITY_COMPONENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

typedef struct segd_ident_list_opts {
    uint32_t min_size; /* components of fewer ids are skipped; 2 or more */
    uint64_t limit;    /* at most this many reported; 0: all */
} segd_ident_list_opts_t;

/* One id, borrowed. */
typedef struct segd_ident_idref {
    const char *s;
    size_t len;
} segd_ident_idref_t;

/* A component as the callback sees it: the master, then members[0..size),
 * the master first and the others in bytewise order (as segd identity
 * members). Everything is borrowed for the callback only. */
typedef struct segd_ident_component {
    const char *master;
    size_t master_len;
    size_t size;
    const segd_ident_idref_t *members;
} segd_ident_component_t;

/* Non-zero stops the listing (the call still returns SEGD_OK). */
typedef int (*segd_ident_component_cb)(void *ctx, const segd_ident_component_t *c);

/* What a listing found: components of two or more ids in the view, how
 * many passed min_size, how many were reported (limit and cb may cut). */
typedef struct segd_ident_list_stats {
    uint64_t linked_components;
    uint64_t matching;
    uint64_t reported;
} segd_ident_list_stats_t;

/* Calls cb for each component of at least o->min_size ids, by size
 * descending, ties by master id bytewise ascending, up to o->limit. st
 * (may be NULL) is filled. SEGD_ERR_INVALID for min_size < 2, or with
 * SEGD_IDENT_REBUILD_MSG while an interrupted rebuild's mark is set;
 * SEGD_ERR_CORRUPT naming an `m` record that does not decode, or whose
 * count disagrees with its list. A store without the identity families
 * has no components. The _view_ form reads through the caller's view. */
segd_err_t segd_ident_components(segd_store_t *s, const segd_ident_list_opts_t *o,
                                 segd_ident_component_cb cb, void *ctx,
                                 segd_ident_list_stats_t *st, char *errstr,
                                 size_t errstr_size);
segd_err_t segd_ident_view_components(segd_store_view_t *v, const segd_ident_list_opts_t *o,
                                      segd_ident_component_cb cb, void *ctx,
                                      segd_ident_list_stats_t *st, char *errstr,
                                      size_t errstr_size);

#endif
