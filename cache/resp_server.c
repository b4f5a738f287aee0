/* The RESP front's connection and server commands: PING, ECHO, QUIT,
 * SELECT, AUTH, HELLO, CLIENT and INFO, answered as redis-server
 * REDIS_COMPAT_VERSION answers them so that client libraries connect. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/secret.h"
#include "cache/resp_cmd_int.h"

#define WRONGPASS "WRONGPASS invalid username-password pair or user is disabled."

int segd_resp_cmd_ping(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)w;
    (void)c;
    if (cmd->argc > 2)
        return resp_add_err_raw(out, "ERR wrong number of arguments for 'ping' command");
    return cmd->argc == 2 ? resp_add_bulk(out, cmd->argv[1], cmd->argl[1])
                          : resp_add_str(out, "+PONG\r\n");
}

int segd_resp_cmd_echo(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)w;
    (void)c;
    return resp_add_bulk(out, cmd->argv[1], cmd->argl[1]);
}

int segd_resp_cmd_quit(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)w;
    (void)c;
    (void)cmd;
    return resp_add_str(out, "+OK\r\n") ? RC_NOMEM : RC_QUIT;
}

int segd_resp_cmd_select(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)w;
    (void)c;
    long long db;
    if (resp_arg_ll(cmd, 1, &db) || db < INT32_MIN || db > INT32_MAX)
        return resp_add_err_raw(out, "ERR invalid DB index");
    return db ? resp_add_err_raw(out, "ERR DB index is out of range")
              : resp_add_str(out, "+OK\r\n");
}

/* ACLAuthenticateUser's answer for the one user, "default": any password
 * without requirepass (a nopass user), else the password, compared in
 * constant time. Another user name never matches, as on a server that
 * has no such user. */
static int check_user(const segd_resp_worker_t *w, const segd_resp_cmd_t *cmd, size_t iuser,
                      size_t ipass)
{
    const segd_resp_shared_t *s = w->shared;
    int ok = s->password ? segd_secret_equal(s->password, s->password_len, cmd->argv[ipass],
                                             cmd->argl[ipass])
                         : 1;
    return resp_arg_is(cmd, iuser, "default") && ok;
}

/* AUTH [username] password, as Redis 7.0's authCommand. A failed AUTH
 * leaves an authenticated connection authenticated, as Redis does. */
int segd_resp_cmd_auth(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    if (cmd->argc > 3)
        return resp_add_err_raw(out, "ERR syntax error");
    if (cmd->argc == 2 && !w->shared->password)
        return resp_add_err_raw(out, "ERR AUTH <password> called without any password configured "
                                "for the default user. Are you sure your configuration is "
                                "correct?");
    /* AUTH password is AUTH default password (a password is set here) */
    int ok = cmd->argc == 2 ? segd_secret_equal(w->shared->password, w->shared->password_len,
                                                cmd->argv[1], cmd->argl[1])
                            : check_user(w, cmd, 1, 2);
    if (!ok)
        return resp_add_err_raw(out, WRONGPASS);
    c->authenticated = 1;
    return resp_add_str(out, "+OK\r\n");
}

/* HELLO's options after protover: *auth the index of AUTH's user name (0:
 * none). RC_OK, or the syntax error's reply. */
static int hello_options(const segd_resp_cmd_t *cmd, size_t *auth, segd_buf_t *out)
{
    *auth = 0;
    for (size_t j = 2; j < cmd->argc; j++) {
        size_t more = cmd->argc - 1 - j;
        if (resp_arg_is(cmd, j, "auth") && more >= 2) {
            *auth = j + 1;
            j += 2;
        } else if (resp_arg_is(cmd, j, "setname") && more >= 1) {
            j++;
        } else {
            return add_err(out, "ERR Syntax error in HELLO option '%.*s'", (int)cmd->argl[j],
                           cmd->argv[j]);
        }
    }
    return RC_OK;
}

/* HELLO [protover [AUTH user pass] [SETNAME name]]: RESP2 only, so HELLO 3
 * is -NOPROTO before any AUTH in it is looked at (clients then fall back
 * to RESP2 and AUTH, as they do with a Redis older than 6). Authentication
 * as Redis 7.0's helloCommand: an unauthenticated connection must carry
 * AUTH, and a wrong one is -WRONGPASS. */
int segd_resp_cmd_hello(segd_resp_worker_t *w, segd_resp_client_t *c,
                        const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    if (cmd->argc >= 2) {
        long long ver;
        if (resp_arg_ll(cmd, 1, &ver))
            return resp_add_err_raw(out, "ERR Protocol version is not an integer or out of range");
        if (ver != 2)
            return resp_add_err_raw(out, "NOPROTO unsupported protocol version");
    }
    size_t auth;
    int rc = hello_options(cmd, &auth, out);
    if (rc != RC_OK)
        return rc;
    if (!auth && !segd_resp_authenticated(w, c))
        return resp_add_err_raw(out, "NOAUTH HELLO must be called with the client already "
                                "authenticated, otherwise the HELLO AUTH <user> "
                                "<pass> option can be used to authenticate the client and "
                                "select the RESP protocol version at the same time");
    if (auth && !check_user(w, cmd, auth, auth + 1))
        return resp_add_err_raw(out, WRONGPASS);
    if (auth)
        c->authenticated = 1;
    if (resp_add_array(out, 14) || resp_add_bulk_str(out, "server") ||
        resp_add_bulk_str(out, "segd") || resp_add_bulk_str(out, "version") ||
        resp_add_bulk_str(out, REDIS_COMPAT_VERSION) ||
        resp_add_bulk_str(out, "proto") || resp_add_int(out, 2) || resp_add_bulk_str(out, "id") ||
        resp_add_int(out, (int64_t)c->id) || resp_add_bulk_str(out, "mode") ||
        resp_add_bulk_str(out, "standalone") || resp_add_bulk_str(out, "role") ||
        resp_add_bulk_str(out, "replica") || resp_add_bulk_str(out, "modules") ||
        resp_add_array(out, 0))
        return RC_NOMEM;
    return RC_OK;
}

int segd_resp_cmd_client(segd_resp_worker_t *w, segd_resp_client_t *c,
                         const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)w;
    if (resp_arg_is(cmd, 1, "id") && cmd->argc == 2)
        return resp_add_int(out, (int64_t)c->id);
    if (resp_arg_is(cmd, 1, "getname") && cmd->argc == 2)
        return resp_add_nil(out);
    if (resp_arg_is(cmd, 1, "setname") && cmd->argc == 3)
        return resp_add_str(out, "+OK\r\n");
    if (resp_arg_is(cmd, 1, "setinfo") && cmd->argc == 4)
        return resp_add_str(out, "+OK\r\n");
    if (resp_arg_is(cmd, 1, "id") || resp_arg_is(cmd, 1, "getname") ||
        resp_arg_is(cmd, 1, "setname") || resp_arg_is(cmd, 1, "setinfo"))
        return add_err(out, "ERR wrong number of arguments for 'client|%.*s' command",
                       (int)cmd->argl[1], cmd->argv[1]);
    return add_err(out, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
                   (int)(cmd->argl[1] < 128 ? cmd->argl[1] : 128), cmd->argv[1]);
}

int segd_resp_cmd_info(segd_resp_worker_t *w, segd_resp_client_t *c,
                       const segd_resp_cmd_t *cmd, segd_buf_t *out)
{
    (void)c;
    (void)cmd;
    segd_resp_shared_t *s = w->shared;
    segd_edge_stats_t st;
    segd_edge_get_stats(s->edge, &st);
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "# Server\r\nredis_version:%s\r\nserver_name:segd\r\nredis_mode:standalone\r\n"
                     "process_id:%ld\r\ntcp_port:%d\r\nuptime_in_seconds:%lld\r\n\r\n"
                     "# Clients\r\nconnected_clients:%lld\r\n\r\n"
                     "# Persistence\r\nloading:%d\r\n\r\n"
                     "# Keyspace\r\ndb0:keys=%llu,expires=0,avg_ttl=0\r\n",
                     REDIS_COMPAT_VERSION, (long)getpid(), s->port,
                     (long long)((segd_wall_ms() - s->started_ms) / 1000),
                     (long long)atomic_load(&s->connections), !atomic_load(&s->serving),
                     (unsigned long long)st.users);
    return resp_add_bulk(out, text, (size_t)n);
}
