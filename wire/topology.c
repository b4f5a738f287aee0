/* topology.json in memory and as JSON; see topology.h. Parsing is a trust
 * boundary: topologies come from outside. */
#include "wire/topology.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "wire/avro_codec.h"
#include "wire/change.h"
#include "wire/manifest.h"

#define FORMAT_NAME "segd-snapshot-topology"
#define FORMAT_VERSION 1

static void fingerprint_hex(segd_snapfmt_t f, char out[17])
{
    uint64_t fp = 0;
    segd_avro_fingerprint(segd_snapfmt_schema_json(f), &fp);
    snprintf(out, 17, "%016" PRIx64, fp);
}

char *segd_topology_dump(const segd_topology_t *t)
{
    char fp[17];
    fingerprint_hex(t->records_format, fp);
    json_t *o = json_pack("{s:s,s:i,s:s,s:i,s:s,s:s,s:s,s:s}", "format", FORMAT_NAME,
                          "format_version", FORMAT_VERSION, "topic", t->topic, "partitions",
                          (int)t->partitions, "partitioner",
                          segd_partitioner_name(t->partitioner), "records_format",
                          segd_snapfmt_name(t->records_format), "schema_fingerprint", fp, "units",
                          "p-PPPPP/" SEGD_MANIFEST_NAME);
    char *s = o ? json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}

static segd_err_t check(const char *format, int version, const char *topic, int parts,
                        const char *partitioner, const char *records_format, const char *fp,
                        segd_topology_t *t, char *errstr, size_t n)
{
    char want[17];
    if (strcmp(format, FORMAT_NAME) || version != FORMAT_VERSION)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "topology: not a segd snapshot topology (format %s version %d)",
                         FORMAT_NAME, FORMAT_VERSION);
    if (!*topic || strlen(topic) >= sizeof(t->topic) || parts <= 0 || parts > 100000)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "topology: topic '%s', %d partitions",
                         topic, parts);
    if (segd_partitioner_parse(partitioner, &t->partitioner))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "topology: unknown partitioner '%s'",
                         partitioner);
    if (segd_snapfmt_parse(records_format, &t->records_format))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "topology: records_format '%s' is not one this segd reads (avro, "
                         "native)", records_format);
    fingerprint_hex(t->records_format, want);
    if (strcmp(fp, want))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "topology: %s records with schema %s, this segd reads them with %s",
                         records_format, fp, want);
    snprintf(t->topic, sizeof(t->topic), "%s", topic);
    t->partitions = parts;
    return SEGD_OK;
}

segd_err_t segd_topology_parse(const char *text, size_t len, segd_topology_t *t,
                               char *errstr, size_t n)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    if (!o)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "topology: %s (line %d)", je.text,
                         je.line);
    const char *format, *topic, *partitioner, *records_format, *fp;
    int version, parts;
    segd_err_t err;
    if (json_unpack(o, "{s:s,s:i,s:s,s:i,s:s,s:s,s:s}", "format", &format, "format_version",
                    &version, "topic", &topic, "partitions", &parts, "partitioner",
                    &partitioner, "records_format", &records_format, "schema_fingerprint",
                    &fp))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "topology: missing fields");
    else
        err = check(format, version, topic, parts, partitioner, records_format, fp, t,
                    errstr, n);
    json_decref(o);
    return err;
}
