#!/usr/bin/env bash
# Read while running (issue 23): every read-only command works on a store
# that a running `segd run` holds (RocksDB's LOCK taken, events arriving):
# offsets show (table and JSON), identity check|members, segments
# list-retired, get and stats. Each is run while a producer is still
# writing and segd run is consuming; that the store is held at that moment
# is checked by a writer (`offsets set`) being refused by name.
# usage: live_read.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init live_read
start_broker 2 events,events.dlq,links
now=$(date +%s)

"$segd" generate --users 20 --now "$now" --out "$tmp/seed.jsonl" > /dev/null
"$segd" backfill --db "$tmp/db" "$tmp/seed.jsonl" > "$tmp/backfill.log" 2>&1 || fail "backfill"
"$segd" segments retire --db "$tmp/db" --before-ms $((now * 1000)) 4242 > /dev/null ||
  fail "segments retire"
printf '{"id_a":"la","id_b":"lb","op":"LINK","ts_ms":%d,"weight":1.0}\n' $((now * 1000)) \
  > "$tmp/links.jsonl"
"$segd" identity produce --brokers "$brokers" --topic "${tp}links" "$tmp/links.jsonl" \
  2> "$tmp/produce-links.log" || fail "identity produce"

cat > "$tmp/segd.conf" <<CONF
changes.enable = 0
batch.max.ms = 20
identity.enable = 1
identity.links.topic = ${tp}links
kafka.session.timeout.ms = 6000
CONF
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
  --config "$tmp/segd.conf" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
# a producer that keeps going for the whole test: reads happen during ingest
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 500 --events 1000000 \
  --rate 200 > /dev/null 2> "$tmp/produce.log" &
prod_pid=$!
pids+=($prod_pid)

stored() { # the sum of the stored input offsets of the events topic, read-only
  "$segd" offsets show --db "$tmp/db" --json 2> "$tmp/show.err" | /usr/bin/python3 -c '
import json, sys
o = json.load(sys.stdin)
print(sum(p["next_offset"] for p in o["offsets"] if p["topic"] == sys.argv[1]))' "${tp}events"
}
first=""
for _ in $(seq 300); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  first=$(stored || true)
  [ -n "$first" ] && [ "$first" -gt 0 ] && break
  sleep 0.2
done
[ -n "$first" ] && [ "$first" -gt 0 ] || fail "offsets show beside segd run: $(cat "$tmp/show.err")"
# the store is held right now: a writer is refused by name
set +e
"$segd" offsets set --db "$tmp/db" --topic "${tp}events" 0:0 2> "$tmp/set.err"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "is in use" "$tmp/set.err" ||
  fail "offsets set on a held store: exit $rc: $(cat "$tmp/set.err")"
grep -q "offsets show" "$tmp/set.err" || fail "the refusal does not name offsets show"
# offsets go on moving while we read: ingest is live
later=$first
for _ in $(seq 300); do
  later=$(stored || true)
  [ -n "$later" ] && [ "$later" -gt "$first" ] && break
  sleep 0.2
done
[ -n "$later" ] && [ "$later" -gt "$first" ] || fail "offsets did not move ($first): not live"
"$segd" offsets show --db "$tmp/db" > "$tmp/show.txt" 2>&1 || fail "offsets show (table)"
grep -q "^offset .*${tp}events" "$tmp/show.txt" || fail "offsets show: $(cat "$tmp/show.txt")"
grep -q "^gc_watermark_ms " "$tmp/show.txt" || fail "offsets show has no W"

connected=""
for _ in $(seq 300); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  connected=$("$segd" identity check --db "$tmp/db" la lb 2> "$tmp/check.err" || true)
  [ "${connected%% *}" = connected ] && break
  sleep 0.2
done
[ "${connected%% *}" = connected ] ||
  fail "identity check beside segd run: '$connected' $(cat "$tmp/check.err")"
"$segd" identity members --db "$tmp/db" la > "$tmp/members.txt" 2> "$tmp/members.err" ||
  fail "identity members beside segd run: $(cat "$tmp/members.err")"
sort "$tmp/members.txt" | tr '\n' ' ' | grep -qx "la lb " ||
  fail "identity members: $(cat "$tmp/members.txt")"
"$segd" identity stats --db "$tmp/db" > /dev/null 2>&1 || fail "identity stats beside segd run"

"$segd" segments list-retired --db "$tmp/db" > "$tmp/retired.txt" 2> "$tmp/retired.err" ||
  fail "segments list-retired beside segd run: $(cat "$tmp/retired.err")"
grep -Eq "^4242 +$((now * 1000))$" "$tmp/retired.txt" || fail "list-retired: $(cat "$tmp/retired.txt")"
"$segd" segments list-retired --db "$tmp/db" --json > "$tmp/retired.json" ||
  fail "list-retired --json"
grep -qx "{\"segment_id\":4242,\"retired_before_ms\":$((now * 1000))}" "$tmp/retired.json" ||
  fail "list-retired --json: $(cat "$tmp/retired.json")"
"$segd" get --db "$tmp/db" --json u0000000001 > /dev/null 2>&1 || fail "get beside segd run"
"$segd" stats --db "$tmp/db" > /dev/null 2>&1 || fail "stats beside segd run"
kill -0 $prod_pid 2>/dev/null || fail "the producer stopped before the reads ended: not during ingest"
kill -0 $run_pid 2>/dev/null || fail "segd run exited during the reads"

# a mistyped --db is named, not a raw RocksDB error, and not created
set +e
"$segd" offsets show --db "$tmp/nowhere" 2> "$tmp/nowhere.err"; rc=$?
"$segd" get --db "$tmp/nowhere" u1 2> "$tmp/nowhere-get.err"; rc2=$?
set -e
[ $rc -eq 1 ] && grep -q "is not a segd store" "$tmp/nowhere.err" ||
  fail "offsets show on a missing store: $rc $(cat "$tmp/nowhere.err")"
[ $rc2 -eq 1 ] && grep -q "is not a segd store" "$tmp/nowhere-get.err" ||
  fail "get on a missing store: $rc2 $(cat "$tmp/nowhere-get.err")"
[ ! -e "$tmp/nowhere" ] || fail "a reader created a store"
"$segd" identity --help > /dev/null || fail "identity --help exit $?"
"$segd" segments --help > /dev/null || fail "segments --help exit $?"
kill -TERM $prod_pid $run_pid
wait $run_pid || fail "segd run exit $?"
echo "live_read: offsets show, identity check|members|stats, segments list-retired, get, stats beside a running segd run ($first -> $later offsets)"
