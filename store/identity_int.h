/* What the identity modules share, and nothing outside store/ includes:
 * the id and list types, the overlay map, the writer's state, the value
 * codecs of the `ids` family and the reads and writes of both families.
 * Everything above the store goes through store/identity.h.
 * Every write keeps three invariants. Each id's `i` record names the master
 * of its component. A master's `m` record lists every member and is absent
 * for a component of one. The master has the smallest (first_seen, id) of
 * its members.
 * The modules: identity_codec.c (values), identity_family.c (the overlay and
 * family reads and writes), identity_write.c (online union-find and guard),
 * identity_rebuild.c (offline rebuild), identity_read.c (lookups, scans and
 * linked reads). */
#ifndef SEGD_IDENTITY_INT_H
#define SEGD_IDENTITY_INT_H

#include <rocksdb/c.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "store/identity.h"
#include "store/store.h"

#define LINK_VALUE_LEN 18
#define REC_HEAD_LEN 13 /* version, first_seen (8), n_links (4) */
#define FAM_LINKS 'L'   /* overlay key tags: which family a key is of */
#define FAM_IDS 'I'

typedef struct ident_id {
    char s[SEGD_IDENT_MAX_ID];
    size_t len;
} ident_id_t;

typedef struct id_list {
    ident_id_t *v;
    size_t n, cap;
} id_list_t;

/* One key of the overlay: the family tag and the key bytes, the value the
 * batch put (or deleted: val NULL, present 0). */
typedef struct kv {
    uint8_t *key;
    size_t klen;
    uint8_t *val;
    size_t vlen;
    int present;
} kv_t;

/* An open-addressing map of byte keys to byte values. The writer uses it as
 * the overlay of what its batch wrote; the rebuild uses it as an index. */
typedef struct kvmap {
    kv_t *slots;
    size_t cap, n;
} kvmap_t;

/* The online writer's state (identity_write.c). The rebuild borrows one for
 * its buffers, overlay and store, since segd_ident_fam_put writes through it. */
struct segd_ident {
    segd_store_t *store;
    segd_ident_opts_t opts;
    kvmap_t overlay;
    segd_buf_t key, val, tmp;
    id_list_t la, lb, merged;
    uint64_t applied, refused;
    int64_t supernode_total;
    int64_t epoch_ms; /* the store's identity epoch (meta counter), for changes */
    int epoch_stale;  /* read it again before the next event (segd_ident_reset) */
    segd_ident_change_cb cb;
    void *cb_ctx;
    int64_t ts_ms; /* the event being applied */
};

/* ---------- identity_codec.c ---------- */

/* Bytewise order, a shorter prefix first. */
int segd_ident_id_cmp(const char *a, size_t al, const char *b, size_t bl);
/* Whether (fa, a) is older than (fb, b): the master rule. */
int segd_ident_older(int64_t fa, const char *a, size_t al, int64_t fb, const char *b, size_t bl);
segd_err_t segd_ident_list_push(id_list_t *l, const char *s, size_t len);
void segd_ident_list_free(id_list_t *l);
/* The `i` record value; out is replaced. */
segd_err_t segd_ident_rec_encode(const segd_ident_rec_t *r, segd_buf_t *out);
/* SEGD_ERR_CORRUPT for anything segd_ident_rec_encode did not write. */
segd_err_t segd_ident_rec_decode(const uint8_t *p, size_t len, segd_ident_rec_t *r);
/* The `m` member list value; out is replaced. */
segd_err_t segd_ident_members_encode(const id_list_t *l, segd_buf_t *out);
/* Replaces l's contents. SEGD_ERR_CORRUPT for a malformed list. */
segd_err_t segd_ident_members_decode(const uint8_t *p, size_t len, id_list_t *l);
/* A key for a message: bytes outside printable ASCII (the 0x00 between a
 * links key's ids among them) as '.'. */
void segd_ident_printable(char *out, size_t n, const uint8_t *k, size_t kl);

/* ---------- identity_family.c ---------- */

/* The slot of key k: its entry, or the empty slot where it would go (key
 * NULL). NULL when the map has no slots yet. */
kv_t *segd_ident_kv_find(kvmap_t *m, const uint8_t *k, size_t n);
/* Sets key to val (NULL: deleted); bytes copied. */
segd_err_t segd_ident_kv_set(kvmap_t *m, const uint8_t *k, size_t kn, const void *val,
                             size_t vn);
void segd_ident_kv_clear(kvmap_t *m);

/* Reads fam/key into out; *found = 0 when absent. Through the overlay when
 * ov is given (the batch's own writes first); with ro (a view's snapshot)
 * when given, else the store's read options (the latest state). */
segd_err_t segd_ident_fam_get(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                              char fam, const uint8_t *key, size_t klen, segd_buf_t *out,
                              int *found, char *errstr, size_t n);
/* Puts (val != NULL) or deletes fam/key in the batch and the overlay. */
segd_err_t segd_ident_fam_put(segd_ident_t *id, segd_batch_t *b, char fam, const uint8_t *key,
                              size_t klen, const void *val, size_t vlen);
/* Calls cb(ctx, key, value) for every key of a family in order (the
 * store's latest state); non-zero from cb stops. */
typedef int (*segd_ident_fam_cb)(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v,
                                 size_t vl);
segd_err_t segd_ident_fam_scan(segd_store_t *s, char fam, segd_ident_fam_cb cb, void *ctx,
                               char *errstr, size_t n);
/* The `ids` key of id: kind ('i' record, 'm' member list) then the id. */
segd_err_t segd_ident_ids_key(segd_buf_t *k, char kind, const char *id, size_t len);

/* The `i` record of id; *found = 0 when the graph does not know it. k and v
 * are scratch buffers. The _at form reads through ro as fam_get does. */
segd_err_t segd_ident_rec_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                  kvmap_t *ov, segd_buf_t *k, segd_buf_t *v, const char *id,
                                  size_t len, segd_ident_rec_t *r, int *found, char *errstr,
                                  size_t n);
segd_err_t segd_ident_rec_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                               const char *id, size_t len, segd_ident_rec_t *r, int *found,
                               char *errstr, size_t n);
/* The members of master's component into l (sorted; {master} when it has
 * no `m` record). */
segd_err_t segd_ident_members_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                      kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                                      const char *master, size_t len, id_list_t *l,
                                      char *errstr, size_t n);
segd_err_t segd_ident_members_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                                   const char *master, size_t len, id_list_t *l, char *errstr,
                                   size_t n);
/* Writes who's `i` record into b through id's overlay. */
segd_err_t segd_ident_rec_store(segd_ident_t *id, segd_batch_t *b, const char *who, size_t len,
                                const segd_ident_rec_t *r);
/* Writes master's member list (deleted for a component of one). */
segd_err_t segd_ident_members_store(segd_ident_t *id, segd_batch_t *b, const char *master,
                                    size_t len, const id_list_t *l);

#endif
