/* The group.instance.id a `segd run` joins its group with (static
 * membership, KIP-345; DESIGN §4 `instance_id`, §7.2): its store's instance
 * id and a digest of its input topics. The pipeline calls it once, when it
 * makes its consumer; an operator's explicit group.instance.id is used as
 * given instead. Pure: no I/O, no state. */
#ifndef SEGD_STATIC_MEMBER_H
#define SEGD_STATIC_MEMBER_H

#include <stddef.h>

#include "base/err.h"

/* Writes "<store_id>-t<16 hex digits>" to out: the digits are a 64-bit
 * FNV-1a digest of the topic names, sorted (a subscription is a set, so
 * the order they are given in does not matter). The same store and topics
 * give the same id on every start; other topics give another. Fails
 * (SEGD_ERR_INVALID) when there are no topics, more than 64, or the id
 * does not fit in size bytes. topics are borrowed for the call. */
segd_err_t segd_static_member_id(const char *store_id, char *const *topics, size_t n_topics,
                                 char *out, size_t size, char *errstr, size_t errstr_size);

#endif
