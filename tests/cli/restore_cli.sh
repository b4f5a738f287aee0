#!/usr/bin/env bash
# Restore on assignment (issue 11): a segd run with an empty store and
# restore.from loads each assigned partition's snapshot unit and consumes
# only what came after the unit's offset; its store then equals a store that
# replayed the whole input. A corrupt unit is retried, then replayed
# (restore.fallback = replay); a missing unit is replayed at once.
# 1. A consumes batch 1 (4 partitions) and exports units to DEST.
# 2. batch 2 is produced; B (empty store, restore.from = DEST) logs
#    "restored p=P" for the 4 partitions, consumes batch 2 only, and equals
#    R (empty store, no restore: replays both batches) for every user.
# 3. unit 1 corrupted, unit 2 removed: C logs the failed attempts and the
#    replays, and equals R as well.
# usage: restore_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init restore
now=1800000000
users=200
# events stamped around --now while segd run keeps the wall clock
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000 SEGD_STORE_HORIZON_S=$((80 * 86400))
start_broker 4 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
produce() { # batch $1
  "$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --events 1500 \
    --seed "$1" --now $now > /dev/null 2> "$tmp/produce$1.log" || fail "produce $1"
}
all_users() { for u in $(seq 0 $((users - 1))); do printf 'u%010d\n' "$u"; done; }
# every user's JSON line from store $1; fails (xargs: 123) when a segd get does
reads() { all_users | xargs "$segd" get --db "$tmp/$1" --now $now --json 2> "$tmp/reads.err"; }
# run $1 = name until `$2` succeeds, then stop it; env settings follow
run_until() {
  local name=$1 done_cmd=$2
  shift 2
  env "$@" "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g-$name" \
    --db "$tmp/$name" -X session.timeout.ms=6000 2> "$tmp/$name.log" &
  local pid=$! ok=0
  pids+=($pid)
  for _ in $(seq 600); do
    if eval "$done_cmd"; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || fail "$name exited"
    sleep 0.2
  done
  kill -TERM $pid
  wait $pid || fail "$name exited with $?"
  [ $ok = 1 ] || fail "$name: never done ($done_cmd)"
}
consumed() { # the messages segd run $1 reported consumed, in its last line
  grep -o 'consumed=[0-9]*' "$tmp/$1.log" 2>/dev/null | tail -1 | cut -d= -f2 || true
}
final_consumed() { grep 'msg=final ' "$tmp/$1.log" | grep -o 'consumed=[0-9]*' | cut -d= -f2; }

produce 1
run_until a '[ "$(consumed a)" -ge 1500 ] 2>/dev/null'
[ "$(final_consumed a)" = 1500 ] || fail "a consumed $(final_consumed a)"
"$segd" snapshot export --db "$tmp/a" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/dest" --now $now > /dev/null \
  2> "$tmp/export.log" || fail "export"
[ "$(ls -d "$tmp"/dest/"${tp}"events/p-* | wc -l)" = 4 ] || fail "not 4 units"
produce 2
run_until r '[ "$(consumed r)" -ge 3000 ] 2>/dev/null'
ref=$(reads r) || fail "segd get of r: $(tail -3 "$tmp/reads.err")"
[ -n "$ref" ] || fail "no reads"
run_until b '[ "$(consumed b)" -ge 1500 ] 2>/dev/null' SEGD_RESTORE_FROM="$tmp/dest"
# only batch 2: the units carried batch 1 and the offsets after it
[ "$(final_consumed b)" = 1500 ] || fail "b consumed $(final_consumed b), want 1500"
for p in 0 1 2 3; do
  grep -q "restored p=$p users=[1-9][0-9]* segments=[1-9]" "$tmp/b.log" || fail "b: no restore of $p"
done
grep -q "replaying" "$tmp/b.log" && fail "b replayed a partition"
got=$(reads b) || fail "segd get of b: $(tail -3 "$tmp/reads.err")"
[ "$got" = "$ref" ] || fail "b differs from the replayed store"

# a corrupt unit (one byte flipped in its file) and a missing one
f=$(ls "$tmp"/dest/"${tp}"events/p-00001/*.avro | head -1)
python3 - "$f" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0xFF
open(sys.argv[1], "wb").write(b)
PY
rm "$tmp"/dest/"${tp}"events/p-00002/manifest.json
run_until c 'got=$(reads c) && [ "$got" = "$ref" ]' SEGD_RESTORE_FROM="$tmp/dest" SEGD_RESTORE_RETRIES=2
grep -q "restore of ${tp}events \[1\] failed (attempt 2).*SHA-256.*replaying it" "$tmp/c.log" ||
  fail "c: no fallback for the corrupt unit"
grep -q "no snapshot unit for ${tp}events \[2\]" "$tmp/c.log" || fail "c: missing unit not replayed"
for p in 0 3; do grep -q "restored p=$p " "$tmp/c.log" || fail "c: no restore of $p"; done

# 4. an instance exporting to the destination it restores from leaves alone
# a partition it is still restoring (restore.fallback = wait keeps unit 1
# failing): its exports carry the units it holds offsets for, and unit 1
# stays the corrupt one rather than becoming an empty unit without its
# offset, which the retry would then "restore" (tests/trials/fleet.py found this)
m1=$(cat "$tmp/dest/${tp}events/p-00001/manifest.json")
# (which other units an export carries depends on how far partition 2's
# replay got: not asserted)
exports() { grep -c 'snapshot: [0-9]* units' "$tmp/d.log" 2>/dev/null || true; }
# (done once unit 1 has been refused and two exports ran: fresh jobs go first)
run_until d '[ "$(exports)" -ge 2 ] 2>/dev/null && grep -q "restore of ${tp}events \[1\] failed" "$tmp/d.log"' \
  SEGD_RESTORE_FROM="$tmp/dest" \
  SEGD_RESTORE_FALLBACK=wait SEGD_SNAPSHOT_TO="$tmp/dest" SEGD_SNAPSHOT_INTERVAL=1
[ "$(cat "$tmp/dest/${tp}events/p-00001/manifest.json")" = "$m1" ] ||
  fail "d: exported unit 1 while it was restoring it"
grep -q "restore of ${tp}events \[1\] failed" "$tmp/d.log" || fail "d: unit 1 not refused"
grep -q "restored p=1 " "$tmp/d.log" && fail "d: restored unit 1"
echo "restore_cli: ok"
