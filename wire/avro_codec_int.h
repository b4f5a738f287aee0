/* The Avro codec's internals, shared by wire/'s avro_*.c modules:
 * avro_codec.c (the codec, framing and schema lookup), avro_resolver.c
 * (writer schemas resolved against the reader, value <-> event),
 * avro_fast.c (the local schema's hand-written decoder) and
 * avro_container.c (container files). Other folders use avro_codec.h. */
#ifndef SEGD_AVRO_CODEC_INT_H
#define SEGD_AVRO_CODEC_INT_H

#include <avro.h>
#include <stdint.h>

#include "wire/avro_codec.h"

/* Field positions in a resolver's reduced schema (-1: the writer lacks it),
 * so extraction indexes rather than looks fields up by name per event. */
enum { F_USER, F_TS, F_OP, F_SEGS, F_SOURCE, F_ID, F_TTL, F_FLAGS, F_PARTNER, F_COUNT };

typedef struct resolver {
    int32_t id;     /* Confluent id, or -1 */
    int incompatible; /* a Confluent id whose schema does not resolve: remembered
                       * so a flood of such messages does not re-parse it */
    int fidx[F_COUNT];
    uint64_t fp;    /* single-object fingerprint */
    avro_schema_t writer, reduced;
    avro_value_iface_t *reduced_iface, *resolver_iface; /* resolver NULL: identity */
    avro_value_t value, wvalue;
} resolver_t;

#define UNKNOWN_IDS 64
#define UNKNOWN_TTL_MS 5000 /* short: a registry follower may lag a new schema briefly */

typedef struct defaults {
    int32_t flags, partner_id;
} defaults_t;

struct segd_avro_codec {
    char *reader_json;
    segd_schema_source_t registry; /* lookup NULL: no registry */
    avro_reader_t mem;
    avro_writer_t out;
    defaults_t dflt;
    resolver_t local; /* writer == reader */
    int generic_only; /* tests: decode the local schema through avro-c too */
    size_t max_segments; /* SIZE_MAX until segd_avro_codec_set_limits */
    resolver_t *cache;
    size_t ncache, capcache;
    /* ids the registry did not know, asked again only after UNKNOWN_TTL_MS:
     * a flood of bad messages must not cost a registry round trip each */
    struct {
        int32_t id;
        int64_t until_ms;
    } unknown[UNKNOWN_IDS];
    size_t unknown_next;
};

/* Builds r for writer_json read as reader_json; on failure r is left empty
 * (safe to free). */
segd_err_t segd_avro_resolver_init(resolver_t *r, const char *reader_json,
                                   const char *writer_json, char *errstr, size_t n);
void segd_avro_resolver_free(resolver_t *r);
/* Fills ev from v, a value of r's reduced schema. */
segd_err_t segd_avro_extract(const segd_avro_codec_t *c, const resolver_t *r, avro_value_t *v,
                             segd_event_t *ev, char *errstr, size_t n);
/* Fills v, a value of the local schema, from ev; nonzero on failure. */
int segd_avro_fill_value(avro_value_t *v, const segd_event_t *ev);
/* Reads c->dflt from the reader schema's field defaults. */
void segd_avro_load_defaults(segd_avro_codec_t *c);
/* Decodes a whole local-schema body (no framing) with the fast decoder. */
segd_err_t segd_avro_fast_decode(const uint8_t *b, size_t len, size_t max_segments,
                                 segd_event_t *ev, char *errstr, size_t n);

#endif
