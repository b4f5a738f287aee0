/* Producer partitioners (core/partition.h). */
#include "core/partition.h"

#include <string.h>
#include <zlib.h>

#include "base/hash.h"

static const struct {
    const char *name;
    segd_partitioner_t p;
} names[] = {
    {"murmur2_random", SEGD_PARTITIONER_MURMUR2},
    {"murmur2", SEGD_PARTITIONER_MURMUR2},
    {"consistent_random", SEGD_PARTITIONER_CRC32},
    {"consistent", SEGD_PARTITIONER_CRC32},
    {"fnv1a_random", SEGD_PARTITIONER_FNV1A},
    {"fnv1a", SEGD_PARTITIONER_FNV1A},
};

int segd_partitioner_parse(const char *name, segd_partitioner_t *out)
{
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].p;
            return 0;
        }
    return -1;
}

const char *segd_partitioner_name(segd_partitioner_t p)
{
    switch (p) {
    case SEGD_PARTITIONER_MURMUR2:
        return "murmur2_random";
    case SEGD_PARTITIONER_CRC32:
        return "consistent_random";
    case SEGD_PARTITIONER_FNV1A:
        return "fnv1a_random";
    }
    return "?";
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t segd_murmur2(const void *key, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    const uint8_t *d = key;
    uint32_t h = 0x9747b28c ^ (uint32_t)len;
    size_t n4 = len / 4;
    for (size_t i = 0; i < n4; i++) {
        uint32_t k = le32(d + 4 * i);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *t = d + 4 * n4;
    switch (len & 3) { /* the tail, as Kafka's Java code reads it */
    case 3:
        h ^= (uint32_t)t[2] << 16;
        /* fallthrough */
    case 2:
        h ^= (uint32_t)t[1] << 8;
        /* fallthrough */
    case 1:
        h ^= t[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* FNV-1a 32 with librdkafka's (and Sarama's NewHashPartitioner's) twist:
 * the absolute value of the hash read as a signed 32-bit integer. */
static uint32_t fnv1a_abs(const void *d, size_t len)
{
    uint32_t h = segd_fnv1a32(d, len);
    return h & 0x80000000u ? (uint32_t)(-(int64_t)(int32_t)h) : h;
}

int32_t segd_partition_of(segd_partitioner_t p, const void *key, size_t len,
                          int32_t partitions)
{
    if (partitions <= 0)
        return 0;
    uint32_t h;
    switch (p) {
    case SEGD_PARTITIONER_CRC32:
        h = (uint32_t)crc32(crc32(0, NULL, 0), key, (uInt)len);
        break;
    case SEGD_PARTITIONER_FNV1A:
        h = fnv1a_abs(key, len);
        break;
    default:
        h = segd_murmur2(key, len) & 0x7fffffff;
        break;
    }
    return (int32_t)(h % (uint32_t)partitions);
}
