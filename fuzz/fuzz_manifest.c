/* libFuzzer target: the snapshot unit manifest and topology.json parsers
 * (wire/manifest.h, wire/topology.h) on untrusted text, which readers fetch
 * from any destination. What parses must dump and parse back to the same
 * unit, and fold into an empty reader's manifest. */
#include <stdlib.h>
#include <string.h>

#include "wire/manifest.h"
#include "wire/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void unit_round_trip(const segd_manifest_t *m)
{
    char err[256];
    char *text = segd_manifest_dump(m, "deflate");
    if (!text)
        return;
    segd_manifest_t again, folded;
    segd_manifest_init(&again);
    segd_manifest_init(&folded);
    if (segd_manifest_parse(text, strlen(text), &again, err, sizeof(err)) != SEGD_OK ||
        strcmp(again.topic, m->topic) || again.partition != m->partition ||
        again.partitions != m->partitions || again.partitioner != m->partitioner ||
        again.records_format != m->records_format || again.records != m->records || again.n_files != m->n_files ||
        again.n_changes != m->n_changes || again.n_inputs != m->n_inputs)
        abort();
    if (segd_manifest_fold(&folded, &again, err, sizeof(err)) == SEGD_OK &&
        (folded.units != 1 || folded.n_changes != again.n_changes ||
         folded.records_format != again.records_format || folded.records_mixed))
        abort();
    segd_manifest_free(&again);
    segd_manifest_free(&folded);
    free(text);
}

static void topology_round_trip(const segd_topology_t *t)
{
    char err[256];
    char *text = segd_topology_dump(t);
    if (!text)
        return;
    segd_topology_t again;
    if (segd_topology_parse(text, strlen(text), &again, err, sizeof(err)) != SEGD_OK ||
        strcmp(again.topic, t->topic) || again.partitions != t->partitions ||
        again.partitioner != t->partitioner || again.records_format != t->records_format)
        abort();
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    segd_manifest_t m;
    segd_manifest_init(&m);
    if (segd_manifest_parse((const char *)data, size, &m, err, sizeof(err)) == SEGD_OK)
        unit_round_trip(&m);
    segd_manifest_free(&m);
    segd_topology_t t;
    if (segd_topology_parse((const char *)data, size, &t, err, sizeof(err)) == SEGD_OK)
        topology_round_trip(&t);
    return 0;
}
