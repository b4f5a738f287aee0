#!/usr/bin/env bash
# End-to-end CLI test: generate + backfill + get + compact + stats, and a file
# with malformed lines (reported with file:line, skipped, exit status 3).
# usage: cli_backfill.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000

# 1. a generated seed file applies cleanly
"$segd" generate --out "$tmp/seed.jsonl" --users 50 --now $now >/dev/null
[ "$(wc -l < "$tmp/seed.jsonl")" = 2500 ] || fail "generate wrote the wrong count"
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" > "$tmp/out" || fail "backfill exit $?"
grep -q "applied 2500 events (50000 segments), skipped 0" "$tmp/out" || fail "backfill summary: $(cat "$tmp/out")"
"$segd" get --db "$tmp/db" --now $now --json u0000000007 > "$tmp/u7.json"
/usr/bin/python3 - "$tmp/u7.json" "$tmp/seed.jsonl" $now <<'PY'
import json, sys
got = json.loads(open(sys.argv[1]).read())
now = int(sys.argv[3])
best = {}
for line in open(sys.argv[2]):
    ev = json.loads(line)
    if ev["user_id"] != "u0000000007":
        continue
    for s in ev["segments"]:
        exp = -(-(ev["ts_ms"] // 1000 + s["ttl_s"]) // 3600) * 3600
        t = (ev["ts_ms"], exp, s["flags"], s["partner_id"])
        best[s["segment_id"]] = max(best.get(s["segment_id"], t), t)
want = [{"id": k, "expires_at": v[1], "ts_ms": v[0], "flags": v[2], "partner_id": v[3]}
        for k, v in sorted(best.items()) if v[1] > now]
assert got["user_id"] == "u0000000007", got
assert got["segments"] == want, (len(got["segments"]), len(want))
assert 0 < len(want) < 1000
PY

# 2. hand-written events: remove, erase, filters, count range
cat > "$tmp/hand.jsonl" <<'JL'
{"user_id":"alice","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":12,"ttl_s":86400,"flags":1,"partner_id":7},{"segment_id":13,"ttl_s":3600},{"segment_id":500,"ttl_s":864000}]}
{"user_id":"alice","ts_ms":1799990001000,"op":"REMOVE","segments":[{"segment_id":13}]}
{"user_id":"bob","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":1,"ttl_s":86400}]}
{"user_id":"bob","ts_ms":1799990005000,"op":"ERASE_USER","segments":[]}
JL
"$segd" backfill --db "$tmp/db" --now $now "$tmp/hand.jsonl" >/dev/null
out=$("$segd" get --db "$tmp/db" --now $now --json alice bob)
expect='{"user_id":"alice","known":true,"segments":[{"id":12,"expires_at":1800079200,"ts_ms":1799990000000,"flags":1,"partner_id":7},{"id":500,"expires_at":1800856800,"ts_ms":1799990000000,"flags":0,"partner_id":0}]}
{"user_id":"bob","known":true,"segments":[]}'
[ "$out" = "$expect" ] || fail "get alice/bob: $out"
out=$("$segd" get --db "$tmp/db" --now $now --json --expiring-after 1800100000 alice)
echo "$out" | grep -q '"id":500' && ! echo "$out" | grep -q '"id":12' || fail "--expiring-after: $out"
out=$("$segd" get --db "$tmp/db" --now $now --json --updated-since 1799990000001 alice)
echo "$out" | grep -q '"segments":\[\]' || fail "--updated-since: $out"
out=$("$segd" get --db "$tmp/db" --now $now --json --count-range 0:100 alice)
echo "$out" | grep -q '"count_range":{"from":0,"to":100,"count":1}' || fail "--count-range: $out"
# a later clock: segment 12 expired
out=$("$segd" get --db "$tmp/db" --now 1800080000 --json alice)
echo "$out" | grep -q '"id":12' && fail "expired segment returned: $out"

# 3. malformed lines: reported with file:line, skipped, exit 3, the rest applied
cat > "$tmp/bad.jsonl" <<'JL'
{"user_id":"carol","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":1,"ttl_s":86400}]}
this is not json
{"user_id":"carol","ts_ms":1799990000000,"op":"FLY","segments":[]}
{"user_id":"carol","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":-1,"ttl_s":86400}]}
{"user_id":"carol","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":2,"ttl_s":0}]}
{"user_id":"","ts_ms":1799990000000,"op":"UPSERT","segments":[]}
{"ts_ms":1799990000000,"op":"UPSERT","segments":[]}
{"user_id":"carol","ts_ms":1799990000000,"op":"UPSERT","segments":[{"segment_id":3,"ttl_s":86400}]}
JL
set +e
"$segd" backfill --db "$tmp/db" --now $now "$tmp/bad.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ $rc = 3 ] || fail "malformed file: exit $rc, want 3"
for l in 2 3 4 5 6 7; do grep -q "bad.jsonl:$l: " "$tmp/err" || fail "line $l not reported: $(cat "$tmp/err")"; done
grep -q "bad.jsonl:1:\|bad.jsonl:8:" "$tmp/err" && fail "a good line was reported"
grep -q "skipped 6" "$tmp/out" || fail "summary: $(cat "$tmp/out")"
out=$("$segd" get --db "$tmp/db" --now $now --json carol)
echo "$out" | grep -q '"id":1,' && echo "$out" | grep -q '"id":3,' || fail "good lines not applied: $out"

# a directory is not input: reported, skipped, exit 3 (it used to read as empty, exit 0)
mkdir "$tmp/adir"
set +e
"$segd" backfill --db "$tmp/db" --now $now "$tmp/adir" > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ $rc = 3 ] && grep -q "adir: not a regular file" "$tmp/err" || fail "directory: exit $rc, $(cat "$tmp/err")"

# 4. compaction past every expiry and the horizon leaves no entry, only bob's
# erase marker (a record with no entries): W never drops an erasure, since an
# older event of bob's can come back from a topic, unit or file (DESIGN §3.1)
"$segd" compact --db "$tmp/db" --now 1900000000 --allow-future-now --end-history >/dev/null
"$segd" stats --db "$tmp/db" --json > "$tmp/stats"
grep -q '"records":1,' "$tmp/stats" && grep -q '"stored_entries":0,' "$tmp/stats" ||
  fail "after compaction, want bob's erase marker alone: $(cat "$tmp/stats")"
out=$("$segd" get --db "$tmp/db" --now $now --json bob)
echo "$out" | grep -q '"known":true' && echo "$out" | grep -q '"segments":\[\]' ||
  fail "bob's erase marker is not bob's record: $out"

# 4b. issue 9: the compaction started the GC watermark W (now - 216 h, the
# default horizon 7 d + grace 2 d): events older than W + grace (now - 168 h)
# are too_late, those more than 10 min
# ahead are from_future; both reported with file:line, skipped, exit 3
late=1900000000000
cat > "$tmp/late.jsonl" <<JL
{"user_id":"dave","ts_ms":$((late - 3600000)),"op":"UPSERT","segments":[{"segment_id":1,"ttl_s":86400}]}
{"user_id":"dave","ts_ms":$((late - 174 * 3600000)),"op":"UPSERT","segments":[{"segment_id":2,"ttl_s":864000}]}
{"user_id":"dave","ts_ms":$((late + 11 * 60000)),"op":"UPSERT","segments":[{"segment_id":3,"ttl_s":86400}]}
{"user_id":"dave","ts_ms":$((late + 5 * 60000)),"op":"UPSERT","segments":[{"segment_id":4,"ttl_s":86400}]}
{"user_id":"dave","ts_ms":$((late - 168 * 3600000)),"op":"UPSERT","segments":[{"segment_id":5,"ttl_s":864000}]}
JL
set +e
"$segd" backfill --db "$tmp/db" --now 1900000000 "$tmp/late.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ $rc = 3 ] || fail "late/future file: exit $rc, want 3: $(cat "$tmp/err")"
grep -q "late.jsonl:2: too_late" "$tmp/err" || fail "too_late not reported: $(cat "$tmp/err")"
grep -q "late.jsonl:3: from_future" "$tmp/err" || fail "from_future not reported: $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/err")" = 2 ] || fail "more than two lines refused: $(cat "$tmp/err")"
grep -q "skipped 2" "$tmp/out" || fail "summary: $(cat "$tmp/out")"
out=$("$segd" get --db "$tmp/db" --now 1900000000 --json dave)
for id in 1 4 5; do echo "$out" | grep -q "\"id\":$id," || fail "segment $id not applied: $out"; done
echo "$out" | grep -q '"id":2,\|"id":3,' && fail "a refused event was applied: $out"
# a fresh store (no watermark yet) takes history of any age: a bulk load
"$segd" backfill --db "$tmp/fresh" --now 1900000000 "$tmp/hand.jsonl" > "$tmp/out" ||
  fail "bulk load of old history into a fresh store: exit $?"
grep -q "skipped 0" "$tmp/out" || fail "fresh store refused history: $(cat "$tmp/out")"

# 5. usage errors are exit 2
set +e
"$segd" get --db "$tmp/db" --now notanumber alice >/dev/null 2>&1; [ $? = 2 ] || fail "bad --now not exit 2"
"$segd" nosuchcommand >/dev/null 2>&1; [ $? = 2 ] || fail "unknown command not exit 2"
# 6. a broken run configuration is a clear error at start, naming the key
printf 'brokers = 127.0.0.1:1\nbatch.max.mesages = 5\n' > "$tmp/bad.conf"
out=$("$segd" run --topic t --group g --db "$tmp/rundb" --config "$tmp/bad.conf" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "bad.conf:2: unknown configuration key 'batch.max.mesages'" || fail "bad config: $rc $out"
out=$("$segd" run --brokers 127.0.0.1:1 --topic t --group g --db "$tmp/rundb" -X no.such.prop=1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "no.such.prop" || fail "bad -X: $rc $out"
out=$(SEGD_BATCH_MAX_MS=never "$segd" run --brokers 127.0.0.1:1 --topic t --group g --db "$tmp/rundb" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "batch.max.ms" || fail "bad env: $rc $out"
set -e
echo "cli_backfill: ok"
