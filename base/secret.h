/* Shared secrets of segd's fronts (the cache's RESP password, its HTTP
 * bearer token): read from a file or an environment variable, never from
 * argv (which `ps` shows to every user), and compared in time that does not
 * depend on where the guess first differs, so a client cannot find the
 * secret byte by byte from answer times. Callers: cli/cmd_cache.c reads,
 * cache/resp_server.c and cache/http.c compare. */
#ifndef SEGD_SECRET_H
#define SEGD_SECRET_H

#include <stddef.h>

#include "base/err.h"

/* Longest secret accepted, as Redis's requirepass has no use for more. */
#define SEGD_SECRET_MAX 4096

/* 1 when guess equals secret. The time taken depends on guess_len only
 * (the client's own input), not on the secret's bytes or length. */
int segd_secret_equal(const void *secret, size_t secret_len, const void *guess,
                      size_t guess_len);

/* The secret of file's first line (one trailing "\n" or "\r\n" dropped, as
 * `echo pw > F` writes it), or of environment variable env when file is
 * NULL. *out is malloc'd; the caller frees it with segd_secret_free. An
 * unreadable file, an empty secret, one above SEGD_SECRET_MAX or with a
 * CR, LF or NUL inside is SEGD_ERR_CONFIG; errstr names what (e.g.
 * "--resp-password-file F") but never the secret. */
segd_err_t segd_secret_read(const char *what, const char *file, const char *env, char **out,
                            char *errstr, size_t errstr_size);

/* Zeroes and frees a secret of segd_secret_read. NULL is a no-op. */
void segd_secret_free(char *secret);

#endif
