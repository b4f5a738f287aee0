#!/usr/bin/env bash
# Erase and retire while running, through the log (issue 23): `segd erase --brokers`
# produces ERASE_USER events to the input topic in each user's partition,
# the running `segd run` applies them like any event, and erase waits until
# the store shows them (exit 0, "applied"); other users are untouched, the
# events are not misrouted, a stopped segd run makes the bounded wait say
# why (exit 1), a bad id or a time from the future produces nothing (exit 2).
# `segd segments retire --brokers` sends a control event to every partition;
# the store lists the retirement and the segment is dead for every user.
# The input here is raw Avro (input.format = raw, not the default): the live
# commands take the framing from segd run's --config (or --framing), so their
# events are applied, not dead-lettered; without either they send nothing
# (issue 29 #6). Without --db they say "sent; not checked" and exit 6.
# usage: live_erase.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init live_erase
# no change topic here (auto-creation is off on a real cluster): nothing published
export SEGD_CHANGES_ENABLE=0
start_broker 2 events,events.dlq
now=$(date +%s)
echo "input.format = raw" > "$tmp/segd.conf"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 40 --events 200 \
  --format raw --now "$now" > /dev/null 2> "$tmp/produce.log" || fail "produce"
"$segd" run --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --group "${tp}g" --db "$tmp/db" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
consumed() { "$segd" offsets show --db "$tmp/db" --json 2>/dev/null | /usr/bin/python3 -c \
  'import json,sys; print(sum(p["next_offset"] for p in json.load(sys.stdin)["offsets"]))'; }
n=0
for _ in $(seq 300); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  [ -d "$tmp/db" ] && n=$(consumed || echo 0)
  [ "$n" -ge 200 ] && break
  sleep 0.2
done
[ "$n" -ge 200 ] || fail "segd run consumed $n of 200"
live() { "$segd" get --db "$tmp/db" --json "$1" | /usr/bin/python3 -c \
  'import json,sys; print(len(json.load(sys.stdin)["segments"]))'; }
[ "$(live u0000000003)" -gt 0 ] && [ "$(live u0000000008)" -gt 0 ] ||
  fail "the users to erase have no segments"
"$segd" get --db "$tmp/db" --json u0000000004 > "$tmp/other.before"

"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --db "$tmp/db" --wait-s 120 u0000000003 u0000000008 > "$tmp/erase.out" 2> "$tmp/erase.log" ||
  fail "erase --brokers exit $?: $(cat "$tmp/erase.log")"
grep -q "^produced 2 ERASE_USER events at ts_ms [0-9]* to ${tp}events$" "$tmp/erase.out" ||
  fail "erase said: $(cat "$tmp/erase.out")"
grep -q "^applied: $tmp/db shows all 2 erasures$" "$tmp/erase.out" || fail "$(cat "$tmp/erase.out")"
[ "$(live u0000000003)" -eq 0 ] && [ "$(live u0000000008)" -eq 0 ] || fail "not erased"
"$segd" get --db "$tmp/db" --json u0000000004 | cmp -s - "$tmp/other.before" ||
  fail "erasing changed u0000000004"
"$segd" stats --db "$tmp/db" | grep -q "^misrouted events *0$" ||
  fail "an erasure went to the wrong partition: $("$segd" stats --db "$tmp/db" | grep misrouted)"

# retirement through the log: a control event to every partition, applied
# by segd run with its batch, listed by the store, not counted as misrouted
seg=$("$segd" get --db "$tmp/db" --json u0000000004 | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["segments"][0]["id"])')
holders() { # users among the first 40 with segment $seg live
  # shellcheck disable=SC2046
  "$segd" get --db "$tmp/db" --json $(seq -f 'u%010g' 0 39) | /usr/bin/python3 -c "
import json,sys; print(sum(any(s['id'] == $seg for s in json.loads(l)['segments']) for l in sys.stdin))"; }
[ "$(holders)" -gt 0 ] || fail "nobody holds segment $seg"
"$segd" segments retire --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --db "$tmp/db" --wait-s 120 "$seg" > "$tmp/retire.out" 2> "$tmp/retire.log" || fail "retire --brokers exit $?: $(cat "$tmp/retire.log")"
grep -q "^produced a retirement of 1 segment before ts_ms [0-9]* to all 2 partitions of ${tp}events$" \
  "$tmp/retire.out" || fail "retire said: $(cat "$tmp/retire.out")"
grep -q "^applied: $tmp/db lists all 1 retirements$" "$tmp/retire.out" || fail "$(cat "$tmp/retire.out")"
"$segd" segments list-retired --db "$tmp/db" | grep -Eq "^$seg +[0-9]+$" || fail "not listed"
[ "$(holders)" -eq 0 ] || fail "segment $seg still live for $(holders) users after its retirement"
"$segd" stats --db "$tmp/db" | grep -q "^misrouted events *0$" ||
  fail "the control events counted as misrouted: $("$segd" stats --db "$tmp/db" | grep misrouted)"

# refusals produce nothing: a bad id, a time from the future, and a live
# command that cannot know segd run's framing (no --config, no --framing)
set +e
"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  u0000000005 $'\xff' 2> "$tmp/bad.log"; rc=$?
"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --at-ms $(( (now + 86400) * 1000 )) u0000000005 2> "$tmp/future.log"; rc2=$?
"$segd" erase --brokers "$brokers" --topic "${tp}events" --db "$tmp/db" --wait-s 5 \
  u0000000005 > "$tmp/noframing.out" 2> "$tmp/noframing.log"; rc3=$?
"$segd" segments retire --brokers "$brokers" --topic "${tp}events" "$seg" \
  > "$tmp/noframing-retire.out" 2> "$tmp/noframing-retire.log"; rc4=$?
set -e
[ $rc -eq 2 ] && grep -q "nothing produced" "$tmp/bad.log" || fail "bad id: exit $rc $(cat "$tmp/bad.log")"
[ $rc2 -eq 2 ] && grep -q "from_future" "$tmp/future.log" || fail "future: exit $rc2 $(cat "$tmp/future.log")"
[ $rc3 -eq 2 ] && grep -q "^segd erase: which framing does segd run read? give --config FILE .* or --framing raw|single-object|confluent; nothing produced$" \
  "$tmp/noframing.log" || fail "erase without a framing: exit $rc3 $(cat "$tmp/noframing.log")"
! grep -q "produced\|applied" "$tmp/noframing.out" || fail "erase without a framing: $(cat "$tmp/noframing.out")"
[ $rc4 -eq 2 ] && grep -q "^segd segments retire: which framing does segd run read?" \
  "$tmp/noframing-retire.log" || fail "retire without a framing: exit $rc4 $(cat "$tmp/noframing-retire.log")"
kill -0 $run_pid 2>/dev/null || fail "segd run exited"
# Nothing of them reached the topic: one more erasure of the same user (same
# partition, so after any of them) applied, the store has consumed exactly
# the 200 events, 2 erasures, 2 retirement events (one per partition) and it.
"$segd" erase --framing raw --brokers "$brokers" --topic "${tp}events" --db "$tmp/db" \
  --wait-s 120 u0000000005 > "$tmp/erase5.out" 2> "$tmp/erase5.log" ||
  fail "erase --framing raw exit $?: $(cat "$tmp/erase5.log")"
grep -q "^applied: $tmp/db shows all 1 erasures$" "$tmp/erase5.out" || fail "$(cat "$tmp/erase5.out")"
n=$(consumed)
[ "$n" -eq 205 ] || fail "the store consumed $n events, want 205: a refused command sent some"

# with segd run stopped the wait is bounded and says why
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
set +e
"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --db "$tmp/db" --wait-s 2 u0000000006 > "$tmp/stopped.out" 2> "$tmp/stopped.log"; rc=$?
set -e
[ $rc -eq 1 ] || fail "erase with segd run stopped: exit $rc, want 1"
grep -q "shows 0 of 1 erasures: is a segd run consuming" "$tmp/stopped.log" ||
  fail "no reason: $(cat "$tmp/stopped.log")"
# and without --db it does not wait, and says that it did not check (exit 6)
set +e
"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  u0000000007 > "$tmp/nowait.out" 2> "$tmp/nowait.log"; rc=$?
"$segd" segments retire --framing raw --brokers "$brokers" --topic "${tp}events" "$seg" \
  > "$tmp/nowait-retire.out" 2> "$tmp/nowait-retire.log"; rc2=$?
set -e
[ $rc -eq 6 ] || fail "erase without --db: exit $rc, want 6: $(cat "$tmp/nowait.log")"
grep -q "^produced 1 ERASE_USER events" "$tmp/nowait.out" || fail "$(cat "$tmp/nowait.out")"
grep -q "^segd erase: sent; not checked: pass --db DIR .* --wait-s N to wait for the effect" \
  "$tmp/nowait.log" || fail "erase without --db said: $(cat "$tmp/nowait.log")"
! grep -q "applied" "$tmp/nowait.out" || fail "erase without --db claims: $(cat "$tmp/nowait.out")"
[ $rc2 -eq 6 ] && grep -q "^segd segments retire: sent; not checked" "$tmp/nowait-retire.log" ||
  fail "retire without --db: exit $rc2: $(cat "$tmp/nowait-retire.log")"
echo "live_erase: 3 users erased through the log and seen applied; refusals produce nothing"
