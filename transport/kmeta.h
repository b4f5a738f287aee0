/* Topic and group metadata from the brokers: how many partitions a topic
 * has, and which member of a consumer group holds each. The ingest pipeline
 * (misrouted events), the change publisher (partition-aligned change topic)
 * and `segd owner` ask; one place knows how librdkafka answers an unknown
 * topic, a topic still being created and a group it cannot describe. */
#ifndef SEGD_KMETA_H
#define SEGD_KMETA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Sets *count to the topic's partition count. SEGD_ERR_NOTFOUND means the
 * brokers do not know the topic; a producer's request may have started its
 * auto-creation, so asking again can succeed. Any other failure is
 * SEGD_ERR_KAFKA. rk is borrowed and may be any client type. Blocks for at
 * most timeout_ms. */
segd_err_t segd_kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms,
                                 int32_t *count, char *errstr, size_t errstr_size);

/* As segd_kmeta_partitions, asking again every 200 ms while the topic is
 * unknown or has no partitions yet, until wait_ms passed: a topic being
 * auto-created answers "unknown" first. */
segd_err_t segd_kmeta_partitions_wait(rd_kafka_t *rk, const char *topic, int wait_ms,
                                      int32_t *count, char *errstr, size_t errstr_size);

/* Sets *written when some partition of `topic` ever held a message (its high
 * watermark is above 0), whoever consumes it: a topic of which this member
 * holds only empty partitions, or which retention emptied, has been written
 * all the same. Asks the brokers for the partition count, then each
 * partition's watermarks, and stops at the first partition written or the
 * first failure (SEGD_ERR_KAFKA or SEGD_ERR_NOTFOUND, *written 0). The
 * watermarks share one deadline, timeout_ms after the call began: a topic's
 * many partitions do not each get their own. */
segd_err_t segd_kmeta_topic_written(rd_kafka_t *rk, const char *topic, int timeout_ms,
                                    int *written, char *errstr, size_t errstr_size);

/* Finds the member of `group` that holds each partition of `topic` now,
 * from the group's description (its members' assignments). owners[p], for
 * p < partitions, is set to "<client id> host=<client host>", or left empty
 * when no member holds p. The member id stands in when the client gave no
 * client id, and the host loses the coordinator's leading '/'. A broker that
 * cannot describe groups (librdkafka's mock cluster has no DescribeGroups),
 * a group that is not Stable (rebalancing) and an unknown group are each
 * SEGD_ERR_KAFKA, with errstr saying which. Blocks for at most timeout_ms. */
#define SEGD_KMETA_OWNER_LEN 320
segd_err_t segd_kmeta_group_owners(rd_kafka_t *rk, const char *group, const char *topic,
                                   int32_t partitions, char (*owners)[SEGD_KMETA_OWNER_LEN],
                                   int timeout_ms, char *errstr, size_t errstr_size);

#endif
