#!/usr/bin/env bash
# `segd stats` says when "bytes per live segment" means nothing: before a
# flush (the data sits in memtables, outside the SST bytes it divides) and
# on a store so small that per-file overheads, not records, make the figure
# (issue 23). On a store of some size it is SST bytes / live segments. Its
# users (live segments) and records (known users), and `segd get` of an
# unknown user (issue 30).
# usage: cli_stats_figure.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-stats-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=$(( $(date +%s) - 60 ))
field() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

# 1. a few writes, never flushed: the SST bytes are 0 while 1600 segments live
"$segd" generate --out "$tmp/tiny.jsonl" --users 3 --now $now >/dev/null
"$segd" backfill --db "$tmp/tiny" --now $now "$tmp/tiny.jsonl" >/dev/null
"$segd" stats --db "$tmp/tiny" --now $now --json > "$tmp/s1.json" || fail "stats exit $?"
[ "$(field "$tmp/s1.json" sst_bytes)" = 0 ] && [ "$(field "$tmp/s1.json" live_segments)" -gt 0 ] ||
    fail "precondition: expected live segments and no SST yet: $(cat "$tmp/s1.json")"
[ "$(field "$tmp/s1.json" bytes_per_live_segment_verdict)" = not_flushed ] ||
    fail "unflushed store not flagged: $(cat "$tmp/s1.json")"
"$segd" stats --db "$tmp/tiny" --now $now > "$tmp/s1.txt"
grep -q '^bytes per live segment n/a (not flushed: 150 writes in memtables' "$tmp/s1.txt" ||
    fail "text stats before a flush: $(grep 'per live' "$tmp/s1.txt")"

# 1b. the words match what is counted (issue 30): an erased user keeps its
# record (a cache counts it among its users) but has no live segment; a user
# without a record is said to be unknown, not to have 0 live segments
"$segd" erase --db "$tmp/tiny" u0000000001 >/dev/null
"$segd" stats --db "$tmp/tiny" --now $now > "$tmp/s1b.txt"
grep -qx 'users (live segments)  2' "$tmp/s1b.txt" && grep -qx 'records (known users)  3' "$tmp/s1b.txt" ||
    fail "stats' users and records: $(head -2 "$tmp/s1b.txt")"
"$segd" get --db "$tmp/tiny" --now $now nobody u0000000001 > "$tmp/get.txt"
grep -qx 'nobody: unknown (no record in this store), 0 live segments' "$tmp/get.txt" ||
    fail "get of an unknown user: $(cat "$tmp/get.txt")"
grep -qx 'u0000000001: 0 live segments' "$tmp/get.txt" || fail "get of an erased user: $(cat "$tmp/get.txt")"

# 2. flushed and compacted, but three users: the files' fixed parts dominate
"$segd" compact --db "$tmp/tiny" --now $now >/dev/null
"$segd" stats --db "$tmp/tiny" --now $now --json > "$tmp/s2.json"
[ "$(field "$tmp/s2.json" sst_bytes)" -gt 0 ] || fail "compact left no SST: $(cat "$tmp/s2.json")"
[ "$(field "$tmp/s2.json" bytes_per_live_segment_verdict)" = too_small ] ||
    fail "tiny store not flagged: $(cat "$tmp/s2.json")"
"$segd" stats --db "$tmp/tiny" --now $now | grep -q '^bytes per live segment [0-9.]*, too small a store' ||
    fail "text stats on a tiny store: $("$segd" stats --db "$tmp/tiny" --now $now | grep 'per live')"

# 3. 2000 users, compacted: the figure stands and is SST bytes / live segments
"$segd" generate --out "$tmp/seed.jsonl" --users 2000 --now $now >/dev/null
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" >/dev/null
"$segd" compact --db "$tmp/db" --now $now --end-history >/dev/null
"$segd" stats --db "$tmp/db" --now $now --json > "$tmp/s3.json"
/usr/bin/python3 - "$tmp/s3.json" <<'PY' || fail "seed store: $(cat "$tmp/s3.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["bytes_per_live_segment_verdict"] == "ok", s
assert s["memtable_entries"] == 0 and s["live_segments"] > 1000000, s
assert abs(s["bytes_per_live_segment"] - s["sst_bytes"] / s["live_segments"]) < 0.001, s
assert 0 < s["sst_data_bytes"] <= s["sst_bytes"], s
PY
echo "cli_stats_figure: ok"
