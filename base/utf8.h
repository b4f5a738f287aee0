/* Strict UTF-8 validation (RFC 3629): Avro strings must be UTF-8, so every
 * user id is checked where it enters (event validation) and where a snapshot
 * is read back. No overlong forms, no surrogates (U+D800..U+DFFF), nothing
 * above U+10FFFF. NUL is valid UTF-8; callers that refuse it check it. */
#ifndef SEGD_UTF8_H
#define SEGD_UTF8_H

#include <stddef.h>

/* 1 when s[0..len) is well-formed UTF-8, else 0. */
int segd_utf8_valid(const void *s, size_t len);

#endif
