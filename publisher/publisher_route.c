/* Where the publisher's change events go and how they are framed: the
 * change topic's partition count, the change partition of each delta
 * (DESIGN §5), and the schema registry ids of the value schemas under
 * Confluent framing. Every delta of a cycle is routed before any is
 * produced. */
#include <inttypes.h>
#include <stdio.h>

#include "core/partition.h"
#include "publisher/publisher_int.h"
#include "transport/kmeta.h"

segd_err_t segd_publisher_topic_partitions(segd_publisher_t *p, const char *topic,
                                           int32_t *count, char *errstr, size_t n)
{
    return segd_kmeta_partitions(p->rk, topic, METADATA_WAIT_MS, count, errstr, n);
}

/* The change topic's partition count, asked for while not known (brokers
 * unreachable at start) and again when an input partition lies past it (the
 * topic may have grown since). */
segd_err_t segd_publisher_ensure_partitions(segd_publisher_t *p, int32_t need, char *errstr,
                                            size_t n)
{
    /* A count of 0 means never asked; a need of -1 is met by any count. */
    if (p->partitions > 0 && p->partitions > need)
        return SEGD_OK;
    int32_t count = 0;
    segd_err_t err = segd_kmeta_partitions_wait(p->rk, p->o.topic, METADATA_WAIT_MS, &count,
                                                errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "change topic %s does not exist and the brokers did "
                         "not create it: create it with as many partitions as the input topic",
                         p->o.topic);
    if (err)
        return err;
    if (count <= 0) /* routing by a count of 0 would put every delta on partition 0 */
        return segd_errf(SEGD_ERR_KAFKA, errstr, n, "change topic %s: no partition count yet",
                         p->o.topic);
    if (count > MAX_PARTITIONS)
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "change topic %s has %" PRId32
                         " partitions; segd publishes to at most %d", p->o.topic, count,
                         MAX_PARTITIONS);
    p->partitions = count;
    return SEGD_OK;
}

/* Where a delta goes (DESIGN §5). It goes to the partition of its source,
 * so that a cache shard tailing change partition p sees every delta of
 * input partition p. A delta with no input source goes where
 * input.partitioner puts its user. An input partition past the change
 * topic's last stops the cycle and keeps the entry, rather than send the
 * delta to a shard that does not own its user. */
static segd_err_t route(segd_publisher_t *p, const item_ref_t *r, int32_t *out, char *errstr,
                        size_t n)
{
    segd_err_t err = segd_publisher_ensure_partitions(p, r->part, errstr, n);
    if (err)
        return err;
    if (r->part >= p->partitions)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "change topic %s has %" PRId32
                         " partitions, fewer than input partition %" PRId32 " needs: add "
                         "partitions to it (as many as the input topic)", p->o.topic,
                         p->partitions, r->part);
    *out = r->part >= 0 ? r->part
                        : segd_partition_of(p->o.partitioner, r->item->user, r->item->user_len,
                                            p->partitions);
    return SEGD_OK;
}

/* Routes every delta of the cycle before any is produced: a refusal found
 * halfway made every retry send the deltas before it again, flooding the
 * change topic while the refused one waited for new partitions. */
segd_err_t segd_publisher_route_all(segd_publisher_t *p, char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < p->n_refs; i++)
        err = route(p, &p->refs[i], &p->refs[i].dest, errstr, n);
    return err;
}

/* With Confluent framing, schema's id under the subject <topic><suffix>,
 * registered once into *id. */
static segd_err_t ensure_subject(segd_publisher_t *p, const char *suffix, const char *schema,
                                 int32_t *id, char *errstr, size_t n)
{
    if (p->o.framing != SEGD_CHANGE_CONFLUENT || *id >= 0)
        return SEGD_OK;
    char subject[512];
    snprintf(subject, sizeof(subject), "%s%s", p->o.topic, suffix);
    return segd_registry_register(p->registry, subject, schema, id, errstr, n);
}

segd_err_t segd_publisher_ensure_schema(segd_publisher_t *p, char *errstr, size_t n)
{
    return ensure_subject(p, "-value", segd_change_schema_json(), &p->schema_id, errstr, n);
}

/* The Confluent id of MemberEvents, registered under their own subject
 * (TopicRecordNameStrategy's `<topic>-segd.MemberEvent`) the first time
 * a cycle has one: a deployment without identities registers nothing new. */
segd_err_t segd_publisher_ensure_member_schema(segd_publisher_t *p, char *errstr, size_t n)
{
    return ensure_subject(p, "-segd.MemberEvent", segd_member_schema_json(),
                          &p->member_schema_id, errstr, n);
}
