#!/usr/bin/env bash
# Peak RSS of `segd run` alone (its own process, unlike `segd bench ingest`,
# whose figure includes the in-process broker and producer): a dev broker
# holds the seed workload, segd run consumes it with memory.limit.mb = MEM
# until every message is applied and the outbox is empty; prints its VmHWM.
# usage: bench/run_rss.sh SEGD_BIN USERS MEM_MB   (results: bench/RESULTS.md)
set -euo pipefail
segd=$1 users=$2 mem=$3
d=$(mktemp -d /tmp/segd-rss-XXXXXX)
"$segd" dev-broker --partitions 32 --topics events,events.dlq,segments.changes \
  > "$d/broker.out" 2> "$d/broker.err" &
broker=$!
run=
cleanup() {
  [ -n "$run" ] && kill "$run" 2>/dev/null && wait "$run" 2>/dev/null
  kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null; rm -rf "$d"
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q bootstrap= "$d/broker.out" && break; sleep 0.1; done
brokers=$(sed -n 's/^bootstrap=//p' "$d/broker.out")
"$segd" produce --brokers "$brokers" --topic events --users "$users" > "$d/produce.out" 2>&1
want=$((users * 50)) # the seed workload: 50 events per user
SEGD_MEMORY_LIMIT_MB=$mem "$segd" run --brokers "$brokers" --topic events --group g \
  --db "$d/db" -X session.timeout.ms=6000 2> "$d/run.err" &
run=$!
t0=$(date +%s.%N)
hwm=0 done=0
while kill -0 "$run" 2>/dev/null; do
  h=$(awk '/^VmHWM/{print $2}' "/proc/$run/status" 2>/dev/null || true)
  [ -n "$h" ] && hwm=$h
  consumed=$(grep -o 'consumed=[0-9]*' "$d/run.err" | tail -1 | cut -d= -f2 || true)
  outbox=$("$segd" stats --db "$d/db" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["outbox_entries"])' 2>/dev/null ||
    echo 1)
  if [ "${consumed:-0}" -ge "$want" ] && [ "$outbox" = 0 ]; then done=1; break; fi
  sleep 0.5
done
t1=$(date +%s.%N)
h=$(awk '/^VmHWM/{print $2}' "/proc/$run/status" 2>/dev/null || true)
[ -n "$h" ] && hwm=$h
[ $done = 1 ] || { echo "segd run did not finish:"; tail -5 "$d/run.err"; exit 1; }
printf 'memory.limit.mb=%s users=%s events=%s seconds=%.1f segd_run_peak_rss_mib=%d limit_plus_10pct_mib=%d\n' \
  "$mem" "$users" "$want" "$(echo "$t1 - $t0" | bc)" $((hwm / 1024)) $((mem * 11 / 10))
