#!/usr/bin/env bash
# A rebuild is exact or says precisely what it is not (issue 29 #1, #2).
# History retention deleted before the rebuild began (delete-records moves
# partition 0's log start past its first batch, as retention would) is named
# per partition: its gone range, how many messages, the timestamp of the
# first message still held; exit 5 and no DB.rebuilt. With --base (units
# exported before the delete) the rebuild is complete, and after the swap a
# user whose only events were deleted from the topic is still there. With
# --accept-history-loss it is renamed and says what is lost. segd run refuses
# to swap in a rebuilt store lacking a topic it consumes (--topic).
# usage: rebuild_history.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init rebuild_history
require_kafka
export SEGD_CHANGES_ENABLE=0 SEGD_METRICS_LISTEN=${SEGD_METRICS_LISTEN:-off}
start_broker 2 events,events.dlq,other
now=$(date +%s)
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 80 --events 400 --seed 1 \
  --now "$now" > /dev/null 2> "$tmp/produce.log" || fail "produce 1"
cat > "$tmp/segd.conf" <<CONF
brokers = $brokers
topics = ${tp}events
group = ${tp}g
db = $tmp/db
kafka.session.timeout.ms = 6000
CONF
json() { "$segd" offsets show --db "$1" --json 2>/dev/null | /usr/bin/python3 -c "
import json,sys; o=json.load(sys.stdin); print($2)" 2>/dev/null; }
sum_offsets() { json "$1" "sum(p['next_offset'] for p in o['offsets'] if p['topic'] == '${tp}events')" || echo 0; }
run_until() { # segd run on conf $1 until store $2 stands at $3 offsets
  "$segd" run --config "$1" 2>> "$tmp/run.log" &
  local pid=$! n=0
  pids+=($pid)
  for _ in $(seq 600); do
    kill -0 $pid 2>/dev/null || fail "segd run exited"
    n=$(sum_offsets "$2")
    [ "$n" -ge "$3" ] && break
    sleep 0.2
  done
  kill -TERM $pid
  wait $pid || fail "segd run exit $?"
  [ "$n" -eq "$3" ] || fail "segd run stands at $n offsets, want $3"
}
run_until "$tmp/segd.conf" "$tmp/db" 400
# the base: units exported while the topic still holds everything
"$segd" snapshot export --db "$tmp/db" --to "$tmp/dest" --now "$now" > /dev/null \
  2> "$tmp/export.log" || fail "export"
cut=$(json "$tmp/db" "[p['next_offset'] for p in o['offsets'] if p['topic'] == '${tp}events' and p['partition'] == 0][0]")
[ "$cut" -gt 0 ] || fail "no offset of partition 0"
# the second batch holds users u0..u39 only: u40..u79 of partition 0 have
# no event left in the topic once its first batch is deleted
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 40 --events 100 --seed 2 \
  --now "$now" > /dev/null 2>> "$tmp/produce.log" || fail "produce 2"
run_until "$tmp/segd.conf" "$tmp/db" 500
users=$(seq -f 'u%010g' 0 79)
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db" --now "$now" --json $users > "$tmp/live.json"
bash "$lib_root/scripts/kafka.sh" delete-records "${tp}events" 0 "$cut" > "$tmp/delete.log" 2>&1 ||
  fail "delete-records: $(cat "$tmp/delete.log")"

# 1. without a base: exit 5, the gone range named, not renamed
set +e
"$segd" rebuild --config "$tmp/segd.conf" > "$tmp/nobase.out" 2> "$tmp/nobase.log"; rc=$?
set -e
[ $rc -eq 5 ] || fail "rebuild over deleted history: exit $rc: $(cat "$tmp/nobase.out")"
grep -q "not renamed $tmp/db.rebuilt: the topics no longer hold the whole history of 1 partitions" \
  "$tmp/nobase.out" || fail "rebuild said: $(cat "$tmp/nobase.out")"
grep -q "^  gone: ${tp}events \[0\]: offsets \[0, $cut) are gone ($cut messages deleted by retention or delete-records before the rebuild); the first message still held, offset $cut, has timestamp [0-9]* (20[0-9-]*T[0-9:]*Z): everything gone is older$" \
  "$tmp/nobase.out" || fail "gone range not named: $(cat "$tmp/nobase.out")"
! grep -q "${tp}events \[1\]" "$tmp/nobase.out" || fail "partition 1 lost nothing: $(cat "$tmp/nobase.out")"
[ -d "$tmp/db.rebuild.tmp" ] && [ ! -e "$tmp/db.rebuilt" ] || fail "an incomplete rebuild was renamed"
# the store it left lacks users whose only events were deleted
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db.rebuild.tmp" --now "$now" --json $users > "$tmp/nobase.json"
! cmp -s "$tmp/nobase.json" "$tmp/live.json" || fail "nothing was gone from the topic"

# 2. with the base (run again into the same tmp): complete, equal to the live store
"$segd" rebuild --config "$tmp/segd.conf" --base "$tmp/dest" > "$tmp/base.out" \
  2> "$tmp/base.log" || fail "rebuild with a base: exit $?: $(cat "$tmp/base.out")"
grep -q "^rebuilt [0-9]* messages (.*) into $tmp/db.rebuilt" "$tmp/base.out" ||
  fail "rebuild with a base said: $(cat "$tmp/base.out")"
! grep -q "gone\|lost" "$tmp/base.out" || fail "a covered rebuild named a loss: $(cat "$tmp/base.out")"
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db.rebuilt" --now "$now" --json $users | cmp -s - "$tmp/live.json" ||
  fail "the rebuilt store (with its base) differs from the live one"

# 3. a segd run consuming a topic the rebuild did not cover refuses the swap
set +e
timeout 120 "$segd" run --config "$tmp/segd.conf" --topic "${tp}events,${tp}other" \
  > /dev/null 2> "$tmp/run_more.log"; rc=$?
set -e
[ $rc -eq 1 ] || fail "segd run with a topic the rebuild lacks: exit $rc"
grep -q "rebuild swap refused: the rebuilt store $tmp/db.rebuilt has no offsets of ${tp}other (no offsets at all), which segd run consumes" \
  "$tmp/run_more.log" || fail "segd run said: $(tail -3 "$tmp/run_more.log")"
[ -d "$tmp/db.rebuilt" ] && ! ls -d "$tmp"/db.replaced-* > /dev/null 2>&1 ||
  fail "the refused swap moved a store"

# 4. the swap, then the users whose events are gone from the topic are still there
"$segd" run --config "$tmp/segd.conf" 2>> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 150); do grep -q "rebuilt store swapped in" "$tmp/run.log" && break; sleep 0.2; done
grep -q "rebuilt store swapped in" "$tmp/run.log" || fail "no swap: $(tail -3 "$tmp/run.log")"
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
# shellcheck disable=SC2086
"$segd" get --db "$tmp/db" --now "$now" --json $users | cmp -s - "$tmp/live.json" ||
  fail "the swapped store lost users whose events retention deleted"

# 5. --accept-history-loss: renamed, the loss said, also at the swap; the
# empty topic "other" has its offsets too (nothing to read stores them all)
sed -e "s|^db = .*|db = $tmp/db3|" -e "s|^topics = .*|topics = ${tp}events,${tp}other|" \
  "$tmp/segd.conf" > "$tmp/three.conf"
"$segd" rebuild --config "$tmp/three.conf" --accept-history-loss > "$tmp/accept.out" \
  2> "$tmp/accept.log" || fail "rebuild --accept-history-loss: exit $?: $(cat "$tmp/accept.out")"
grep -q "^  lost: ${tp}events \[0\]: offsets \[0, $cut) are gone ($cut messages" "$tmp/accept.out" ||
  fail "accepted loss not said: $(cat "$tmp/accept.out")"
[ -d "$tmp/db3.rebuilt" ] || fail "an accepted rebuild was not renamed"
"$segd" run --config "$tmp/three.conf" 2> "$tmp/run3.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 150); do
  grep -q "rebuilt store swapped in\|level=error" "$tmp/run3.log" && break
  sleep 0.2
done
kill -TERM $run_pid 2>/dev/null || true
wait $run_pid || true
grep -q "rebuilt store swapped in" "$tmp/run3.log" || fail "no swap of db3: $(tail -3 "$tmp/run3.log")"
grep -q "rebuild swap: the rebuilt store lacks ${tp}events \[0\] offsets \[0, $cut), deleted by retention before the rebuild" \
  "$tmp/run3.log" || fail "the swap did not say what was lost: $(tail -3 "$tmp/run3.log")"
echo "rebuild_history: [0, $cut) of partition 0 named and refused (exit 5), covered by a base and swapped in exactly, a swap lacking a topic refused, a loss accepted"
