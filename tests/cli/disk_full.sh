#!/usr/bin/env bash
# A full disk stalls segd, never crashes it (issue 9, 12). On a 64 MiB tmpfs:
# 1. backfill with the disk nearly full waits ("disk nearly full"), and
#    finishes with every event once space returns;
# 2. segd run with the disk nearly full commits nothing more, says why
#    (in its log and in /readyz: 503, reason "store"), and catches up to
#    every produced event once space returns (/readyz 200);
# 3. with the free-space check off, a write that hits ENOSPC stops backfill
#    with exit 1 (it used to abort in a RocksDB assertion, exit 134) and the
#    store reopens with everything written before.
# Fails, saying so, where tmpfs cannot be mounted (needs root or CAP_SYS_ADMIN).
# usage: disk_full.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
# the events are stamped around 2027-01-15 (--now 1800000000) while segd run
# keeps the wall clock: allow them past the from_future bound
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init full
fs=$tmp/fs
mkdir "$fs"
# lib.bash's cleanup, with the tmpfs unmounted once nothing uses it and
# before $tmp is removed
full_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  umount "$fs" 2>/dev/null || true
  lib_cleanup
}
trap full_cleanup EXIT
mount -t tmpfs -o size=64m tmpfs "$fs" 2> "$tmp/mount.err" ||
  fail "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): $(cat "$tmp/mount.err")"
now=1800000000
fill_to() { # leave about $1 MiB free
  rm -f "$fs/filler"
  local free=$(( $(stat -f -c '%a * %S' "$fs") / 1048576 ))
  dd if=/dev/zero of="$fs/filler" bs=1M count=$((free - $1)) status=none 2>/dev/null || true
}
segments_in() { "$segd" stats --db "$1" --now $now --json | sed 's/.*"live_segments":\([0-9]*\).*/\1/'; }

"$segd" generate --out "$tmp/seed.jsonl" --users 2000 --now $now >/dev/null
"$segd" backfill --db "$tmp/ref" --now $now --no-changes "$tmp/seed.jsonl" >/dev/null
want=$(segments_in "$tmp/ref")

# 1. backfill waits while less than 8 MiB are free, then finishes
fill_to 4
SEGD_STORE_MIN_FREE_MB=8 "$segd" backfill --db "$fs/db" --now $now --no-changes \
  "$tmp/seed.jsonl" > "$tmp/backfill.out" 2> "$tmp/backfill.log" &
bf=$!
pids+=($bf)
for _ in $(seq 100); do grep -q 'disk nearly full' "$tmp/backfill.log" && break; sleep 0.1; done
grep -q 'waiting: disk nearly full' "$tmp/backfill.log" || fail "backfill did not wait"
kill -0 $bf 2>/dev/null || fail "backfill ended on a full disk"
rm -f "$fs/filler"
wait $bf || fail "backfill after space returned: exit $?"
grep -q resumed "$tmp/backfill.log" || fail "no 'resumed'"
[ "$(segments_in "$fs/db")" = "$want" ] || fail "backfill: $(segments_in "$fs/db") segments, want $want"
rm -rf "$fs/db"

# 2. segd run stalls, then catches up
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 300 --now $now \
  > /dev/null 2> "$tmp/produce.log" || fail "produce"
"$segd" generate --out "$tmp/run.jsonl" --users 300 --now $now >/dev/null
"$segd" backfill --db "$tmp/runref" --now $now --no-changes "$tmp/run.jsonl" >/dev/null
want=$(segments_in "$tmp/runref")
fill_to 4
mport=$(/usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
SEGD_METRICS_LISTEN=127.0.0.1:$mport \
SEGD_STORE_MIN_FREE_MB=8 SEGD_STORE_HORIZON_S=$((40 * 86400)) "$segd" run --brokers "$brokers" \
  --topic "${tp}events" --group "${tp}g" --db "$fs/rundb" -X session.timeout.ms=6000 2> "$tmp/run.log" &
run=$!
pids+=($run)
for _ in $(seq 200); do grep -q 'disk nearly full' "$tmp/run.log" && break; sleep 0.1; done
grep -q 'disk nearly full' "$tmp/run.log" || fail "segd run did not stall"
kill -0 $run 2>/dev/null || fail "segd run died on a full disk"
# not ready while writes wait for disk space, and /readyz says why
code=$(curl -s -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$mport/readyz" || true)
[ "$code" = 503 ] && grep -q '"reason":"store","store":"disk nearly full' "$tmp/ready.json" ||
  fail "/readyz on a full disk: $code $(cat "$tmp/ready.json" 2>/dev/null)"
rm -f "$fs/filler"
got=0
for _ in $(seq 300); do
  got=$(segments_in "$fs/rundb" 2>/dev/null || echo 0)
  [ "$got" = "$want" ] && break
  sleep 0.2
done
[ "$got" = "$want" ] || fail "segd run after space returned: $got segments, want $want"
grep -q 'resumed after: disk nearly full' "$tmp/run.log" || fail "no resume logged"
for _ in $(seq 100); do
  code=$(curl -s -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$mport/readyz" || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
[ "$code" = 200 ] || fail "/readyz after space returned: $code $(cat "$tmp/ready.json")"
kill -TERM $run
wait $run || fail "segd run exit $? after SIGTERM"

# 3. without the check, ENOSPC stops backfill cleanly
rm -rf "$fs"/*
fill_to 2
set +e
SEGD_STORE_MIN_FREE_MB=0 "$segd" backfill --db "$fs/db" --now $now --no-changes \
  "$tmp/seed.jsonl" > "$tmp/enospc.out" 2> "$tmp/enospc.log"
rc=$?
set -e
[ $rc = 1 ] || fail "backfill on ENOSPC: exit $rc, want 1: $(tail -2 "$tmp/enospc.log")"
grep -q 'No space left on device' "$tmp/enospc.log" || fail "ENOSPC not reported"
rm -f "$fs/filler"
"$segd" stats --db "$fs/db" --now $now > /dev/null || fail "store does not reopen after ENOSPC"
echo "disk_full: backfill and segd run stalled and resumed exactly; ENOSPC exit 1, store reopens"
