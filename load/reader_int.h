/* What the modules of the file reader (reader.h) share: the slots that carry
 * a block of input and its chunk of output, the loader that cycles them, and
 * each decoding thread's state. A slot is in exactly one place at a time:
 * the free list, the work queue, the done queue or the hands of one thread.
 * Only load/reader*.c include this; everything else goes through reader.h. */
#ifndef SEGD_LOAD_READER_INTERNAL_H
#define SEGD_LOAD_READER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>
#include <zstd.h>

#include "base/buf.h"
#include "core/event.h"
#include "load/reader.h"
#include "load/source.h"
#include "wire/avro_codec.h"

#define JSON_BLOCK_MIN (1u << 20) /* a block's size; more if a line may be longer */
#define OCF_UNIT (1u << 20)       /* container blocks are grouped up to this */
#define OCF_MAX_BLOCK (64u << 20) /* as wire/avro_file.c: larger is damage */
#define LEGACY_CHUNK 2048         /* events per chunk on the fallback path */

typedef enum unit_kind { UNIT_JSON, UNIT_OCF, UNIT_READY } unit_kind_t;
typedef enum ocf_codec { OCF_NULL, OCF_DEFLATE, OCF_ZSTD } ocf_codec_t;

typedef struct ocf_block {
    int64_t count, first_rec;
    size_t off, len;
} ocf_block_t;

typedef struct slot {
    struct slot *next;
    unit_kind_t kind;
    const char *file;
    uint64_t bytes;     /* input bytes this unit accounts for */
    /* input */
    uint8_t *in;
    size_t in_len, in_cap;
    int64_t first_line; /* UNIT_JSON: the number of the block's first line */
    ocf_codec_t codec;  /* UNIT_OCF */
    ocf_block_t *blocks;
    size_t n_blocks, cap_blocks;
    /* output */
    segd_load_item_t *items;
    size_t n_items, cap_items;
    segd_buf_t arena; /* user and operand bytes; items hold offsets until done */
    uint64_t segments, skipped;
    int failed;       /* out of memory while decoding: the load stops */
} slot_t;

typedef struct queue {
    slot_t *head, *tail;
} queue_t;

typedef struct loader loader_t;

/* Per-thread decoding state: no sharing between workers. */
typedef struct worker {
    loader_t *l;
    pthread_t th;
    segd_event_t ev;
    segd_profile_t prof;
    segd_buf_t operand;
    segd_avro_codec_t *codec;
    segd_buf_t scratch; /* a decompressed container block */
    z_stream z;
    int z_ready;
    ZSTD_DCtx *zd;
} worker_t;

struct loader {
    const segd_load_opts_t *o;
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_work, cv_done;
    slot_t *slots;
    size_t n_slots;
    slot_t *free_list;
    queue_t work, done;
    int producer_done, abort;
    uint64_t producer_skipped;
    worker_t producer_w; /* the producer's own decoder (fallback OCF path) */
    size_t json_block;
    uint64_t local_fp;
};

/* reader_slots.c: moving slots between the free list and the queues. The
 * queue functions want mu held; the others take it themselves. */
slot_t *segd_loader_queue_pop(queue_t *q);
int segd_loader_stopping(loader_t *l);
void segd_loader_set_abort(loader_t *l);
slot_t *segd_loader_take_free(loader_t *l);
void segd_loader_give_back(loader_t *l, slot_t *s);
void segd_loader_push_work(loader_t *l, slot_t *s);
void segd_loader_push_done(loader_t *l, slot_t *s);
void segd_loader_count_skip(loader_t *l);
int segd_loader_grow_in(slot_t *s, size_t cap);

/* reader_chunk.c: the work done per event, by the formats' decoders on the
 * workers and on the producer's fallback OCF path. */
void segd_loader_report(worker_t *w, slot_t *s, int64_t no, const char *why);
int segd_loader_add_event(worker_t *w, slot_t *s, int64_t no);
void segd_loader_finish_chunk(slot_t *s);

/* A format of input file (reader_json.c, reader_ocf.c): produce cuts a file
 * into blocks on the producer thread, decode turns one block into its chunk
 * on a worker (nonzero: the slot failed and the load stops). The producer
 * picks the format by the file's first bytes, a worker by the block's kind. */
typedef struct reader_format {
    int (*produce)(loader_t *l, segd_source_t *src, const char *path, uint64_t *accounted);
    int (*decode)(worker_t *w, slot_t *s);
} reader_format_t;
extern const reader_format_t segd_loader_format_json; /* UNIT_JSON blocks */
extern const reader_format_t segd_loader_format_ocf;  /* UNIT_OCF blocks */

/* reader_worker.c: the decoding threads. */
void *segd_loader_worker_main(void *arg);
void segd_loader_worker_init(worker_t *w, loader_t *l);
void segd_loader_worker_free(worker_t *w);

#endif
