/* libFuzzer target: the Redis-protocol front's parser and commands
 * (cache/resp_parse.h, cache/resp_cmd.h) as a connection drives them: every
 * command parsed from the input is executed against a small edge cache
 * (users "u1" with 30 segments, "u2" with one, some expired) and its reply
 * appended, until the bytes end inside a command or break the protocol. The
 * first byte picks whether the cache serves yet. Checks: a parsed command
 * consumes bytes within the input and its arguments lie inside them; a
 * reply is never empty and starts with a RESP type byte. */
#include <stdlib.h>
#include <string.h>

#include "cache/resp_cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW_S 1800000000LL

static segd_edge_t *make_edge(void)
{
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = NOW_S * 1000;
    o.shards = 1;
    segd_edge_t *e = NULL;
    if (segd_edge_new(&e, &o))
        abort();
    segd_profile_t p;
    segd_profile_init(&p);
    for (int64_t i = 0; i < 30; i++) {
        /* expiries repeat and some lie in the past: order by (score, member) */
        segd_entry_t en = {.segment_id = i * 7 + (i % 3) * 1000, .ts_ms = NOW_S * 1000 - 5000,
                           .expiry_s = NOW_S + (i % 4 - 1) * 3600};
        segd_profile_push(&p, &en);
    }
    segd_profile_normalize(&p);
    if (segd_edge_put(e, "u1", 2, &p))
        abort();
    segd_profile_clear(&p);
    segd_entry_t one = {.segment_id = 9, .ts_ms = NOW_S * 1000, .expiry_s = NOW_S + 60};
    segd_profile_push(&p, &one);
    if (segd_edge_put(e, "u2", 2, &p))
        abort();
    segd_profile_free(&p);
    return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    segd_resp_shared_t shared;
    memset(&shared, 0, sizeof(shared));
    shared.edge = make_edge();
    atomic_store(&shared.serving, data[0] & 1);
    segd_resp_worker_t w;
    if (segd_resp_worker_init(&w, &shared))
        abort();
    segd_resp_cmd_t *cmd = malloc(sizeof(*cmd));
    segd_resp_client_t client = {.id = 1};
    segd_buf_t out = {0};
    const char *buf = (const char *)data + 1;
    size_t len = size - 1, pos = 0;
    for (int quit = 0; !quit && cmd;) {
        size_t used = 0;
        char err[128];
        segd_resp_parse_rc_t rc =
            segd_resp_parse(buf + pos, len - pos, !segd_resp_authenticated(&w, &client), cmd,
                            &used, err, sizeof(err));
        if (rc == SEGD_RESP_MORE)
            break;
        if (rc == SEGD_RESP_PROTO) {
            if (segd_resp_error(&out, err) || strncmp((char *)out.data, "-ERR Protocol", 13))
                abort();
            break;
        }
        if (used == 0 || used > len - pos)
            abort();
        for (size_t i = 0; i < cmd->argc; i++)
            if (cmd->argv[i] < buf + pos || cmd->argv[i] + cmd->argl[i] > buf + pos + used)
                abort();
        size_t before = out.len;
        int r = segd_resp_exec(&w, &client, cmd, &out);
        if (r < 0)
            abort(); /* no allocation fails at these sizes */
        if (cmd->argc && (out.len == before || !strchr("+-:$*", out.data[before])))
            abort();
        quit = r == 1;
        pos += used;
        out.len = 0; /* a connection sends it */
    }
    free(cmd);
    segd_buf_free(&out);
    segd_resp_worker_free(&w);
    segd_edge_destroy(shared.edge);
    return 0;
}
