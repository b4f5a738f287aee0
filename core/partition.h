/* Which input partition a user belongs to: the producer's key partitioner,
 * reimplemented bit for bit so that segd can route snapshot units, change
 * events and reads the way producers routed the events (docs/design.md §7).
 * Pure functions; no librdkafka (the edge cache embeds core/). */
#ifndef SEGD_PARTITION_H
#define SEGD_PARTITION_H

#include <stddef.h>
#include <stdint.h>

typedef enum segd_partitioner {
    SEGD_PARTITIONER_MURMUR2 = 0, /* "murmur2_random": Java/Confluent clients' default */
    SEGD_PARTITIONER_CRC32,       /* "consistent_random": librdkafka's default */
    SEGD_PARTITIONER_FNV1A,       /* "fnv1a_random" */
} segd_partitioner_t;

/* Parses a librdkafka partitioner name; -1 if it is not one segd can
 * reproduce (random and the NULL-key variants route no key). */
int segd_partitioner_parse(const char *name, segd_partitioner_t *out);
const char *segd_partitioner_name(segd_partitioner_t p);

/* Kafka's Utils.murmur2 (seed 0x9747b28c), as a signed 32-bit value would be
 * read: the Java client's partition is (murmur2 & 0x7fffffff) % partitions. */
uint32_t segd_murmur2(const void *key, size_t len);

/* The partition of a non-empty key among `partitions` (> 0), exactly as
 * librdkafka's rd_kafka_msg_partitioner_<name> and the Java client compute
 * it. An empty key (producers route it at random) maps as the hash of no
 * bytes: segd never sees one, since user ids are non-empty. */
int32_t segd_partition_of(segd_partitioner_t p, const void *key, size_t len,
                          int32_t partitions);

#endif
