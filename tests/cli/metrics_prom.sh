#!/usr/bin/env bash
# segd run's metrics scraped by a real Prometheus (Debian's `prometheus`,
# started here on loopback, stopped by pid): a broker (tests/support/lib.bash),
# `segd produce`, `segd run` with metrics.listen on a free port; /readyz answers
# 503 before the group has assigned the partitions and caught up, then 200
# with every partition's lag 0; Prometheus's /api/v1/query sees the key
# series, segments applied grow when more events arrive, and the lag is 0
# once segd caught up with them; the periodic snapshot figures appear;
# after a restart with nothing new, /readyz is 200 from the stored offsets.
# Fails when no prometheus binary can be found (scripts/install-deps.sh
# installs it): a missing tool is not a pass.
# usage: metrics_prom.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
prom=$(command -v prometheus || true)
if [ -z "$prom" ]; then
  echo "FAIL: metrics_prom needs a prometheus binary (apt-get install prometheus; scripts/install-deps.sh does)" >&2
  exit 1
fi
source "$(dirname "$0")/../support/lib.bash"
lib_init prom
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
now=$(date +%s)
users=300

start_broker 3 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now \
  > "$tmp/produce.out" 2> "$tmp/produce.log" || fail "produce"
# the messages produced so far, from "produced N events ..."
produced() { awk '/^produced/ {n += $2} END {print n + 0}' "$tmp/produce.out"; }

mport=$(free_port)
pport=$(free_port)
cat > "$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: segd
    static_configs:
      - targets: ['127.0.0.1:$mport']
EOF
"$prom" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address=127.0.0.1:$pport --log.level=warn > "$tmp/prometheus.log" 2>&1 &
pids+=($!)

# The mock delays a group's first assignment by 3 s (Kafka's default
# group.initial.rebalance.delay.ms); the test cluster does not (0), and segd
# run can be assigned and caught up before the first /readyz. There a member
# joins first and is then stopped (SIGSTOP): segd run's first assignment
# waits until the group drops it (session.timeout.ms 6 s), and segd run is
# unassigned meanwhile. (A member that is merely idle would not do: under the
# cooperative protocol segd run's first assignment would be empty, and a
# member given no partition is ready, docs/metrics.md.)
holder=""
prom_cleanup() { [ -z "$holder" ] || kill -KILL "$holder" 2>/dev/null || true; lib_cleanup; }
trap prom_cleanup EXIT
if kafka_real; then
  /usr/bin/python3 - "$brokers" "${tp}events" "${tp}g" > "$tmp/holder.out" 2> "$tmp/holder.log" <<'PY' &
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3],
              "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False,
              "session.timeout.ms": 6000, "max.poll.interval.ms": 8000})
c.subscribe([sys.argv[2]])
while len(c.assignment()) < 3:
    c.poll(0.2)
print("holding", flush=True)
time.sleep(300)
PY
  holder=$!
  for _ in $(seq 300); do grep -q holding "$tmp/holder.out" 2>/dev/null && break; sleep 0.1; done
  grep -q holding "$tmp/holder.out" || fail "the first member got no partitions"
  kill -STOP "$holder"
fi
SEGD_METRICS_LISTEN=127.0.0.1:$mport SEGD_READY_MAX_LAG=0 SEGD_SNAPSHOT_INTERVAL=1 \
  SEGD_SNAPSHOT_TO="$tmp/snap" "$segd" run --brokers "$brokers" \
  --topic "${tp}events" --group "${tp}g" --db "$tmp/db" -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)

# /readyz from the first answer on: 503 until the group's (delayed) first
# assignment and the catch-up, then 200
first=""
for _ in $(seq 300); do
  code=$(curl -s -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$mport/readyz" || true)
  [ -z "$first" ] && [ "$code" != 000 ] && first=$code && cp "$tmp/ready.json" "$tmp/first.json"
  [ "$code" = 200 ] && break
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  sleep 0.1
done
[ -z "$holder" ] || { kill -KILL "$holder"; wait "$holder" 2>/dev/null || true; holder=""; }
[ "$first" = 503 ] || fail "first /readyz answer was $first, not 503: $(cat "$tmp/first.json")"
grep -Eq '"ready":false,"reason":"(unassigned|lag)"' "$tmp/first.json" ||
  fail "first /readyz body: $(cat "$tmp/first.json")"
[ "$code" = 200 ] || fail "/readyz never 200: $(cat "$tmp/ready.json")"
/usr/bin/python3 - "$tmp/ready.json" <<'PY' || fail "/readyz body: $(cat "$tmp/ready.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ready"] is True and r["reason"] is None and r["store"] == "writable", r
assert sorted(p["partition"] for p in r["partitions"]) == [0, 1, 2], r
assert all(p["lag"] == 0 and p["next"] == p["high"] for p in r["partitions"]), r
PY
curl -sf "http://127.0.0.1:$mport/healthz" | grep -q '"status":"ok"' || fail "/healthz"

# Prometheus's view: prom_check PHASE [APPLIED_BEFORE] waits (20 s each) for
# every condition of the phase through /api/v1/query, prints the segments applied
prom_check() {
  /usr/bin/python3 - "$pport" "$(produced)" "$@" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, produced, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
before = float(sys.argv[4]) if len(sys.argv) > 4 else 0
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    r = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
    return float(r[0]["value"][1]) if r else None
def wait(expr, ok, what):
    v, deadline = None, time.time() + 20
    while time.time() < deadline:
        try:
            v = query(expr)
        except OSError:
            v = None  # prometheus still starting
        if v is not None and ok(v):
            return v
        time.sleep(0.2)
    sys.exit(f"{phase}: prometheus: {expr} = {v}, wanted {what}")
if phase == "caught-up":
    wait('up{job="segd"}', lambda v: v == 1, "1 (segd scraped)")
    wait("sum(segd_applied_events_total)", lambda v: v == produced, produced)
    wait("count(segd_consumer_lag_messages)", lambda v: v == 3, "3 partitions")
    wait("count(segd_rocksdb_live_data_bytes)", lambda v: v == 3, "3 column families")
    wait("segd_ready", lambda v: v == 1, 1)
    for s in ["segd_batch_apply_seconds_count", "segd_batch_messages_sum",
              "segd_change_events_total", "segd_change_bytes_total",
              "segd_change_latency_seconds_count", "segd_process_resident_memory_bytes",
              "segd_process_cpu_seconds_total", "segd_rocksdb_block_cache_capacity_bytes",
              "segd_store_writable", "segd_batches_total",
              'segd_snapshot_exports_total{result="ok"}', "segd_snapshot_bytes",
              "segd_snapshot_users", "segd_snapshot_last_success_timestamp_seconds"]:
        wait(f"sum({s})", lambda v: v > 0, "> 0")
    wait("segd_snapshot_age_seconds", lambda v: 0 <= v < 60, "[0, 60)")
else:  # more events arrived: applied segments grow
    wait("sum(segd_applied_segments_total)", lambda v: v > before, f"> {before}")
    wait("sum(segd_consumed_messages_total)", lambda v: v == produced, produced)
wait("max(segd_consumer_lag_messages)", lambda v: v == 0, "0 (caught up)")
print(int(query("sum(segd_applied_segments_total)")))
PY
}
applied=$(prom_check caught-up) || fail "prometheus after catch-up"

# more events: applied segments grow in Prometheus, the lag comes back to 0
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now --seed 2 \
  >> "$tmp/produce.out" 2>> "$tmp/produce.log" || fail "second produce"
prom_check more "$applied" > /dev/null || fail "prometheus after more events"
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/readyz" | grep -qx 200 ||
  fail "/readyz after the second batch: $(curl -s "http://127.0.0.1:$mport/readyz")"

kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"

# a restart with nothing new to read: partitions that deliver no message
# (no consumer position) are measured from their stored offsets: ready
SEGD_METRICS_LISTEN=127.0.0.1:$mport SEGD_READY_MAX_LAG=0 "$segd" run --brokers "$brokers" \
  --topic "${tp}events" --group "${tp}g" --db "$tmp/db" -X session.timeout.ms=6000 2> "$tmp/run2.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 300); do
  code=$(curl -s -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$mport/readyz" || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
[ "$code" = 200 ] || fail "/readyz after a restart: $code $(cat "$tmp/ready.json")"
/usr/bin/python3 - "$tmp/ready.json" "$(produced)" <<'PY' || fail "/readyz after a restart: $(cat "$tmp/ready.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["partitions"]) == 3 and all(p["lag"] == 0 for p in r["partitions"]), r
assert sum(p["next"] for p in r["partitions"]) == int(sys.argv[2]), r  # the stored offsets
PY
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $? (restart)"
echo "metrics_prom: ok"
