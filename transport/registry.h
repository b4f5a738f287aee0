/* Confluent schema-registry client over libcurl: fetches writer schemas by id
 * (cached for the life of the client) and registers schemas under subjects.
 * One client per thread: the cache and the curl handle are not locked. A
 * program with threads calls curl_global_init() before creating clients. */
#ifndef SEGD_REGISTRY_H
#define SEGD_REGISTRY_H

#include <stdint.h>

#include "base/err.h"

typedef struct segd_registry segd_registry_t;

typedef struct segd_registry_opts {
    const char *userpass; /* basic auth "user:password"; NULL = none */
    const char *ca_file;  /* CA bundle for https; NULL = system default */
    int insecure;         /* skip TLS verification (tests only) */
    long timeout_ms;      /* per request; default 5000 */
    int max_retries;      /* transport errors and 5xx; default 5 */
    long backoff_ms;      /* first retry delay, doubled each time; default 100 */
} segd_registry_opts_t;

void segd_registry_opts_default(segd_registry_opts_t *o);

/* base_url like "http://127.0.0.1:8081"; opts may be NULL (defaults). */
segd_err_t segd_registry_new(segd_registry_t **out, const char *base_url,
                             const segd_registry_opts_t *opts, char *errstr,
                             size_t errstr_size);
void segd_registry_destroy(segd_registry_t *r);

/* GET /schemas/ids/{id}. *json is borrowed until destroy. SEGD_ERR_NOTFOUND
 * for an unknown id (404); SEGD_ERR_HTTP when the registry stays unreachable
 * or failing after the retries (the caller waits and tries again later). */
segd_err_t segd_registry_get_schema(segd_registry_t *r, int32_t id, const char **json,
                                    char *errstr, size_t errstr_size);

/* segd_registry_get_schema for a void * handle: the lookup function of
 * wire/avro_codec.h's segd_schema_source_t (ctx = the registry). */
segd_err_t segd_registry_lookup(void *registry, int32_t id, const char **json, char *errstr,
                                size_t errstr_size);

/* Registers schema_json under subject (POST /subjects/{subject}/versions
 * with {"schema": schema_json}, as application/vnd.schemaregistry.v1+json)
 * and sets *id to the registry's id for it. A failed transfer or any
 * non-2xx answer is SEGD_ERR_HTTP. errstr then says what the status means
 * (409 is "incompatible under the subject's compatibility level") and
 * carries the registry's own reason, its error body's "message". */
segd_err_t segd_registry_register(segd_registry_t *r, const char *subject,
                                  const char *schema_json, int32_t *id, char *errstr,
                                  size_t errstr_size);

#endif
