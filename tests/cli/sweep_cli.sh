#!/usr/bin/env bash
# The revocation sweep in a real group (issue 11): A consumes 4 partitions
# alone and exports their units; B joins, takes 2 of them and restores them
# from A's units; once they have been away from A for sweep.after.s, A
# deletes their users (its owned users stay, byte for byte, as `segd get`
# shows while A runs) and their offsets; B leaves, A is assigned them
# again, has no offset for them and restores them from the units, and ends
# as it was before the sweep.
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init sweep
now=1800000000
users=200
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000 SEGD_STORE_HORIZON_S=$((80 * 86400))
start_broker 4 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --events 1500 \
  --seed 1 --now $now > /dev/null 2> "$tmp/produce.log" || fail "produce"
all_users() { for u in $(seq 0 $((users - 1))); do printf 'u%010d\n' "$u"; done; }
# every user's JSON line from store $1; fails (xargs: 123) when a segd get does
reads() { all_users | xargs "$segd" get --db "$tmp/$1" --now $now --json 2> "$tmp/reads.err"; }
consumed() { grep -o 'consumed=[0-9]*' "$tmp/$1.log" 2>/dev/null | tail -1 | cut -d= -f2 || true; }
start() { # name group, env settings follow
  local name=$1 group=$2
  shift 2
  env "$@" "$segd" run --brokers "$brokers" --topic "${tp}events" --group "$tp$group" \
    --db "$tmp/$name" -X session.timeout.ms=6000 2> "$tmp/$name.log" &
  pids+=($!)
  eval "pid_$name=$!"
}
stop() { local pid; pid=$(eval echo "\$pid_$1"); kill -TERM "$pid"; wait "$pid" || fail "$1 exited with $?"; }
wait_for() { # what, condition
  for _ in $(seq 600); do eval "$2" && return 0; sleep 0.2; done
  fail "never: $1"
}

units="SEGD_RESTORE_FROM=$tmp/dest SEGD_SNAPSHOT_TO=$tmp/dest SEGD_SNAPSHOT_INTERVAL=1"
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start a g-f SEGD_SWEEP_AFTER_S=1 SEGD_SWEEP_RECORDS_PER_S=1000000 $units \
  SEGD_METRICS_LISTEN=127.0.0.1:$mport
wait_for "a consumed all" '[ "$(consumed a)" -ge 1500 ] 2>/dev/null'
before=$(reads a) || fail "segd get of a: $(tail -3 "$tmp/reads.err")" # everything, consumed once
[ -n "$before" ] || fail "no reads"
wait_for "a exported 4 units" '[ "$(ls -d "$tmp"/dest/"${tp}"events/p-* 2>/dev/null | wc -l)" = 4 ]'
start b g-f SEGD_SWEEP_AFTER_S=0 $units
wait_for "a swept" 'grep -q "swept ${tp}events" "$tmp/a.log"'
swept=$(grep -o "swept ${tp}events[^:]*" "$tmp/a.log" | head -1)
# and /metrics says so
wait_for "a's sweep metrics" 'curl -sf "http://127.0.0.1:$mport/metrics" | grep -Eq "^segd_sweep_users_deleted_total [1-9]"'
# the users A still owns are untouched; the others are gone
after=$(reads a) || fail "segd get of a after its sweep: $(tail -3 "$tmp/reads.err")"
n_before=$(echo "$before" | grep -c '"segments":\[{' || true)
n_after=$(echo "$after" | grep -c '"segments":\[{' || true)
[ "$n_after" -gt 0 ] && [ "$n_after" -lt "$n_before" ] ||
  fail "a kept $n_after of $n_before users with segments after $swept"
kept=$(diff <(echo "$before") <(echo "$after") | grep -c '^>' || true)
[ "$kept" = "$(diff <(echo "$before") <(echo "$after") | grep '^>' | grep -c '"segments":\[\]' || true)" ] ||
  fail "a changed users it owns (not only emptied swept ones)"
stop b
# B's partitions come back to A without offsets: restored from the units
wait_for "a whole again" '[ "$(reads a)" = "$before" ]'
stop a
grep -q "component=sweep msg=final users_deleted=[1-9]" "$tmp/a.log" || fail "a: no sweep counters"
grep -q "restored p=" "$tmp/a.log" || fail "a restored nothing when they came back"
[ "$(reads a)" = "$before" ] || fail "a differs from what it held before once stopped"
echo "sweep_cli: ok ($swept)"
