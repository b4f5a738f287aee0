/* Embedding the edge cache without the writer side: load one snapshot
 * unit's file (an Avro container file of SnapshotRecord or, with
 * snapshot.format = native, SnapshotNativeRecord: DESIGN §6; the file's
 * schema says which) into an edge table and answer a lookup, linking base/,
 * core/, wire/ and
 * cache/edge.c only (no RocksDB, librdkafka, libcurl or jansson).
 *
 *   edge_lookup UNIT_FILE USER_ID [NOW_S]
 * prints the user's live segments, one "id expires_at ts_ms" line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/edge.h"
#include "wire/avro_file.h"
#include "wire/snap_format.h"

typedef struct loader {
    segd_edge_t *edge;
    segd_snapfmt_t format;
} loader_t;

static int load_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    segd_profile_t p;
    segd_profile_init(&p);
    int rc = 0;
    for (int64_t i = 0; i < count && !rc; i++) {
        const char *user;
        size_t ulen;
        rc = segd_snapfmt_decode(l->format, &pos, end, &user, &ulen, &p) ||
             segd_edge_put(l->edge, user, ulen, &p) ? -1 : 0;
    }
    segd_profile_free(&p);
    return rc;
}

static int read_file(const char *path, segd_buf_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t chunk[1 << 16];
    size_t r;
    int rc = 0;
    while (!rc && (r = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = segd_buf_append(out, chunk, r) ? -1 : 0;
    if (ferror(f))
        rc = -1;
    fclose(f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: edge_lookup UNIT_FILE USER_ID [NOW_S]\n");
        return 2;
    }
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = argc > 3 ? atoll(argv[3]) * 1000 : 0;
    segd_edge_t *edge = NULL;
    segd_buf_t file = {0};
    char err[256], *schema = NULL;
    loader_t l = {0};
    int rc = 1;
    if (segd_edge_new(&edge, &o) || read_file(argv[1], &file)) {
        fprintf(stderr, "edge_lookup: cannot read %s\n", argv[1]);
        goto out;
    }
    if (segd_ocf_schema(file.data, file.len, &schema, err, sizeof(err)) ||
        segd_snapfmt_of_schema(schema, &l.format)) {
        fprintf(stderr, "edge_lookup: %s: not a segd snapshot bucket file\n", argv[1]);
        goto out;
    }
    l.edge = edge;
    if (segd_ocf_read(file.data, file.len, load_block, &l, NULL, err, sizeof(err))) {
        fprintf(stderr, "edge_lookup: %s: %s\n", argv[1], err);
        goto out;
    }
    segd_entry_t live[4096];
    size_t n = 0;
    if (segd_edge_lookup(edge, argv[2], strlen(argv[2]), live, 4096, &n)) {
        fprintf(stderr, "edge_lookup: more than 4096 live segments\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        printf("%lld %lld %lld\n", (long long)live[i].segment_id, (long long)live[i].expiry_s,
               (long long)live[i].ts_ms);
    rc = 0;
out:
    free(schema);
    segd_buf_free(&file);
    segd_edge_destroy(edge);
    return rc;
}
