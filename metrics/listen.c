/* Listen-address parsing; see listen.h. */
#define _GNU_SOURCE
#include "metrics/listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* A host name's first IPv4 address (localhost, a container's name). */
static int resolve(const char *host, struct sockaddr_in *a4)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) || !res)
        return 0;
    a4->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 1;
}

static int parse_v6(char *host, size_t hlen, long port, struct sockaddr_storage *sa,
                    socklen_t *len)
{
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
    host[hlen - 1] = 0;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    *len = sizeof(*a6);
    return inet_pton(AF_INET6, host + 1, &a6->sin6_addr) == 1;
}

static int parse_v4(const char *host, size_t hlen, long port, struct sockaddr_storage *sa,
                    socklen_t *len)
{
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *len = sizeof(*a4);
    return inet_pton(AF_INET, hlen ? host : "0.0.0.0", &a4->sin_addr) == 1 || resolve(host, a4);
}

segd_err_t segd_listen_parse(const char *what, const char *listen, struct sockaddr_storage *sa,
                             socklen_t *len, char *errstr, size_t n)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    size_t hlen = colon ? (size_t)(colon - listen) : 0;
    if (!colon || hlen >= sizeof(host) || !colon[1] || !end || *end || port < 0 ||
        port > 65535)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "%s '%s': want HOST:PORT", what, listen);
    memcpy(host, listen, hlen);
    host[hlen] = 0;
    memset(sa, 0, sizeof(*sa));
    int ok = hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']'
                 ? parse_v6(host, hlen, port, sa, len)
                 : parse_v4(host, hlen, port, sa, len);
    if (ok)
        return SEGD_OK;
    return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                     "%s '%s': not an IPv4 address, [IPv6] address or host name with an IPv4 "
                     "address", what, listen);
}

int segd_listen_port(const struct sockaddr_storage *sa)
{
    return ntohs(sa->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                           : ((const struct sockaddr_in *)sa)->sin_port);
}

int segd_listen_is_loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) /* ::ffff:127.x.y.z */
            return a->s6_addr[12] == 127;
        return IN6_IS_ADDR_LOOPBACK(a);
    }
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
}
