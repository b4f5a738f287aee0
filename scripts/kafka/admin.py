#!/usr/bin/python3
"""Small admin requests against a Kafka cluster for scripts/kafka.sh and the
tests, through Debian's python3-confluent-kafka (librdkafka's admin API):
starting a JVM per request (Kafka's own tools) costs seconds each.

usage: admin.py BOOTSTRAP wait NODES TIMEOUT_S
       admin.py BOOTSTRAP create TOPIC PARTITIONS RF [key=value ...]
       admin.py BOOTSTRAP delete TOPIC...
       admin.py BOOTSTRAP leader TOPIC PARTITION
       admin.py BOOTSTRAP isr TOPIC PARTITION
Exit status 0 on success; a reason on stderr and 1 otherwise."""
import sys
import time

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic


def client(bootstrap):
    # log_level 0: a node still starting refuses connections; the wait says
    # so once, in its own words, instead of a log line per attempt
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 30000,
                        "log_level": 0})


def wait(bootstrap, nodes, timeout_s):
    """Ready means every node is a registered broker, the controller quorum
    answers (CreateTopics goes to it) and a replicated topic can be made."""
    deadline = time.time() + timeout_s
    last = "no answer"
    while time.time() < deadline:
        try:
            md = client(bootstrap).list_topics(timeout=3)
            if len(md.brokers) >= nodes:
                return 0
            last = "%d of %d brokers registered" % (len(md.brokers), nodes)
        except Exception as e:  # noqa: BLE001 - any failure means not ready yet
            last = str(e)
        time.sleep(0.5)
    print("kafka: not ready after %ds: %s" % (timeout_s, last), file=sys.stderr)
    return 1


def create(bootstrap, topic, partitions, rf, configs):
    conf = dict(kv.split("=", 1) for kv in configs)
    # a loaded test machine can leave the controller slow to answer
    # ("Failed while waiting for controller"): tried again for a while; a
    # topic that exists from an earlier attempt that did get through is fine
    deadline = time.time() + 120
    while True:
        a = client(bootstrap)  # the futures need their client alive
        fs = a.create_topics(
            [NewTopic(topic, int(partitions), int(rf), config=conf)], operation_timeout=30)
        try:
            fs[topic].result(timeout=60)
            break
        except Exception as e:  # noqa: BLE001
            code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.time() > deadline or (e.args and hasattr(e.args[0], "retriable")
                                          and not e.args[0].retriable()
                                          and code != KafkaError._TIMED_OUT
                                          and code != KafkaError.REQUEST_TIMED_OUT):
                print("kafka: cannot create %s: %s" % (topic, e), file=sys.stderr)
                return 1
            time.sleep(1)
    # CreateTopics returns when the controller has it; wait until every
    # partition has a leader in the metadata the clients will read
    deadline = time.time() + 30
    while time.time() < deadline:
        md = client(bootstrap).list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t and t.error is None and len(t.partitions) == int(partitions) and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return 0
        time.sleep(0.2)
    print("kafka: %s has no leader for every partition after 30 s" % topic, file=sys.stderr)
    return 1


def delete(bootstrap, topics):
    a = client(bootstrap)
    fs = a.delete_topics(list(topics), operation_timeout=30)
    rc = 0
    for t, f in fs.items():
        try:
            f.result(timeout=40)
        except Exception as e:  # noqa: BLE001
            print("kafka: cannot delete %s: %s" % (t, e), file=sys.stderr)
            rc = 1
    return rc


def partition_md(bootstrap, topic, partition):
    md = client(bootstrap).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or int(partition) not in t.partitions:
        raise SystemExit("kafka: no partition %s of %s" % (partition, topic))
    return t.partitions[int(partition)]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    bootstrap, cmd, args = argv[1], argv[2], argv[3:]
    if cmd == "wait" and len(args) == 2:
        return wait(bootstrap, int(args[0]), int(args[1]))
    if cmd == "create" and len(args) >= 3:
        return create(bootstrap, args[0], args[1], args[2], args[3:])
    if cmd == "delete" and args:
        return delete(bootstrap, args)
    if cmd == "leader" and len(args) == 2:
        print(partition_md(bootstrap, *args).leader)
        return 0
    if cmd == "isr" and len(args) == 2:
        print(",".join(str(n) for n in partition_md(bootstrap, *args).isrs))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
