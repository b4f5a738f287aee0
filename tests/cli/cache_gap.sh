#!/usr/bin/env bash
# Issue 9 #8: the edge cache never hides a gap in the change stream and is
# ready only once caught up.
# 1. A snapshot whose change-topic position retention already removed (the
#    mock broker keeps <= 5 MiB per partition: 7 MB of other messages push
#    the log start past it; on a real cluster DeleteRecords moves it):
#    `segd cache` exits 1 saying "snapshot older than the change topic's
#    retention: load a newer snapshot", never serving.
# 2. A newer snapshot, then a backlog of 100 000 small messages behind its
#    position (not change events, so they are counted as skipped; reading
#    them takes the cache a while): the first 200 from /healthz comes after
#    the whole backlog was read, and says caught_up.
# usage: cache_gap.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init cachegap
now=$(date +%s)
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
start_broker 1 events,events.dlq,segments.changes
changes="${tp}segments.changes"
export SEGD_CHANGES_TOPIC=$changes
junk() { # $1 messages of $2 random bytes, uncompressed, into the change topic
  /usr/bin/python3 - "$brokers" "$1" "$2" "$changes" <<'PY'
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "compression.type": "none",
              "linger.ms": 5, "batch.size": 200000, "queue.buffering.max.messages": 1000000})
for _ in range(int(sys.argv[2])):
    p.produce(sys.argv[4], value=os.urandom(int(sys.argv[3])), partition=0)
    p.poll(0)
assert p.flush(30) == 0
PY
}
watermarks() {
  /usr/bin/python3 - "$brokers" "$changes" "${tp}wm" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3]})
print(*c.get_watermark_offsets(TopicPartition(sys.argv[2], 0), timeout=10))
PY
}
position() { # change partition 0's position a cache of the units needs: the
  # minimum over the unit manifests (0 for a unit that lists none)
  /usr/bin/python3 - "$1" "${tp}events" <<'PY'
import glob, json, sys
units = glob.glob(sys.argv[1] + "/" + sys.argv[2] + "/p-*/manifest.json")
assert units, "no units"
print(min(sum(p["offset"] for p in json.load(open(u))["changes"]["positions"]
              if p["partition"] == 0) for u in units))
PY
}

"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 50 --now $now \
  > /dev/null 2> "$tmp/produce.log" || fail "produce"
SEGD_STORE_HORIZON_S=$((40 * 86400)) "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" \
  --db "$tmp/db" -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
wait_published() { # until the store recorded a change position of at least $1
  for _ in $(seq 300); do
    "$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/probe" --now $now \
      > /dev/null 2>&1 && [ "$(position "$tmp/probe" 2>/dev/null || echo 0)" -ge "$1" ] && return 0
    sleep 0.3
  done
  fail "segd run never published past $1"
}
wait_published 50
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap1" --now $now \
  > /dev/null 2>&1 || fail "export 1"
p1=$(position "$tmp/snap1")

# 1. retention removes the deltas after snap1's position: on the mock, 7 MB
# of other messages; a real cluster keeps them for days (retention.ms), so
# there the log start is moved as retention would move it (DeleteRecords)
junk 70 100000
if kafka_real; then
  read -r low high < <(watermarks)
  bash "$lib_root/scripts/kafka.sh" delete-records "$changes" 0 "$high" > "$tmp/delete.log" 2>&1 ||
    fail "delete-records"
fi
read -r low high < <(watermarks)
[ "$low" -gt "$p1" ] || fail "log start $low not past the snapshot's position $p1"
port=$(free_port)
rc=0
timeout 30 "$segd" cache --snapshot "$tmp/snap1" --brokers "$brokers" --changes "$changes" \
  --listen 127.0.0.1:$port --now $now 2> "$tmp/cache1.log" || rc=$?
[ $rc = 1 ] || fail "cache on a snapshot older than retention: exit $rc, want 1"
grep -q "snapshot older than the change topic's retention: load a newer snapshot" \
  "$tmp/cache1.log" || fail "no gap message: $(cat "$tmp/cache1.log")"
echo "gap: position $p1 < log start $low: refused"

# 2. a newer snapshot (after more deltas), then a backlog behind it
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 50 --now $now --seed 2 \
  > /dev/null 2>> "$tmp/produce.log" || fail "second produce"
wait_published $((high + 1))
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap2" --now $now \
  > /dev/null 2>&1 || fail "export 2"
p2=$(position "$tmp/snap2")
junk 100000 8
read -r low high < <(watermarks)
[ "$low" -le "$p2" ] || fail "log start $low past the second snapshot's position $p2"
port=$(free_port)
"$segd" cache --snapshot "$tmp/snap2" --brokers "$brokers" --changes "$changes" \
  --listen 127.0.0.1:$port --now $now 2> "$tmp/cache2.log" &
cache_pid=$!
pids+=($cache_pid)
first=""
for _ in $(seq 1500); do
  if body=$(curl -sf "http://127.0.0.1:$port/healthz" 2>/dev/null); then first=$body; break; fi
  kill -0 $cache_pid 2>/dev/null || fail "cache exited: $(cat "$tmp/cache2.log")"
  sleep 0.02
done
[ -n "$first" ] || fail "cache never ready"
/usr/bin/python3 - "$first" $((high - p2)) <<'PY' || fail "ready before catching up: $first"
import json, sys
h = json.loads(sys.argv[1])
backlog = int(sys.argv[2])
seen = h["changes_applied"] + h["changes_skipped"]
assert seen >= backlog, f"{seen} of {backlog} read"
assert h.get("caught_up") is True
print(f"ready after {seen} of a backlog of {backlog} messages")
PY
echo "cache_gap: ok"
