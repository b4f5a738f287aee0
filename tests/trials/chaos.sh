#!/usr/bin/env bash
# Chaos trials (tests/trials/chaos.py): SIGKILLs of segd run during ingest, publish
# and snapshot export, rebalances while back-pressure is on and (on a
# cluster of its own) broker faults; the store, a snapshot + tail cache and
# the whole change topic must equal an independent model, and every check
# fails closed. Under ctest (the quick mode, under 2 minutes):
#   1. --self-test: each check broken on purpose (an altered store and cache
#      answer, the cache check at a closed port, the wait on a group nobody
#      commits to, member b's metrics port taken, b killed or stopped before
#      it joins) must fail its trial as the failure it is: what keeps the
#      checks proven;
#   2. one rebalance trial under back-pressure, which must be exact.
# The broker: the shared Apache Kafka cluster of $KAFKA_CLUSTER_DIR when one
# runs there (scripts/test.sh; uniquely named topics and groups, its brokers
# never signalled), else a `segd dev-broker` per trial (label librdkafka, no TSan
# run). Long runs and the figures of RELIABILITY.md:
#   bash tests/trials/chaos.sh SEGD_BIN SOURCE_DIR --trials 30 --kind kill [--kafka real ...]
# usage: chaos.sh SEGD_BIN SOURCE_DIR [chaos.py options]
set -euo pipefail
segd=$1
src=$2
shift 2
py=(/usr/bin/python3 "$src/tests/trials/chaos.py" "$segd")
if [ $# -gt 0 ]; then exec "${py[@]}" "$@"; fi
broker=()
mock_only=$src/tests/support/mock_only.txt
[ -r "$mock_only" ] || { echo "FAIL: cannot read $mock_only" >&2; exit 1; }
if [ -n "${KAFKA_CLUSTER_DIR:-}" ] && [ -f "$KAFKA_CLUSTER_DIR/bootstrap" ] &&
   ! grep -q '^chaos ' "$mock_only"; then
  broker=(--kafka real --cluster-dir "$KAFKA_CLUSTER_DIR")
fi
"${py[@]}" "${broker[@]}" --self-test --users 40 --events 400
exec "${py[@]}" "${broker[@]}" --trials 1 --kind rebalance --kills 2 --users 100 --events 2000
