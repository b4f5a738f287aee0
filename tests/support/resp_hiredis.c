/* A hiredis client for tests/cli/resp_cli.sh: reads commands from stdin, one a
 * line, words split on blanks; sends them all pipelined (redisAppendCommandArgv)
 * and prints every reply in order, one line each, in a canonical form, so
 * that the answers of segd cache --resp and of a redis-server can be
 * compared through the client library bidders use.
 * usage: resp_hiredis HOST PORT < commands */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_reply(const redisReply *r)
{
    switch (r->type) {
    case REDIS_REPLY_STRING: printf("\"%.*s\"", (int)r->len, r->str); break;
    case REDIS_REPLY_STATUS: printf("+%.*s", (int)r->len, r->str); break;
    case REDIS_REPLY_ERROR: printf("-%.*s", (int)r->len, r->str); break;
    case REDIS_REPLY_INTEGER: printf(":%lld", r->integer); break;
    case REDIS_REPLY_NIL: printf("nil"); break;
    case REDIS_REPLY_ARRAY:
        printf("[");
        for (size_t i = 0; i < r->elements; i++) {
            if (i)
                printf(",");
            print_reply(r->element[i]);
        }
        printf("]");
        break;
    default: printf("?%d", r->type);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: resp_hiredis HOST PORT < commands\n");
        return 2;
    }
    redisContext *c = redisConnect(argv[1], atoi(argv[2]));
    if (!c || c->err) {
        fprintf(stderr, "resp_hiredis: connect: %s\n", c ? c->errstr : "no memory");
        return 1;
    }
    char line[4096];
    size_t sent = 0;
    while (fgets(line, sizeof(line), stdin)) {
        const char *av[64];
        size_t al[64];
        int n = 0;
        for (char *tok = strtok(line, " \t\r\n"); tok && n < 64; tok = strtok(NULL, " \t\r\n")) {
            av[n] = tok;
            al[n++] = strlen(tok);
        }
        if (n && redisAppendCommandArgv(c, n, av, al) == REDIS_OK)
            sent++;
    }
    int rc = 0;
    for (size_t i = 0; i < sent; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            fprintf(stderr, "resp_hiredis: reply %zu: %s\n", i, c->errstr);
            rc = 1;
            break;
        }
        print_reply(r);
        printf("\n");
        freeReplyObject(r);
    }
    redisFree(c);
    return rc;
}
