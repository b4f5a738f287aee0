/* libsegd-cache: segd's edge cache for embedding in a bidder (DESIGN §5, §6).
 *
 * A table user id -> live segments held in memory, filled from a snapshot
 * exported by `segd snapshot export` (a local directory) and kept fresh by
 * applying the change-topic messages segd publishes (any order, duplicates
 * harmless: the join is the store's, DESIGN §3). Reading the change topic
 * from Kafka is the caller's (or `segd cache`'s, or libsegd-tail's: segd/tail.h):
 * this library has no Kafka, RocksDB or HTTP client in it.
 *
 * Conventions
 * - Every function returning int returns a segd_cache_status_t: 0 on success.
 * - User ids are bytes (ptr, len), not NUL-terminated strings; strict UTF-8.
 * - Threads: lookups, counts and stats may run on any number of threads at
 *   once, beside loads and applies (the table is sharded under reader-writer
 *   locks). segd_cache_destroy must not run beside anything else.
 * - Ownership: the library copies what it keeps; out-parameters are the
 *   caller's memory.
 *
 * Build: `pkg-config --cflags --libs segd-cache` (a C11 compiler). */
#ifndef SEGD_CACHE_PUBLIC_H
#define SEGD_CACHE_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SEGD_CACHE_VERSION_MAJOR 1
#define SEGD_CACHE_VERSION_MINOR 2
#define SEGD_CACHE_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch: compare with segd_cache_version() to
 * find a header built against another library than the one loaded. */
#define SEGD_CACHE_VERSION 10200

#if defined(__GNUC__)
#define SEGD_CACHE_API __attribute__((visibility("default")))
#else
#define SEGD_CACHE_API
#endif

typedef enum segd_cache_status {
    SEGD_CACHE_OK = 0,
    SEGD_CACHE_ENOMEM = 1,    /* out of memory (the table is unchanged or holds a
                               * partial load: destroy it) */
    SEGD_CACHE_EINVAL = 2,    /* a bad argument */
    SEGD_CACHE_ENOTFOUND = 3, /* no such file or snapshot */
    SEGD_CACHE_ECORRUPT = 4,  /* a file or message that is not what it claims:
                               * checksum, format or framing */
    SEGD_CACHE_EIO = 5,       /* the operating system refused a read */
    SEGD_CACHE_ELIMIT = 6,    /* the caller's array is too small (*n says how
                               * many it takes) */
    SEGD_CACHE_EOTHER = 7,
    /* libsegd-tail (segd/tail.h) only: */
    SEGD_CACHE_EGAP = 8,   /* the change topic no longer holds deltas the loaded
                            * snapshot needs (retention): load a newer one */
    SEGD_CACHE_EKAFKA = 9  /* brokers or the change topic not reachable */
} segd_cache_status_t;

typedef struct segd_cache segd_cache_t;

/* One live segment (DESIGN §2): the layout of segd's own entries, so a
 * lookup copies nothing twice. */
typedef struct segd_cache_segment {
    int64_t id;
    int64_t ts_ms;      /* event time of the membership */
    int64_t expires_at; /* Unix seconds */
    int32_t flags;      /* opaque, from the producer */
    int32_t partner_id; /* opaque, from the producer */
} segd_cache_segment_t;

/* Filters as `segd get`'s flags; zero = no filter. */
typedef struct segd_cache_filter {
    int64_t expiring_after; /* keep expires_at > this (Unix seconds) */
    int64_t updated_since_ms; /* keep ts_ms >= this */
} segd_cache_filter_t;

typedef struct segd_cache_stats {
    uint64_t users;   /* profiles held (live segments or not) */
    uint64_t entries; /* entries held, dead ones within the horizon included */
    uint64_t bytes;   /* memory of the profiles and of the identity table */
    uint64_t changes; /* change messages applied */
} segd_cache_stats_t;

/* SEGD_CACHE_VERSION of the loaded library. Any thread. */
SEGD_CACHE_API unsigned segd_cache_version(void);
/* A static English text for a status. Any thread. */
SEGD_CACHE_API const char *segd_cache_strerror(int status);

/* now_ms: the clock liveness is judged by; 0 = the wall clock (bidders), a
 * fixed time for tests and replays. *out is the caller's to destroy. */
SEGD_CACHE_API int segd_cache_new(segd_cache_t **out, int64_t now_ms);
/* Frees everything; c may be NULL. Not beside any other call on c. */
SEGD_CACHE_API void segd_cache_destroy(segd_cache_t *c);
/* Moves the clock (0 = wall clock). Any thread. */
SEGD_CACHE_API void segd_cache_set_now(segd_cache_t *c, int64_t now_ms);

/* Loads a snapshot: dir is `segd snapshot export --to DEST`'s DEST/<topic>
 * (or DEST holding one topic). Every unit's files are checked against its
 * manifest (size, SHA-256, each user in its unit's partition) before any of
 * its records count; the units' retirements and GC watermarks are applied.
 * threads: units read side by side (0 = 1). *users (NULL = not wanted)
 * receives the number of records loaded. A unit replaced by a newer export
 * while it is read is loaded again from the new one after the table dropped
 * every user of that unit's partition, when the table was empty before the
 * load and no delta was applied since; otherwise the load fails (load it
 * anew into a new table). On failure destroy the table: it may hold part
 * of the snapshot. Beside lookups, not beside another load. */
SEGD_CACHE_API int segd_cache_load_snapshot(segd_cache_t *c, const char *dir,
                                            unsigned threads, uint64_t *users);

/* Applies one message value of segd's change topic (DESIGN §5: single-object
 * or Confluent framing before a ChangeEvent or a MemberEvent): a DELTA
 * joins into its user, a RETIRE retires segments, a MemberEvent (1.2) sets
 * an id's identity master when it wins the id's register (DESIGN §10.5).
 * Order-free and idempotent. A message that is neither is
 * SEGD_CACHE_ECORRUPT and changes nothing. Beside lookups and other
 * applies (any thread). */
SEGD_CACHE_API int segd_cache_apply_change(segd_cache_t *c, const void *msg, size_t len);

/* The user's live segments at the cache's clock that pass f (NULL = none),
 * sorted by id, into out[0..cap); *n = their number. *known (NULL = not
 * wanted) = 1 when the table holds the user at all: 0 means never seen, 1
 * with *n = 0 means nothing live. SEGD_CACHE_ELIMIT when the user's live
 * segments (before filtering) exceed cap: *n says how many to allow for. */
SEGD_CACHE_API int segd_cache_lookup(segd_cache_t *c, const char *user, size_t len,
                                     const segd_cache_filter_t *f, segd_cache_segment_t *out,
                                     size_t cap, size_t *n, int *known);

/* The number of the user's live segments with lo <= id <= hi. */
SEGD_CACHE_API int segd_cache_count_range(segd_cache_t *c, const char *user, size_t len,
                                          int64_t lo, int64_t hi, uint64_t *count);

/* Hears one member of a linked lookup's component; the bytes are borrowed
 * for the call. Non-zero stops the lookup (SEGD_CACHE_EOTHER). */
typedef int (*segd_cache_member_cb)(void *ctx, const char *member, size_t len);

/* Since 1.2 (SEGD_CACHE_VERSION >= 10200): segd_cache_lookup over the
 * user's identity component (DESIGN §10.5), as `segd get --linked` reads
 * it from the store: the members are the component's master and every id
 * whose master it is (from the change topic's MemberEvents and the
 * snapshot units' members files; an id the cache knows no membership of is
 * alone); the answer is the §3 join of their profiles, each member's erase
 * (ERASE_USER) applied to its own segments only, then the live segments at
 * the cache's clock that pass f, sorted by id, into out[0..cap).
 * on_member (NULL = not wanted) hears the members first, the master first
 * and then the others bytewise, before any segment is read. *known = 1 when
 * the table holds a profile for at least one member. SEGD_CACHE_ELIMIT when
 * the live segments (before filtering) exceed cap: *n says how many to
 * allow for. Any thread, beside loads and applies: each member's profile
 * is read whole, one after the other, so a change applied meanwhile may be
 * seen for one member and not yet for another (never an older state than a
 * lookup that returned before this one began). */
SEGD_CACHE_API int segd_cache_lookup_linked(segd_cache_t *c, const char *user, size_t len,
                                            const segd_cache_filter_t *f,
                                            segd_cache_segment_t *out, size_t cap, size_t *n,
                                            int *known, segd_cache_member_cb on_member,
                                            void *ctx);

SEGD_CACHE_API void segd_cache_stats(segd_cache_t *c, segd_cache_stats_t *st);

#ifdef __cplusplus
}
#endif

#endif
