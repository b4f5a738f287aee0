#!/usr/bin/env bash
# `segd produce` says only what a broker acknowledged (issue 30 item 1).
# Against a port nobody listens on it gives up within its delivery timeout
# (default 30 s, not librdkafka's 5 min), exits 1, names the broker and the
# cause and claims nothing; SIGINT against such a broker stops it at once with
# exit 1 and "interrupted", not "produced N events"; against a broker (the
# dev-broker or the test cluster, start_broker) it reports "delivered N of N"
# and exits 0.
# usage: cli_produce.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init cli_produce

# a loopback port that was free a moment ago: nothing answers there
dead=127.0.0.1:$(/usr/bin/python3 -c \
  "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")

# SIGINT while the events wait for a broker that never answers (beside the
# next case, which takes its delivery timeout; this one's would end it only
# after the test's own)
"$segd" produce --brokers "$dead" --topic events --users 10 --events 500 --timeout-s 600 \
  > "$tmp/int.out" 2> "$tmp/int.log" &
int_pid=$!
pids+=($int_pid)
# the first connection failure is logged once the producer runs (its
# signal handlers are in place by then)
for _ in $(seq 100); do grep -q "facility=FAIL" "$tmp/int.log" && break; sleep 0.1; done
grep -q "facility=FAIL" "$tmp/int.log" || fail "no connection failure logged: $(cat "$tmp/int.log")"

# the default delivery timeout, against the dead port
start=$(date +%s)
set +e
timeout 150 "$segd" produce --brokers "$dead" --topic events --users 10 --events 500 \
  > "$tmp/dead.out" 2> "$tmp/dead.log"
rc=$?
set -e
took=$(( $(date +%s) - start ))
[ $rc -ne 124 ] || fail "segd produce against $dead still running after 150 s"
[ $rc -eq 1 ] || fail "segd produce against $dead: exit $rc, want 1: $(cat "$tmp/dead.log")"
[ $took -lt 120 ] || fail "segd produce against $dead took $took s"
grep -q "^segd produce: delivered 0 of 500 events to events: no broker answered at $dead: .*Connection refused" \
  "$tmp/dead.log" || fail "no broker and cause named: $(cat "$tmp/dead.log")"
! grep -q "^produced" "$tmp/dead.out" || fail "claims delivery: $(cat "$tmp/dead.out")"
! grep -q '^%[0-9]|' "$tmp/dead.log" || fail "raw librdkafka lines: $(grep '^%' "$tmp/dead.log" | head -3)"
[ "$(grep -c "facility=FAIL" "$tmp/dead.log")" -le 1 ] ||
  fail "every reconnect logged: $(grep -c "facility=FAIL" "$tmp/dead.log") FAIL lines"

kill -INT $int_pid
set +e
wait $int_pid
rc=$?
set -e
[ $rc -eq 1 ] || fail "segd produce after SIGINT: exit $rc, want 1: $(cat "$tmp/int.log")"
grep -q "^segd produce: interrupted (500 of 500 events queued): delivered 0 of 500 events to events: no broker answered at $dead" \
  "$tmp/int.log" || fail "interrupted run said: $(cat "$tmp/int.log")"
! grep -q "produced [0-9]* events" "$tmp/int.out" "$tmp/int.log" ||
  fail "interrupted run claims delivery: $(cat "$tmp/int.out")"

# a --timeout-s of its own bounds it too
set +e
"$segd" produce --brokers "$dead" --topic events --users 10 --events 5 --timeout-s 2 \
  > /dev/null 2> "$tmp/short.log"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "delivered 0 of 5 events" "$tmp/short.log" ||
  fail "--timeout-s 2: exit $rc: $(cat "$tmp/short.log")"

# a broker that answers: every event acknowledged, exit 0
start_broker 2 events
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 20 --events 200 \
  > "$tmp/ok.out" 2> "$tmp/ok.log" || fail "segd produce to $brokers: exit $?: $(cat "$tmp/ok.log")"
grep -q "^produced 200 events (.*) to ${tp}events in [0-9.]* s: delivered 200 of 200$" "$tmp/ok.out" ||
  fail "produce said: $(cat "$tmp/ok.out")"
echo "cli_produce: a dead broker fails in $took s naming it, SIGINT claims nothing, a live one delivers 200 of 200"
