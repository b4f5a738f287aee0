# Shared by the broker-fault tests (kafka_failover.sh, kafka_outage.sh,
# cache_log_start.sh): each kills or stops brokers, so each starts a 3-node
# Apache Kafka cluster of its own (scripts/kafka.sh) in a fresh folder,
# never the suite's shared one, and stops it by pid when it exits however
# it exits. own_cluster creates the topics tests/trials/kafka_faults.py uses, with
# replication factor 3 and min.insync.replicas 2 as in production;
# run_faults SCENARIO runs that driver against it. Source after
# `set -euo pipefail` with segd=$1 set.
own_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
own_cleanup() {
  bash "$own_root/scripts/kafka.sh" stop > /dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$KAFKA_CLUSTER_DIR"
}
own_cluster() {
  KAFKA_CLUSTER_DIR=$(mktemp -d "/tmp/segd-kafka-$1-XXXXXX")
  export KAFKA_CLUSTER_DIR
  trap own_cleanup EXIT
  # a cluster starts in ~20 s on an idle machine, minutes on a loaded one
  KAFKA_START_TIMEOUT_S=${KAFKA_START_TIMEOUT_S:-240} \
    bash "$own_root/scripts/kafka.sh" start 3 > "$KAFKA_CLUSTER_DIR.start" 2>&1 ||
    { echo "FAIL: the Kafka cluster did not start: $(tail -5 "$KAFKA_CLUSTER_DIR.start")" >&2
      rm -f "$KAFKA_CLUSTER_DIR.start"; exit 1; }
  rm -f "$KAFKA_CLUSTER_DIR.start"
  local t
  for t in events:4 segments.changes:4 events.dlq:4; do
    bash "$own_root/scripts/kafka.sh" topic "${t%%:*}" "${t##*:}" 3 min.insync.replicas=2 \
      > /dev/null || { echo "FAIL: cannot create topic ${t%%:*}" >&2; exit 1; }
  done
}
run_faults() {
  /usr/bin/python3 "$own_root/tests/trials/kafka_faults.py" "$1" "$segd"
}
