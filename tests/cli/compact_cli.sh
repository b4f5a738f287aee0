#!/usr/bin/env bash
# Compact without surprises (issue 23): `segd compact` prints W and the
# ingest floor before and after; on a store still taking history (fresh or
# backfilled, W = 0, no floor) it keeps taking events of any age unless
# --end-history; a --now more than limits.max.clock.skew.ms ahead of the
# wall clock is refused (exit 2, W untouched) unless --allow-future-now.
# usage: compact_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-compact-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=$(date +%s)
w() { "$segd" offsets show --db "$tmp/db" --json | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["gc_watermark_ms"])'; }
old_event() { # one event $1 days old, for user $2
  printf '{"user_id":"%s","ts_ms":%d,"op":"UPSERT","segments":[{"segment_id":5,"ttl_s":864000}]}\n' \
    "$2" $(( (now - $1 * 86400) * 1000 )) > "$tmp/old-$2.jsonl"
  "$segd" backfill --db "$tmp/db" "$tmp/old-$2.jsonl" > "$tmp/old-$2.out" 2>&1
}
"$segd" compact --help | grep -q -- "--end-history" || fail "compact --help lacks --end-history"
"$segd" generate --users 30 --now "$now" --out "$tmp/seed.jsonl" > /dev/null
"$segd" backfill --db "$tmp/db" "$tmp/seed.jsonl" > /dev/null || fail "backfill"

# a backfilled store keeps taking history through a compaction at real time
"$segd" compact --db "$tmp/db" > "$tmp/c1.out" 2>&1 || fail "compact: $(cat "$tmp/c1.out")"
grep -q "^before: gc_watermark_ms 0, ingest floor 0 (none" "$tmp/c1.out" || fail "$(cat "$tmp/c1.out")"
grep -q "^after: gc_watermark_ms 0, ingest floor 0 (none" "$tmp/c1.out" || fail "$(cat "$tmp/c1.out")"
grep -q "still takes history of any age" "$tmp/c1.out" || fail "no note: $(cat "$tmp/c1.out")"
[ "$(w)" = 0 ] || fail "compact moved W on a store taking history: $(w)"
old_event 3 h1 || fail "a 3-day-old event refused after a compaction: $(cat "$tmp/old-h1.out")"

# a --now ahead of the wall clock by more than the skew: refused, nothing moved
set +e
"$segd" compact --db "$tmp/db" --end-history --now $((now + 3600)) > "$tmp/c2.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "compact --now 1 h ahead: exit $rc, want 2: $(cat "$tmp/c2.out")"
grep -q "ahead of the wall clock, more than limits.max.clock.skew.ms 600000" "$tmp/c2.out" ||
  fail "$(cat "$tmp/c2.out")"
[ "$(w)" = 0 ] || fail "a refused compact moved W: $(w)"
# the skew is the configured one
set +e
SEGD_LIMITS_MAX_CLOCK_SKEW_MS=7200000 "$segd" compact --db "$tmp/db" --now $((now + 3600)) \
  > "$tmp/c3.out" 2>&1; rc=$?
set -e
[ $rc -eq 0 ] || fail "compact --now within a 2 h skew: exit $rc: $(cat "$tmp/c3.out")"
[ "$(w)" = 0 ] || fail "compact moved W without --end-history: $(w)"

# asked to: W moves to now - horizon - grace and old events are refused
"$segd" compact --db "$tmp/db" --end-history > "$tmp/c4.out" 2>&1 || fail "$(cat "$tmp/c4.out")"
w4=$(w)
# the default horizon 7 d + grace 2 d: W = now - 9 d
[ "$w4" -gt $(( (now - 10 * 86400) * 1000 )) ] || fail "--end-history did not move W: $w4"
grep -q "^after: gc_watermark_ms $w4, ingest floor [0-9]* (W + grace" "$tmp/c4.out" ||
  fail "W after not printed: $(cat "$tmp/c4.out")"
set +e
old_event 8 h2; rc=$?
set -e
[ $rc -eq 3 ] || fail "an 8-day-old event after --end-history: exit $rc"
grep -q "too_late: .* is below the ingest floor [0-9]* (W + grace: gc_watermark_ms $w4" \
  "$tmp/old-h2.out" || fail "too_late names no floor: $(cat "$tmp/old-h2.out")"
echo "compact_cli: history kept without --end-history, future --now refused, W $w4 after --end-history"
