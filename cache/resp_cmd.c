/* The Redis-protocol front's command table and dispatch (cache/resp_cmd.h):
 * which commands exist with Redis's arities, flags and metrics labels, the
 * COMMAND introspection built from that table, the answers to writes and
 * unknown commands, and a worker's state. The commands themselves are in
 * resp_zset.c and resp_server.c. */
#include "cache/resp_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache/resp_cmd_int.h"

segd_err_t segd_resp_error(segd_buf_t *out, const char *msg)
{
    char text[512];
    snprintf(text, sizeof(text), "ERR %s", msg);
    return resp_add_err_raw(out, text) == RC_NOMEM ? SEGD_ERR_NOMEM : SEGD_OK;
}

typedef struct cmd_def {
    const char *name; /* lowercase, as Redis names it in errors */
    int arity;        /* Redis's: n exact, -n at least n */
    int data;         /* reads the cache: -LOADING until it serves */
    int no_auth;      /* runs before authentication (Redis's no_auth flag) */
    handler_t fn;
    const char *flags; /* COMMAND's flags and ACL categories, blank-separated */
    const char *acl;
    int first_key, last_key, step;
} cmd_def_t;

static int cmd_command(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                       segd_buf_t *out);

/* Every command this front runs; the first ones are the hot ones. */
static const cmd_def_t commands[] = {
    {"zrangebyscore", -4, 1, 0, segd_resp_cmd_zrangebyscore,
     "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zrange", -4, 1, 0, segd_resp_cmd_zrange, "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zrevrangebyscore", -4, 1, 0, segd_resp_cmd_zrevrangebyscore,
     "readonly", "@read @sortedset @slow", 1, 1,
     1},
    {"zrevrange", -4, 1, 0, segd_resp_cmd_zrevrange, "readonly", "@read @sortedset @slow", 1, 1, 1},
    {"zcount", 4, 1, 0, segd_resp_cmd_zcount, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"zscore", 3, 1, 0, segd_resp_cmd_zscore, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"zcard", 2, 1, 0, segd_resp_cmd_zcard, "readonly fast", "@read @sortedset @fast", 1, 1, 1},
    {"exists", -2, 1, 0, segd_resp_cmd_exists, "readonly fast", "@keyspace @read @fast", 1, -1, 1},
    {"ping", -1, 1, 0, segd_resp_cmd_ping, "fast", "@fast @connection", 0, 0, 0},
    {"echo", 2, 0, 0, segd_resp_cmd_echo, "fast", "@fast @connection", 0, 0, 0},
    {"hello", -1, 0, 1, segd_resp_cmd_hello,
     "noscript loading stale fast no_auth", "@fast @connection", 0,
     0, 0},
    {"command", -1, 0, 0, cmd_command, "loading stale", "@slow @connection", 0, 0, 0},
    {"client", -2, 0, 0, segd_resp_cmd_client, "loading stale", "@slow @connection", 0, 0, 0},
    {"select", 2, 0, 0, segd_resp_cmd_select, "loading stale fast", "@keyspace @fast", 0, 0, 0},
    {"info", -1, 0, 0, segd_resp_cmd_info, "loading stale", "@slow @dangerous", 0, 0, 0},
    {"auth", -2, 0, 1, segd_resp_cmd_auth,
     "noscript loading stale fast no_auth allow_busy", "@fast @connection", 0, 0, 0},
    {"quit", -1, 0, 1, segd_resp_cmd_quit, "loading stale fast no_auth", "@fast @connection", 0, 0, 0},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))
#define LABEL_WRITE NCOMMANDS
#define LABEL_UNKNOWN (NCOMMANDS + 1)

/* Redis's write commands, and those that change a connection in ways a
 * read-only cache has no use for: "-ERR read-only replica". */
static const char *const writes[] = {
    "set", "setnx", "setex", "psetex", "mset", "msetnx", "getset", "getdel", "getex", "append",
    "setrange", "incr", "decr", "incrby", "decrby", "incrbyfloat", "del", "unlink", "expire",
    "pexpire", "expireat", "pexpireat", "persist", "rename", "renamenx", "move", "copy",
    "restore", "flushall", "flushdb", "swapdb", "zadd", "zincrby", "zrem", "zremrangebyscore",
    "zremrangebyrank", "zremrangebylex", "zpopmin", "zpopmax", "bzpopmin", "bzpopmax",
    "zmpop", "bzmpop", "zunionstore", "zinterstore", "zdiffstore", "zrangestore", "hset",
    "hsetnx", "hmset", "hdel", "hincrby", "hincrbyfloat", "lpush", "rpush", "lpushx", "rpushx",
    "lpop", "rpop", "lset", "linsert", "lrem", "ltrim", "lmove", "blmove", "rpoplpush",
    "brpoplpush", "blpop", "brpop", "lmpop", "blmpop", "sadd", "srem", "spop", "smove",
    "sunionstore", "sinterstore", "sdiffstore", "pfadd", "pfmerge", "setbit", "bitop",
    "bitfield", "xadd", "xdel", "xtrim", "geoadd", "sort", "eval", "evalsha", "fcall",
    "publish", "multi", "exec", "discard", "watch",
};

size_t segd_resp_command_count(void) { return NCOMMANDS + 2; }

const char *segd_resp_command_name(size_t i)
{
    if (i < NCOMMANDS)
        return commands[i].name;
    return i == LABEL_WRITE ? "write" : i == LABEL_UNKNOWN ? "unknown" : NULL;
}

static int add_words(segd_buf_t *out, const char *words, char type)
{
    size_t n = 0;
    for (const char *p = words; *p;) {
        size_t l = strcspn(p, " ");
        n += l > 0;
        p += l + (p[l] == ' ');
    }
    if (resp_add_array(out, (int64_t)n))
        return RC_NOMEM;
    for (const char *p = words; *p;) {
        size_t l = strcspn(p, " ");
        if (l && ((type == '+' &&
                   (resp_add(out, "+", 1) || resp_add(out, p, l) || resp_add(out, "\r\n", 2))) ||
                  (type == '$' && resp_add_bulk(out, p, l))))
            return RC_NOMEM;
        p += l + (p[l] == ' ');
    }
    return RC_OK;
}

/* One command as Redis 7's COMMAND INFO shows it in RESP2. */
static int add_command_info(segd_buf_t *out, const cmd_def_t *d)
{
    if (resp_add_array(out, 10) || resp_add_bulk_str(out, d->name) || resp_add_int(out, d->arity) ||
        add_words(out, d->flags, '+') || resp_add_int(out, d->first_key) ||
        resp_add_int(out, d->last_key) || resp_add_int(out, d->step) ||
        add_words(out, d->acl, '+') || resp_add_array(out, 0) || resp_add_array(out, 0) ||
        resp_add_array(out, 0))
        return RC_NOMEM;
    return RC_OK;
}

static const cmd_def_t *find_command(const char *name, size_t n)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strlen(commands[i].name) == n && !strncasecmp(commands[i].name, name, n))
            return &commands[i];
    return NULL;
}

/* COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS (no docs: an
 * empty map, which redis-cli takes as "no help from the server"). */
static int cmd_command(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                       segd_buf_t *out)
{
    (void)w;
    (void)c;
    if (cmd->argc == 1 || (cmd->argc == 2 && resp_arg_is(cmd, 1, "list"))) {
        int list = cmd->argc == 2;
        if (resp_add_array(out, (int64_t)NCOMMANDS))
            return RC_NOMEM;
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (list ? resp_add_bulk_str(out, commands[i].name)
                     : add_command_info(out, &commands[i]))
                return RC_NOMEM;
        return RC_OK;
    }
    if (resp_arg_is(cmd, 1, "count") && cmd->argc == 2)
        return resp_add_int(out, (int64_t)NCOMMANDS);
    if (resp_arg_is(cmd, 1, "docs"))
        return resp_add_array(out, 0);
    if (resp_arg_is(cmd, 1, "info")) {
        if (resp_add_array(out, (int64_t)cmd->argc - 2))
            return RC_NOMEM;
        for (size_t i = 2; i < cmd->argc; i++) {
            const cmd_def_t *d = find_command(cmd->argv[i], cmd->argl[i]);
            if (d ? add_command_info(out, d) : resp_add(out, "*-1\r\n", 5))
                return RC_NOMEM;
        }
        return RC_OK;
    }
    return add_err(out, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
                   (int)(cmd->argl[1] < 128 ? cmd->argl[1] : 128), cmd->argv[1]);
}

/* ---- dispatch ------------------------------------------------------------ */

static int is_write(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++)
        if (strlen(writes[i]) == n && !strncasecmp(writes[i], name, n))
            return 1;
    return 0;
}

/* Redis's text: the name and the first arguments, quoted, 128 bytes each. */
static int unknown(const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    char args[300] = "";
    size_t len = 0;
    for (size_t i = 1; i < cmd->argc && len < 128; i++) {
        int k = snprintf(args + len, sizeof(args) - len, "'%.*s' ",
                         (int)(cmd->argl[i] < 128 - len ? cmd->argl[i] : 128 - len),
                         cmd->argv[i]);
        if (k < 0)
            break;
        len += (size_t)k < sizeof(args) - len ? (size_t)k : sizeof(args) - len - 1;
    }
    return add_err(out, "ERR unknown command '%.*s', with args beginning with: %s",
                   (int)(cmd->argl[0] < 128 ? cmd->argl[0] : 128), cmd->argv[0], args);
}

static int arity_ok(const cmd_def_t *d, size_t argc)
{
    return d->arity >= 0 ? argc == (size_t)d->arity : argc >= (size_t)-d->arity;
}

static void count(segd_resp_worker_t *w, size_t label, int rc)
{
    atomic_fetch_add_explicit(&w->counts[label][rc == RC_ERR], 1, memory_order_relaxed);
}

int segd_resp_exec(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                   segd_buf_t *out)
{
    if (cmd->argc == 0)
        return 0;
    const cmd_def_t *d = find_command(cmd->argv[0], cmd->argl[0]);
    int rc;
    size_t label = d ? (size_t)(d - commands) : LABEL_UNKNOWN;
    if (!d && is_write(cmd->argv[0], cmd->argl[0])) {
        /* Redis knows the write commands: before AUTH they are refused as
         * any other, saying nothing about what this server is */
        label = LABEL_WRITE;
        rc = resp_add_err_raw(out, segd_resp_authenticated(w, c) ? "ERR read-only replica"
                                                             : "NOAUTH Authentication required.");
    } else if (!d) {
        rc = unknown(cmd, out);
    } else if (!arity_ok(d, cmd->argc)) {
        rc = add_err(out, "ERR wrong number of arguments for '%s' command", d->name);
    } else if (!d->no_auth && !segd_resp_authenticated(w, c)) {
        rc = resp_add_err_raw(out, "NOAUTH Authentication required.");
    } else if (d->data && !atomic_load_explicit(&w->shared->serving, memory_order_acquire)) {
        rc = resp_add_err_raw(out, "LOADING segd is loading the snapshot in memory");
    } else {
        rc = d->fn(w, c, cmd, out);
    }
    if (rc == RC_NOMEM)
        return SEGD_ERR_NOMEM;
    count(w, label, rc);
    return rc == RC_QUIT;
}

segd_err_t segd_resp_worker_init(segd_resp_worker_t *w, segd_resp_shared_t *shared)
{
    memset(w, 0, sizeof(*w));
    w->shared = shared;
    w->counts = calloc(NCOMMANDS + 2, sizeof(*w->counts));
    if (!w->counts || segd_reply_cache_new(&w->replies, shared->reply_cache_bytes)) {
        free((void *)w->counts);
        w->counts = NULL;
        return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

void segd_resp_worker_free(segd_resp_worker_t *w)
{
    if (!w)
        return;
    free(w->ents);
    segd_resp_order_free(&w->sort);
    segd_reply_cache_free(w->replies);
    free((void *)w->counts);
    memset(w, 0, sizeof(*w));
}
