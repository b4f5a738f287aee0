#!/usr/bin/env bash
# The rebuild path (issue 23): a store that has caught up has an ingest
# floor and refuses a replay of its old history; `segd rebuild` fills a
# fresh store beside it from the topic (history of any age, exactly), while
# the live segd run goes on; the next segd run swaps it in (old store kept)
# and continues from the rebuilt offsets. A second segd run started while
# the first holds the store refuses the swap and changes nothing. A user
# erased only in the live store (offline, never in the topic) stays erased
# after the swap (the live store's erase markers are carried over); every
# other user equals the live store's answer. A rebuild of only some of the
# config's topics is not renamed to .rebuilt. With identity.enable the
# rebuilt store holds the identity graph of the whole links topic, its
# components as `segd identity rebuild` makes them (an UNLINK splits one,
# which the live store applying links online does not), with the links
# offsets segd run continues from after the swap.
# usage: rebuild_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init rebuild_cli
# no change topic here (auto-creation is off on a real cluster): nothing published
export SEGD_CHANGES_ENABLE=0
start_broker 2 events,events.dlq,segments.links
now=$(date +%s)
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 60 --events 300 \
  --now "$now" > /dev/null 2> "$tmp/produce.log" || fail "produce"
# the graph: la-lb-lc and ld-le linked, then lb-lc unlinked
t=$((now * 1000 - 60000))
cat > "$tmp/links.jsonl" <<JL
{"id_a":"la","id_b":"lb","op":"LINK","ts_ms":$t,"weight":1.0}
{"id_a":"lb","id_b":"lc","op":"LINK","ts_ms":$((t + 1)),"weight":1.0}
{"id_a":"ld","id_b":"le","op":"LINK","ts_ms":$((t + 2)),"weight":1.0}
{"id_a":"lc","id_b":"lb","op":"UNLINK","ts_ms":$((t + 1000)),"weight":1.0}
JL
"$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" "$tmp/links.jsonl" \
  2>> "$tmp/produce.log" || fail "identity produce"
cat > "$tmp/segd.conf" <<CONF
brokers = $brokers
topics = ${tp}events
group = ${tp}g
db = $tmp/db
kafka.session.timeout.ms = 6000
identity.enable = 1
identity.links.topic = ${tp}segments.links
CONF
links_at() { # the store $1's links offsets add up to $2
  "$segd" identity stats --db "$1" --topic "${tp}segments.links" 2>/dev/null |
    grep -qx "links_offsets_sum $2"
}
connected() { "$segd" identity check --db "$1" "$2" "$3" > /dev/null 2>&1; }
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
for _ in $(seq 300); do links_at "$tmp/db" 4 && break; sleep 0.2; done
links_at "$tmp/db" 4 || fail "segd run did not consume the links"
# online, an UNLINK only marks the edge: la and lc stay connected
connected "$tmp/db" la lc || fail "the live store split la-lc online"
users=$(seq -f 'u%010g' 0 59)
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db" --now "$now" --json $users > "$tmp/live.json"

# the rebuild runs beside the live segd run
"$segd" rebuild --config "$tmp/segd.conf" > "$tmp/rebuild.out" 2> "$tmp/rebuild.log" ||
  fail "rebuild exit $?: $(cat "$tmp/rebuild.log")"
grep -q "^rebuilt 300 messages (300 events, 0 dead-lettered) and the identity graph from 4 link messages (0 dead-lettered) into $tmp/db.rebuilt" \
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
ev = [p for p in o["offsets"] if p["topic"] == sys.argv[2]]
assert sum(p["next_offset"] for p in ev) == 300 and len(ev) == 2, o' \
  "$tmp/rebuilt.offsets" "${tp}events" || fail "rebuilt offsets: $(cat "$tmp/rebuilt.offsets")"
set +e
"$segd" rebuild --config "$tmp/segd.conf" > /dev/null 2> "$tmp/again.log"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "not yet swapped in" "$tmp/again.log" || fail "second rebuild: $rc"
# the rebuilt store has the graph: the links offsets, and the components of
# `segd identity rebuild` (the UNLINK split la-lb from lc)
links_at "$tmp/db.rebuilt" 4 || fail "rebuilt links offsets: $("$segd" identity stats --db "$tmp/db.rebuilt")"
connected "$tmp/db.rebuilt" la lb || fail "rebuilt graph: la, lb not connected"
connected "$tmp/db.rebuilt" ld le || fail "rebuilt graph: ld, le not connected"
! connected "$tmp/db.rebuilt" la lc || fail "rebuilt graph: the UNLINK did not split la-lc"
[ "$("$segd" identity members --db "$tmp/db.rebuilt" lb | sort | tr '\n' ' ')" = "la lb " ] ||
  fail "rebuilt members of lb: $("$segd" identity members --db "$tmp/db.rebuilt" lb 2>&1)"

# a second segd run while the first holds the store: the swap is refused
set +e
timeout 120 "$segd" run --config "$tmp/segd.conf" > /dev/null 2> "$tmp/run2.log"; rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "second segd run beside the first: exit $rc"
grep -q "rebuild swap refused: the store $tmp/db is in use by another process" "$tmp/run2.log" ||
  fail "second segd run said: $(tail -3 "$tmp/run2.log")"
[ -d "$tmp/db.rebuilt" ] && [ -f "$tmp/db/CURRENT" ] || fail "the refused swap moved a store"
! ls -d "$tmp"/db.replaced-* > /dev/null 2>&1 || fail "the refused swap replaced the store"
kill -0 $run_pid 2>/dev/null || fail "the live segd run stopped beside the refused swap"

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
  n=$(json "sum(p['next_offset'] for p in o['offsets'] if p['topic'] == '${tp}events')" || echo 0)
  [ "$n" -ge 320 ] && break
  sleep 0.2
done
[ "$n" -eq 320 ] || fail "after the swap segd run stands at $n offsets, want 320"
# the swapped store has the rebuilt graph and segd run continues the links after it
! connected "$tmp/db" la lc || fail "the swapped store lacks the rebuilt graph"
echo "{\"id_a\":\"lf\",\"id_b\":\"lg\",\"op\":\"LINK\",\"ts_ms\":$((t + 2000)),\"weight\":1.0}" |
  "$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" - \
  2>> "$tmp/produce.log" || fail "identity produce 2"
for _ in $(seq 300); do links_at "$tmp/db" 5 && break; sleep 0.2; done
links_at "$tmp/db" 5 || fail "after the swap the links stand at: $("$segd" identity stats --db "$tmp/db" 2>&1)"
connected "$tmp/db" lf lg || fail "a link after the swap was not applied"
# the offline erasure is not in the topic, yet the swap kept it
"$segd" get --db "$tmp/db" --now "$now" --json u0000000003 > "$tmp/u3.json"
grep -q '"user_id"' "$tmp/u3.json" || fail "no answer for u0000000003: $(cat "$tmp/u3.json")"
! grep -q '"id":' "$tmp/u3.json" ||
  fail "u0000000003 (erased offline in the live store) came back with the rebuilt store"

# a rebuild of some of the config's input topics is kept as .rebuild.tmp
sed -e "s|^topics = .*|topics = ${tp}events,${tp}other|" -e "s|^db = .*|db = $tmp/db2|" \
  "$tmp/segd.conf" > "$tmp/two.conf"
set +e
"$segd" rebuild --config "$tmp/two.conf" --topic "${tp}events" > "$tmp/part.out" \
  2> "$tmp/part.log"; rc=$?
set -e
[ $rc -eq 3 ] || fail "partial rebuild exit $rc: $(cat "$tmp/part.log")"
grep -q "not renamed $tmp/db2.rebuilt: --topic left out the config's input topics ${tp}other" \
  "$tmp/part.out" || fail "partial rebuild said: $(cat "$tmp/part.out")"
[ -d "$tmp/db2.rebuild.tmp" ] && [ ! -e "$tmp/db2.rebuilt" ] || fail "partial rebuild renamed"
# retention past the rebuilt offsets before the swap: segd run refuses it (on
# a real cluster, where DeleteRecords moves the log start as retention would)
if kafka_real; then
  kill -TERM $run_pid
  wait $run_pid || fail "segd run exit $?"
  "$segd" rebuild --config "$tmp/segd.conf" > /dev/null 2> "$tmp/rebuild3.log" ||
    fail "third rebuild: $(cat "$tmp/rebuild3.log")"
  "$segd" produce --brokers "$brokers" --topic "${tp}events" --users 60 --events 40 --seed 9 \
    --now "$now" > /dev/null 2>> "$tmp/produce.log" || fail "produce 3"
  bash "$lib_root/scripts/kafka.sh" delete-records "${tp}events" 0 -1 > "$tmp/delete.log" 2>&1 ||
    fail "delete-records: $(cat "$tmp/delete.log")"
  set +e
  timeout 120 "$segd" run --config "$tmp/segd.conf" > /dev/null 2> "$tmp/run3.log"; rc=$?
  set -e
  [ $rc -eq 1 ] || fail "segd run over a rebuilt store retention passed: exit $rc"
  grep -q "rebuild swap refused: retention deleted ${tp}events \[0\]" "$tmp/run3.log" ||
    fail "segd run said: $(tail -3 "$tmp/run3.log")"
  [ -d "$tmp/db.rebuilt" ] || fail "the refused swap moved the rebuilt store"
fi
echo "rebuild_cli: 300 messages and 4 links rebuilt beside segd run (floor $f), swap refused beside it, swapped in at restart keeping an offline erasure, 20 more messages and a link consumed after"
