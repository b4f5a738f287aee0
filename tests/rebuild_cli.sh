#!/usr/bin/env bash
# The rebuild path (issue 23): a store that has caught up has an ingest
# floor and refuses a replay of its old history; `segd rebuild` fills a
# fresh store beside it from the topic (history of any age, exactly), while
# the live segd run goes on; the next segd run swaps it in (old store kept)
# and continues from the rebuilt offsets. A user erased only in the live
# store (offline, never in the topic) shows the rebuilt store came from the
# topic; every other user equals the live store's answer.
# usage: rebuild_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/lib.bash"
lib_init rebuild_cli
# no change topic here (auto-creation is off on a real cluster): nothing published
export SEGD_CHANGES_ENABLE=0
start_broker 2 events,events.dlq
now=$(date +%s)
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 60 --events 300 \
  --now "$now" > /dev/null 2> "$tmp/produce.log" || fail "produce"
cat > "$tmp/segd.conf" <<CONF
brokers = $brokers
topics = ${tp}events
group = ${tp}g
db = $tmp/db
kafka.session.timeout.ms = 6000
CONF
start_run() {
  "$segd" run --config "$tmp/segd.conf" 2>> "$tmp/run.log" &
  run_pid=$!
  pids+=($run_pid)
}
json() { "$segd" offsets show --db "$tmp/db" --json 2>/dev/null | /usr/bin/python3 -c "
import json,sys; o=json.load(sys.stdin); print($1)"; }
start_run
f=0
for _ in $(seq 600); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  [ -d "$tmp/db" ] && f=$(json 'o["ingest_floor_ms"]' || echo 0)
  [ "$f" -gt 0 ] && break
  sleep 0.2
done
[ "$f" -gt 0 ] || fail "no ingest floor after catching up"
users=$(seq -f 'u%010g' 0 59)
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db" --now "$now" --json $users > "$tmp/live.json"

# the rebuild runs beside the live segd run
"$segd" rebuild --config "$tmp/segd.conf" > "$tmp/rebuild.out" 2> "$tmp/rebuild.log" ||
  fail "rebuild exit $?: $(cat "$tmp/rebuild.log")"
grep -q "^rebuilt 300 messages (300 events, 0 dead-lettered) into $tmp/db.rebuilt" \
  "$tmp/rebuild.out" || fail "rebuild said: $(cat "$tmp/rebuild.out")"
kill -0 $run_pid 2>/dev/null || fail "the live segd run stopped during the rebuild"
[ -d "$tmp/db.rebuilt" ] && [ ! -e "$tmp/db.rebuild.tmp" ] || fail "no $tmp/db.rebuilt"
# the rebuilt store took the whole history, old events included
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db.rebuilt" --now "$now" --json $users | cmp -s - "$tmp/live.json" ||
  fail "the rebuilt store differs from the live one"
# with segd run's offsets: it continues from where the rebuild ended
"$segd" offsets show --db "$tmp/db.rebuilt" --json > "$tmp/rebuilt.offsets"
/usr/bin/python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))
assert sum(p["next_offset"] for p in o["offsets"]) == 300 and len(o["offsets"]) == 2, o' \
  "$tmp/rebuilt.offsets" || fail "rebuilt offsets: $(cat "$tmp/rebuilt.offsets")"
set +e
"$segd" rebuild --config "$tmp/segd.conf" > /dev/null 2> "$tmp/again.log"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "not yet swapped in" "$tmp/again.log" || fail "second rebuild: $rc"

# damage the live store where the topic does not know it: erased offline
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
"$segd" erase --db "$tmp/db" u0000000003 > /dev/null || fail "offline erase"
[ "$("$segd" get --db "$tmp/db" --json u0000000003 | grep -c '"id":')" -eq 0 ] || fail "not erased"

# the next segd run swaps the rebuilt store in and continues after its offsets
start_run
for _ in $(seq 150); do
  grep -q "rebuilt store swapped in" "$tmp/run.log" && break
  sleep 0.2
done
grep -q "msg=\"rebuilt store swapped in\" db=$tmp/db " "$tmp/run.log" ||
  fail "no swap logged: $(tail -3 "$tmp/run.log")"
ls -d "$tmp"/db.replaced-* > /dev/null || fail "the old store was not kept"
[ ! -e "$tmp/db.rebuilt" ] || fail "db.rebuilt still there"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 60 --events 20 --seed 7 \
  --now "$now" > /dev/null 2>> "$tmp/produce.log" || fail "produce 2"
n=0
for _ in $(seq 300); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited after the swap"
  n=$(json 'sum(p["next_offset"] for p in o["offsets"])' || echo 0)
  [ "$n" -ge 320 ] && break
  sleep 0.2
done
[ "$n" -eq 320 ] || fail "after the swap segd run stands at $n offsets, want 320"
"$segd" get --db "$tmp/db" --now "$now" --json u0000000003 | grep -q '"id":' ||
  fail "u0000000003 (erased only in the old store) did not come back from the topic"
echo "rebuild_cli: 300 messages rebuilt beside segd run (floor $f), swapped in at restart, 20 more consumed after"
