/* Whether any broker answers: a metadata request for no topic, made by a
 * short-lived client of its own, and the cause librdkafka gave when none
 * answered ("Connection refused", "Name or service not known"). segd run asks
 * once at start, before the checks that wait for topics, so that unreachable
 * brokers are said within seconds and not after those waits (issue 30). */
#ifndef SEGD_KPROBE_H
#define SEGD_KPROBE_H

#include <stddef.h>

#include "base/err.h"

/* SEGD_OK when a broker of `brokers` answered within timeout_ms. Otherwise
 * SEGD_ERR_KAFKA with errstr "no broker answers at BROKERS (CAUSE)", or
 * SEGD_ERR_CONFIG when props do not apply. props is a NULL-terminated list of
 * key, value pairs (the connection settings: security.protocol, sasl.*, ssl.*)
 * and may be NULL; everything is borrowed. Blocks for about timeout_ms at
 * most; the client logs nothing. */
segd_err_t segd_kprobe_brokers(const char *brokers, const char *const *props, int timeout_ms,
                               char *errstr, size_t errstr_size);

/* librdkafka's reason for a failed connection without the broker's name and
 * the "(after N ms in state S...)" tail: the words after the last ": ".
 * "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection
 * refused (after 0ms in state CONNECT)" gives "Connection refused". Writes at
 * most size bytes, NUL-terminated, to out. */
void segd_kprobe_cause(const char *reason, char *out, size_t size);

#endif
