#!/usr/bin/env bash
# The suite on a busy machine (issue 28): runs `bash scripts/test.sh` RUNS
# times in a row (default 3) while two CPU hogs and a second 3-node Kafka
# cluster share the machine, and stops at the first failing run. The hogs
# and the cluster are started here and stopped by pid when this script
# exits, however it exits. A run's log is build/under-load-<i>.log.
#   usage: bash scripts/test-under-load.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
hogs=()
load_kafka="$PWD/build/kafka-load"
cleanup() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  KAFKA_CLUSTER_DIR="$load_kafka" bash scripts/kafka.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
bash scripts/install-deps.sh
mkdir -p build
# two busy loops at the suite's own priority: the 2 cores stay contended
for _ in 1 2; do
  bash -c 'while :; do :; done' &
  hogs+=($!)
done
# a second cluster: three more JVMs with their own heaps, heartbeats and logs
KAFKA_CLUSTER_DIR="$load_kafka" bash scripts/kafka.sh start 3 >/dev/null
for i in $(seq "$runs"); do
  start=$(date +%s)
  if bash scripts/test.sh > "build/under-load-$i.log" 2>&1; then
    echo "under load: run $i of $runs passed in $(( $(date +%s) - start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  else
    echo "under load: run $i of $runs FAILED after $(( $(date +%s) - start )) s: build/under-load-$i.log" >&2
    grep -E '\(Failed\)|\(Timeout\)|FAIL' "build/under-load-$i.log" | head -20 >&2 || true
    exit 1
  fi
done
echo "under load: $runs of $runs runs passed"
