/* A segd run's group.instance.id; see static_member.h.
 *
 * Why the topics are in it: Apache Kafka's classic group coordinator hands
 * a static member that rejoins a Stable group its previous assignment back
 * at once, without a rebalance, as long as the group's selected assignor
 * does not change; it stores the member's new subscription but does not
 * assign again. librdkafka 2.0.2 takes such an assignment as it is, even
 * for topics it no longer subscribes to. So a member restarted with other
 * topics under the same id kept the old topics' partitions and never read
 * the new ones. With the topics in the id, a restart with other topics is
 * a new member: the group rebalances once the old one's session times
 * out, and its assignment follows the new subscription. */
#include "consumer/static_member.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/hash.h"

#define MAX_TOPICS 64

static void sort_names(const char **v, size_t n)
{
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful of topics */
        for (size_t j = i; j > 0 && strcmp(v[j - 1], v[j]) > 0; j--) {
            const char *t = v[j - 1];
            v[j - 1] = v[j];
            v[j] = t;
        }
}

segd_err_t segd_static_member_id(const char *store_id, char *const *topics, size_t n_topics,
                                 char *out, size_t size, char *errstr, size_t errstr_size)
{
    if (n_topics == 0 || n_topics > MAX_TOPICS)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "static member id: %zu input topics (1 to %d)", n_topics, MAX_TOPICS);
    const char *sorted[MAX_TOPICS];
    for (size_t i = 0; i < n_topics; i++)
        sorted[i] = topics[i];
    sort_names(sorted, n_topics);
    uint64_t h = SEGD_FNV64_OFFSET;
    for (size_t i = 0; i < n_topics; i++) /* each name with its NUL: "ab","c" != "a","bc" */
        h = segd_fnv1a64_more(h, sorted[i], strlen(sorted[i]) + 1);
    int len = snprintf(out, size, "%s-t%016" PRIx64, store_id, h);
    if (len < 0 || (size_t)len >= size)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "static member id: %s and its topics' digest exceed %zu bytes", store_id,
                         size - 1);
    return SEGD_OK;
}
