#!/usr/bin/env bash
# segd run's log (docs/configuration.md "Logs"): with log.format = json every
# stderr line is one JSON object with ts (RFC 3339 UTC, ms), level,
# component and msg; librdkafka's lines come through as component=kafka with
# client and facility; log.level filters; at info nothing is logged per
# message (the line count does not grow with the input); the final line
# carries the figures as numbers; RocksDB's LOG in the store directory
# follows store.log.level. Then logfmt, the default: one key=value line per
# event whose figures scripts grep.
# usage: run_logs.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init logs
start_broker 2 ev,ev.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
b=$brokers

# runs segd run (log.level debug unless the environment says otherwise)
# until its log matches $2 (a batch line), then stops it; $1 names the run
run_until() {
  local name=$1 pattern=$2; shift 2
  SEGD_LOG_LEVEL=${SEGD_LOG_LEVEL:-debug} "$segd" run --brokers "$b" --topic "${tp}ev" \
    --group "$tp$name" --db "$tmp/$name" -X session.timeout.ms=6000 "$@" 2> "$tmp/$name.log" &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 300); do grep -q "$pattern" "$tmp/$name.log" && break; sleep 0.1; done
  grep -q "$pattern" "$tmp/$name.log" || fail "$name: no line /$pattern/"
  kill -TERM $pid
  wait $pid || fail "$name: segd run exited with $?"
}

"$segd" produce --brokers "$b" --topic "${tp}ev" --users 20 --events 100 > /dev/null 2> "$tmp/produce.log" ||
  fail "produce"
# log.* are segd keys: set through the environment here (-X is librdkafka's)
SEGD_LOG_FORMAT=json SEGD_STORE_LOG_LEVEL=info \
  run_until j2 '"msg":"batch written",.*"consumed":100,' -X debug=cgrp
/usr/bin/python3 - "$tmp/j2.log" <<'PY' || fail "json log"
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "no log lines"
objs = []
for l in lines:
    o = json.loads(l)            # every line is one JSON object
    for k in ("ts", "level", "component", "msg"):
        assert isinstance(o.get(k), str), (k, l)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["ts"]), l
    assert o["level"] in ("debug", "info", "warn", "error"), l
    objs.append(o)
kafka = [o for o in objs if o["component"] == "kafka"]
assert kafka, "no librdkafka line"
# the client's name: the consumer's client.id is its store's instance id (segd owner)
assert all(o.get("client", "").startswith(("rdkafka#", "segd-")) and o.get("facility")
           for o in kafka), kafka[0]
assert any(o["level"] == "debug" for o in kafka), "debug=cgrp lines not at debug"
final = [o for o in objs if o["component"] == "pipeline" and o["msg"] == "final"]
assert len(final) == 1, final
assert final[0]["consumed"] == 100 and isinstance(final[0]["segments_per_s"], (int, float)), final
assert any(o["msg"] == "partitions assigned" for o in objs), "no assignment line"
assert any(o["component"] == "daemon" and o["msg"] == "consuming" for o in objs)
PY
grep -q 'Options\.\|DB SUMMARY' "$tmp/j2/LOG" || fail "RocksDB LOG has no header"
grep -q '\[db/db_impl/db_impl.cc:[0-9]*\] Shutdown\|EVENT_LOG_v1' "$tmp/j2/LOG" ||
  fail "store.log.level = info wrote no info line to DIR/LOG"

# logfmt (the default): the same run at debug for 100 and 300 messages logs
# the same info lines (none per message), and at info (the default) no debug
run_until l1 'msg="batch written" .* consumed=100 '
"$segd" produce --brokers "$b" --topic "${tp}ev" --users 20 --events 200 --seed 2 > /dev/null 2>&1 ||
  fail "produce 2"
run_until l2 'msg="batch written" .* consumed=300 '
SEGD_LOG_LEVEL=info run_until l3 'msg="partitions assigned"'
grep -q 'Shutdown\|EVENT_LOG_v1' "$tmp/l1/LOG" && fail "store.log.level = off wrote info lines"
for f in l1 l2 l3; do
  grep -qv '^ts=[0-9T:.-]*Z level=\(debug\|info\|warn\|error\) component=[a-z]* msg=' "$tmp/$f.log" &&
    fail "$f: a line not in logfmt: $(grep -v '^ts=' "$tmp/$f.log" | head -3)"
done
grep -q 'level=debug' "$tmp/l3.log" && fail "l3: a debug line at log.level = info"
grep -q "component=pipeline msg=final consumed=100 events=100 " "$tmp/l1.log" || fail "l1 final"
grep -q "component=pipeline msg=final consumed=300 events=300 " "$tmp/l2.log" || fail "l2 final"
grep -q "component=pipeline msg=final consumed=" "$tmp/l3.log" || fail "l3 final"
info() { grep -v 'level=debug\|component=kafka' "$tmp/$1.log" | wc -l; }
n1=$(info l1); n2=$(info l2)
[ "$n2" -le $((n1 + 2)) ] || fail "the log grows with the input: $n1 lines for 100, $n2 for 300"
echo "run_logs: json and logfmt checked ($n1 and $n2 info lines for 100 and 300 messages)"
