#!/usr/bin/env bash
# Repair that tells the truth (issue 23): once a store has caught up with
# its input it has an ingest floor (here the horizon: now - 24 h, DESIGN
# 3.1), and the events of a rewound or replayed range below it can only be
# dead-lettered as too_late. `segd replay` and `segd offsets set` count them
# before applying anything, name the floor with its value and the two exact
# repairs, and refuse (exit 4) without --force; nothing is written then.
# With --force the counted events are exactly the ones dead-lettered.
# usage: repair_floor.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init repair_floor
# no change topic here (auto-creation is off on a real cluster): nothing published
export SEGD_CHANGES_ENABLE=0
start_broker 2 events,events.dlq
now=$(date +%s)
total=300
# events spread over the 30 days before now: most are older than 24 h
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 100 --events $total \
  --now "$now" > "$tmp/produce.out" 2> "$tmp/produce.log" || fail "produce"

floor() { "$segd" offsets show --db "$tmp/db" --json | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["ingest_floor_ms"])'; }
offsets() { "$segd" offsets show --db "$tmp/db" --json | /usr/bin/python3 -c \
  'import json,sys; print(" ".join("%d:%d" % (p["partition"], p["next_offset"]) for p in json.load(sys.stdin)["offsets"]))'; }
# a fresh store takes the whole history; once caught up the floor begins
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
  2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
f=0
for _ in $(seq 600); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  [ -d "$tmp/db" ] && f=$(floor 2>/dev/null || echo 0)
  [ "$f" -gt 0 ] && break
  sleep 0.2
done
[ "$f" -gt 0 ] || fail "no ingest floor after catching up"
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
grep -q "dlq" "$tmp/run.log" && grep -q "too_late" "$tmp/run.log" && fail "the fresh store refused history"
before=$(offsets)
users=$(seq -f 'u%010g' 0 99)
state() { # every user's segments and the outbox's depth
  # shellcheck disable=SC2086
  "$segd" get --db "$tmp/db" --now "$now" --json $users
  "$segd" stats --db "$tmp/db" | grep "^unpublished outbox"
}
state > "$tmp/state.before"
grep -q '"id":' "$tmp/state.before" || fail "no user has segments"

# replay of the whole topic: counted, refused, nothing applied or dead-lettered
set +e
"$segd" replay --brokers "$brokers" --topic "${tp}events" --db "$tmp/db" --from-beginning \
  --dlq-file "$tmp/refused.dlq" > /dev/null 2> "$tmp/replay-refused.log"; rc=$?
set -e
[ $rc -eq 4 ] || fail "replay below the floor: exit $rc, want 4: $(cat "$tmp/replay-refused.log")"
below=$(sed -n "s/^segd replay: \([0-9]*\) of the $total events in the range are below the store's ingest floor.*/\1/p" \
  "$tmp/replay-refused.log")
[ -n "$below" ] && [ "$below" -gt 0 ] && [ "$below" -lt $total ] ||
  fail "replay did not count the events below the floor: $(cat "$tmp/replay-refused.log")"
grep -q "below the floor $f (the horizon: now - store.horizon.s" "$tmp/replay-refused.log" ||
  fail "replay does not name the floor $f: $(cat "$tmp/replay-refused.log")"
grep -qF '1. rebuild: `segd rebuild --config FILE` fills a fresh store' "$tmp/replay-refused.log" &&
  grep -q "2. restore: a fresh store with restore.from" "$tmp/replay-refused.log" ||
  fail "replay does not name the exact repairs"
grep -q "refused, nothing applied (--force" "$tmp/replay-refused.log" || fail "no refusal line"
grep -q "^replayed " "$tmp/replay-refused.log" && fail "a refused replay printed a summary"
[ ! -s "$tmp/refused.dlq" ] || fail "a refused replay dead-lettered: $(head -2 "$tmp/refused.dlq")"
state | cmp -s - "$tmp/state.before" || fail "a refused replay wrote"

# offsets set: a rewind without brokers cannot be counted, so it is refused
set +e
"$segd" offsets set --db "$tmp/db" --topic "${tp}events" 0:0,1:0 > /dev/null \
  2> "$tmp/set-nobrokers.log"; rc=$?
set -e
[ $rc -eq 4 ] || fail "offsets set without brokers: exit $rc: $(cat "$tmp/set-nobrokers.log")"
grep -q "give --brokers" "$tmp/set-nobrokers.log" || fail "$(cat "$tmp/set-nobrokers.log")"
# with brokers it counts the same events (the whole log is the rewound range)
set +e
"$segd" offsets set --db "$tmp/db" --topic "${tp}events" --brokers "$brokers" 0:0,1:0 \
  > /dev/null 2> "$tmp/set-refused.log"; rc=$?
set -e
[ $rc -eq 4 ] || fail "offsets set below the floor: exit $rc: $(cat "$tmp/set-refused.log")"
grep -q "^segd offsets set: $below of the $total events in the range are below the store's ingest floor" \
  "$tmp/set-refused.log" || fail "offsets set count: $(cat "$tmp/set-refused.log")"
grep -q "below the floor $f (the horizon" "$tmp/set-refused.log" || fail "offsets set floor"
[ "$(offsets)" = "$before" ] || fail "a refused offsets set moved the offsets: $(offsets)"
# advancing needs no check
last=${before##* }
"$segd" offsets set --db "$tmp/db" --topic "${tp}events" "${last%%:*}:${last##*:}" > /dev/null ||
  fail "offsets set to the stored offset (no rewind) exit $?"

# --force goes on: the events counted are the ones dead-lettered as too_late
set +e
"$segd" replay --brokers "$brokers" --topic "${tp}events" --db "$tmp/db" --from-beginning \
  --dlq-file "$tmp/forced.dlq" --force > /dev/null 2> "$tmp/replay-forced.log"; rc=$?
set -e
[ $rc -eq 3 ] || fail "replay --force: exit $rc, want 3: $(cat "$tmp/replay-forced.log")"
grep -q -- "--force: going on" "$tmp/replay-forced.log" || fail "replay --force said nothing"
dead=$(grep -c '"reason":"too_late"' "$tmp/forced.dlq" || true)
[ "$dead" -eq "$below" ] || fail "replay --force dead-lettered $dead too_late, the check counted $below"
grep -q "is below the ingest floor $f (the horizon" "$tmp/forced.dlq" ||
  fail "the too_late letter does not name the floor: $(head -1 "$tmp/forced.dlq")"
"$segd" offsets set --db "$tmp/db" --topic "${tp}events" --brokers "$brokers" --force 0:0,1:0 \
  > "$tmp/set-forced.out" 2> "$tmp/set-forced.log" || fail "offsets set --force exit $?"
[ "$(offsets)" = "0:0 1:0" ] || fail "offsets set --force: $(offsets)"
echo "repair_floor: $below of $total events below the floor $f counted, refused, then dead-lettered with --force"
