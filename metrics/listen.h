/* Listen addresses of segd's servers ("HOST:PORT"): one parser for the
 * metrics server (metrics.listen), the cache's HTTP API (--listen) and its
 * RESP front (--resp), so the three accept the same forms and say the same
 * things about bad ones. */
#ifndef SEGD_LISTEN_H
#define SEGD_LISTEN_H

#include <sys/socket.h>

#include "base/err.h"

/* Parses listen into sa and *len. The accepted forms are "1.2.3.4:9464",
 * ":9464" for every IPv4 interface, "localhost:9464" for a host name's
 * first IPv4 address, and "[::1]:9464"; port 0 takes any free port. A
 * malformed address is SEGD_ERR_CONFIG, and errstr names the option
 * (what, e.g. "--listen") and the text given. */
segd_err_t segd_listen_parse(const char *what, const char *listen, struct sockaddr_storage *sa,
                             socklen_t *len, char *errstr, size_t errstr_size);
/* 1 when sa is a loopback address (127.0.0.0/8, ::1): only this host's
 * processes can reach it. ":PORT" (every interface) is not. */
int segd_listen_is_loopback(const struct sockaddr_storage *sa);
/* The port of sa (either family). */
int segd_listen_port(const struct sockaddr_storage *sa);

#endif
