/* Snapshot record formats: names, schemas, decoder dispatch; see
 * snap_format.h. */
#include "wire/snap_format.h"

#include <string.h>

#include "segd_schemas.h"
#include "base/utf8.h"
#include "wire/change.h"
#include "wire/snap_native.h"

const char *segd_snapfmt_name(segd_snapfmt_t f)
{
    return f == SEGD_SNAPFMT_NATIVE ? "native" : "avro";
}

int segd_snapfmt_parse(const char *name, segd_snapfmt_t *out)
{
    if (!strcmp(name, "avro"))
        *out = SEGD_SNAPFMT_AVRO;
    else if (!strcmp(name, "native"))
        *out = SEGD_SNAPFMT_NATIVE;
    else
        return -1;
    return 0;
}

const char *segd_snapfmt_schema_json(segd_snapfmt_t f)
{
    return f == SEGD_SNAPFMT_NATIVE ? SEGD_SCHEMA_SNAPSHOT_NATIVE : segd_snapshot_schema_json();
}

int segd_snapfmt_of_schema(const char *schema_json, segd_snapfmt_t *out)
{
    if (!schema_json)
        return -1;
    if (!strcmp(schema_json, segd_snapfmt_schema_json(SEGD_SNAPFMT_AVRO)))
        *out = SEGD_SNAPFMT_AVRO;
    else if (!strcmp(schema_json, segd_snapfmt_schema_json(SEGD_SNAPFMT_NATIVE)))
        *out = SEGD_SNAPFMT_NATIVE;
    else
        return -1;
    return 0;
}

segd_err_t segd_snapfmt_decode(segd_snapfmt_t f, const uint8_t **pos, const uint8_t *end,
                               const char **user, size_t *user_len, segd_profile_t *p)
{
    if (f == SEGD_SNAPFMT_NATIVE)
        return segd_snapnat_decode(pos, end, user, user_len, p);
    *user = NULL;
    segd_err_t err = segd_snaprec_decode(pos, end, user, user_len, p);
    if (err && *user && !segd_utf8_valid(*user, *user_len))
        *user = NULL; /* not a name to print */
    return err;
}
