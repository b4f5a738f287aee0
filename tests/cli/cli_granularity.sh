#!/usr/bin/env bash
# A store made by `segd run` with store.granularity.s=60 stays usable: the
# CLI (backfill, compact, segments retire, a second run) takes the
# granularity fixed in the store's meta when none is given; only an explicit
# conflicting value is refused.
# usage: cli_granularity.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
# the events are stamped around 2027-01-15 (--now 1800000000) while segd run
# keeps the wall clock: allow them past the from_future bound
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init gran
now=1800000000
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 10 --now $now \
  > /dev/null 2> "$tmp/produce.log" || fail "produce"

runs=0
# $1: extra env assignment; runs until u9 is in the store and this run has
# its partitions (a second run finds u9 there already: stopping it before it
# opened the store would check nothing, and SIGTERM before its handlers are
# installed ends it with 143)
run_until_applied() {
  runs=$((runs + 1))
  local log=$tmp/run$runs.log
  env "$1" "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
    -X session.timeout.ms=6000 2> "$log" &
  local pid=$! ok=0
  for _ in $(seq 200); do
    if grep -q 'msg="partitions assigned"' "$log" &&
       "$segd" get --db "$tmp/db" --now $now --json u0000000009 2>/dev/null | grep -q '"id"'; then
      ok=1; break
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
  done
  kill -TERM $pid 2>/dev/null || true
  wait $pid || fail "segd run ($1) exit $?"
  [ $ok = 1 ] || fail "segd run ($1) applied nothing"
}
run_until_applied SEGD_STORE_GRANULARITY_S=60

# backfill rounds expiries to the store's 60 s, not the default hour
echo '{"user_id":"alice","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":12,"ttl_s":130}]}' \
  > "$tmp/a.jsonl"
"$segd" backfill --db "$tmp/db" --now 1799990000 "$tmp/a.jsonl" > "$tmp/backfill.log" 2>&1 ||
  fail "backfill exit $?: $(cat "$tmp/backfill.log")"
out=$("$segd" get --db "$tmp/db" --now 1799990000 --json alice)
echo "$out" | grep -q '"expires_at":1799990160' || fail "backfill expiry not at 60 s: $out"
"$segd" compact --db "$tmp/db" --now $now --allow-future-now > "$tmp/compact.log" 2>&1 ||
  fail "compact exit $?: $(cat "$tmp/compact.log")"
"$segd" segments retire --db "$tmp/db" 12 > "$tmp/retire.log" 2>&1 ||
  fail "segments retire exit $?: $(cat "$tmp/retire.log")"
# segd run again without the setting takes the store's
run_until_applied SEGD_STORE_HORIZON_S=86400
# an explicit conflicting value is still refused
SEGD_STORE_GRANULARITY_S=3600 "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" \
  --db "$tmp/db" 2> "$tmp/conflict.log" && fail "a conflicting granularity was accepted"
grep -q "store.granularity_s is 60 in .* but 3600 was configured" "$tmp/conflict.log" ||
  fail "conflict message: $(cat "$tmp/conflict.log")"
echo "cli_granularity: ok"
