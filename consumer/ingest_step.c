/* The one ingest step of an input message; see ingest_step.h. */
#include "consumer/ingest_step.h"

#include "base/clock.h"

int segd_ingest_step(segd_ingest_t *g, segd_applier_t *ap, segd_dlq_t *dlq, int dlq_exact,
                     const rd_kafka_message_t *m, const segd_event_t **ev, int *reason,
                     char *why, size_t why_size, segd_ingest_step_times_t *times)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    double t0 = times ? segd_mono_s() : 0;
    *ev = NULL;
    *reason = 0;
    int ok = segd_ingest_check(g, topic, m->partition, m->key, m->key_len, m->payload, m->len,
                               ev, reason, why, why_size);
    double t1 = times ? segd_mono_s() : 0;
    if (times)
        times->check_s += t1 - t0;
    if (ok < 0)
        return -1;
    if (!ok)
        *ev = NULL;
    if (!ap)
        return ok ? 1 : 0;
    if (ok) {
        rd_kafka_timestamp_type_t tstype;
        int64_t ts = rd_kafka_message_timestamp(m, &tstype);
        if (segd_applier_add_from(ap, *ev, topic, m->partition, m->offset, ts > 0 ? ts : 0) !=
            SEGD_OK)
            return -2;
        if (times)
            times->build_s += segd_mono_s() - t1;
        return 1;
    }
    if (segd_dlq_add(dlq, topic, m->partition, m->offset,
                     dlq_exact || m->key_len ? m->key : NULL, m->key_len,
                     dlq_exact || m->len ? m->payload : NULL, m->len,
                     segd_dlq_reason_name(*reason), why) != SEGD_OK)
        return -2;
    return 0;
}
