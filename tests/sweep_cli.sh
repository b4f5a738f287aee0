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
tmp=$(mktemp -d /tmp/segd-sweep-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -12 "$f" >&2; done
  exit 1
}
now=1800000000
users=200
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000 SEGD_STORE_HORIZON_S=$((80 * 86400))
"$segd" dev-broker --partitions 4 --topics events,segments.changes \
  > "$tmp/broker.out" 2> "$tmp/broker.log" &
pids+=($!)
for _ in $(seq 50); do grep -q bootstrap= "$tmp/broker.out" 2>/dev/null && break; sleep 0.1; done
brokers=$(sed -n 's/^bootstrap=//p' "$tmp/broker.out")
[ -n "$brokers" ] || fail "no broker"
"$segd" produce --brokers "$brokers" --topic events --users $users --events 1500 \
  --seed 1 --now $now > /dev/null 2> "$tmp/produce.log" || fail "produce"
all_users() { for u in $(seq 0 $((users - 1))); do printf 'u%010d\n' "$u"; done; }
reads() { all_users | xargs "$segd" get --db "$tmp/$1" --now $now --json 2>/dev/null || true; }
consumed() { grep -o 'consumed=[0-9]*' "$tmp/$1.log" 2>/dev/null | tail -1 | cut -d= -f2 || true; }
start() { # name group, env settings follow
  local name=$1 group=$2
  shift 2
  env "$@" "$segd" run --brokers "$brokers" --topic events --group "$group" \
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
start a g-f SEGD_SWEEP_AFTER_S=1 SEGD_SWEEP_RECORDS_PER_S=1000000 $units
wait_for "a consumed all" '[ "$(consumed a)" -ge 1500 ] 2>/dev/null'
before=$(reads a) # everything, consumed once
[ -n "$before" ] || fail "no reads"
wait_for "a exported 4 units" '[ "$(ls -d "$tmp"/dest/events/p-* 2>/dev/null | wc -l)" = 4 ]'
start b g-f SEGD_SWEEP_AFTER_S=0 $units
wait_for "a swept" 'grep -q "swept events" "$tmp/a.log"'
swept=$(grep -o "swept events[^:]*" "$tmp/a.log" | head -1)
# the users A still owns are untouched; the others are gone
after=$(reads a)
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
