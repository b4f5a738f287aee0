/* FNV-1a, 64- and 32-bit: the one copy segd's hashes share (the JSON
 * parser's duplicate-key index, the static member id's topic digest, the
 * fnv1a_random partitioner). Inline: the JSON parser hashes every key of
 * every object it reads. The outputs are fixed by what depends on them (a
 * member id a broker remembers, librdkafka's partitioner), so these must
 * stay the textbook FNV-1a; tests/unit/base/test_hash.c holds the known vectors. */
#ifndef SEGD_HASH_H
#define SEGD_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SEGD_FNV64_OFFSET 0xcbf29ce484222325ULL
#define SEGD_FNV64_PRIME 0x100000001b3ULL
#define SEGD_FNV32_OFFSET 0x811c9dc5u
#define SEGD_FNV32_PRIME 0x01000193u

/* Continues a 64-bit FNV-1a hash h over n bytes at p: start from
 * SEGD_FNV64_OFFSET to hash several pieces as one. */
static inline uint64_t segd_fnv1a64_more(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * SEGD_FNV64_PRIME;
    return h;
}

/* The 64-bit FNV-1a hash of n bytes at p. */
static inline uint64_t segd_fnv1a64(const void *p, size_t n)
{
    return segd_fnv1a64_more(SEGD_FNV64_OFFSET, p, n);
}

/* The 32-bit FNV-1a hash of n bytes at p. */
static inline uint32_t segd_fnv1a32(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t h = SEGD_FNV32_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= SEGD_FNV32_PRIME;
    }
    return h;
}

#endif
