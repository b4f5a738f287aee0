# Shared by the shell tests that run segd against a broker: source it after
# `set -euo pipefail` with segd=$1 set. lib_init NAME makes $tmp (kept with
# KEEP=1), a pids array whose processes are stopped on exit, and fail (prints
# the tail of every log in $tmp); start_broker PARTITIONS TOPICS gives the
# test a broker on loopback with those topics and sets $brokers.
#
# Which broker: when KAFKA_CLUSTER_DIR names a running Apache Kafka
# cluster (scripts/kafka.sh; scripts/test.sh starts one for the whole run),
# start_broker creates the topics there (replication factor 3,
# min.insync.replicas 2, as in production); otherwise, or for a test named
# in tests/support/mock_only.txt, it starts `segd dev-broker` (librdkafka's mock).
# The tests share that one cluster and run side by side, so on real Kafka
# every topic and group name of a test carries $tp, a prefix of its own
# (empty on the mock): write "${tp}events", "${tp}g".
lib_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tp=""
lib_topics=()
lib_init() {
  lib_name=$1
  tmp=$(mktemp -d "/tmp/segd-$1-XXXXXX")
  pids=()
  trap lib_cleanup EXIT
}
lib_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # a shared cluster outlives the test: leave it as it was found
  if [ ${#lib_topics[@]} -gt 0 ]; then
    bash "$lib_root/scripts/kafka.sh" delete-topic \
      "${lib_topics[@]}" >/dev/null 2>&1 || true
  fi
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
# A test's own cluster (require_kafka) lives in $tmp: the test's processes
# end first, then the cluster, then lib_cleanup removes $tmp (a node still
# writing its data there made rm fail, and the test with it); its topics went
# with the cluster.
lib_cleanup_own_cluster() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  bash "$lib_root/scripts/kafka.sh" stop >/dev/null 2>&1 || true
  lib_topics=()
  lib_cleanup
}
# true when this test runs against the real cluster
kafka_real() {
  [ -n "${KAFKA_CLUSTER_DIR:-}" ] || return 1
  # a list that cannot be read must not put its tests on the cluster unseen
  [ -r "$lib_root/tests/support/mock_only.txt" ] ||
    fail "cannot read $lib_root/tests/support/mock_only.txt"
  ! grep -q "^${lib_name:-?} " "$lib_root/tests/support/mock_only.txt"
}
# For a test that needs Apache Kafka (tests/kafka/*.sh that check what the
# mock cannot show): without KAFKA_CLUSTER_DIR it starts a cluster of its
# own in $tmp (scripts/kafka.sh, 3 nodes), stopped when the test exits.
require_kafka() {
  if [ -z "${KAFKA_CLUSTER_DIR:-}" ]; then
    export KAFKA_CLUSTER_DIR="$tmp/kafka"
    trap lib_cleanup_own_cluster EXIT
    echo "${lib_name:-?}: no KAFKA_CLUSTER_DIR: starting a Kafka cluster of its own"
    bash "$lib_root/scripts/kafka.sh" start 3 > "$tmp/kafka.out" 2>&1 ||
      fail "cannot start a Kafka cluster: $(tail -5 "$tmp/kafka.out")"
  fi
  kafka_real || fail "${lib_name:-?} needs Apache Kafka (is it in tests/support/mock_only.txt?)"
}
# For a test that must run on the suite's Apache Kafka cluster and has no
# mock form that checks the same: fails, saying so, without one (never a
# fallback to the mock that skips the test's checks and passes).
require_kafka_cluster() {
  [ -n "${KAFKA_CLUSTER_DIR:-}" ] ||
    fail "${lib_name:-?} needs a real Apache Kafka cluster and KAFKA_CLUSTER_DIR is not set:" \
      "start one (KAFKA_CLUSTER_DIR=DIR bash scripts/kafka.sh start 3; scripts/test.sh starts one" \
      "for the suite) and export KAFKA_CLUSTER_DIR"
  [ -f "$KAFKA_CLUSTER_DIR/bootstrap" ] ||
    fail "${lib_name:-?} needs a real Apache Kafka cluster: none in KAFKA_CLUSTER_DIR=$KAFKA_CLUSTER_DIR (no bootstrap file)"
  kafka_real || fail "${lib_name:-?} needs Apache Kafka but tests/support/mock_only.txt keeps it on the mock"
}
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do [ -e "$f" ] || continue; echo "--- $f" >&2; tail -12 "$f" >&2; done
  exit 1
}
start_broker() {
  if kafka_real; then
    [ -f "$KAFKA_CLUSTER_DIR/bootstrap" ] || fail "no Kafka cluster in $KAFKA_CLUSTER_DIR"
    tp="$lib_name-$$-$RANDOM."
    brokers=$(cat "$KAFKA_CLUSTER_DIR/bootstrap")
    local t
    for t in ${2//,/ }; do
      bash "$lib_root/scripts/kafka.sh" topic "$tp$t" "$1" 3 \
        min.insync.replicas=2 > "$tmp/topic.out" 2>&1 || fail "cannot create $tp$t: $(cat "$tmp/topic.out")"
      lib_topics+=("$tp$t")
    done
    return 0
  fi
  "$segd" dev-broker --partitions "$1" --topics "$2" > "$tmp/broker.out" 2> "$tmp/broker.log" &
  pids+=($!)
  for _ in $(seq 50); do grep -q bootstrap= "$tmp/broker.out" 2>/dev/null && break; sleep 0.1; done
  brokers=$(sed -n 's/^bootstrap=//p' "$tmp/broker.out")
  [ -n "$brokers" ] || fail "no broker"
}
