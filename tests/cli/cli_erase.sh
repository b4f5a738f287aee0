#!/usr/bin/env bash
# `segd erase`: an operator's erasure is ERASE_USER (DESIGN §3): the user's
# entries up to --at-ms are dead, other users are untouched, later events
# recreate the user, a bad id or a too_late time writes nothing, and the
# erasure reaches an edge cache through the outbox and the change stream
# (segd run publishes it; segd cache loads a snapshot taken before the
# erasure and joins the deltas).
# usage: cli_erase.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init erase
# the broker (and so $tp, the topic prefix) first: the snapshot below names
# the input topic segd run consumes later
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
now=$(date +%s)
users=20
live() { "$segd" get --db "$tmp/db" --now $now --json "$1" |
         /usr/bin/python3 -c "import json,sys;print(len(json.load(sys.stdin)['segments']))"; }
outbox() { "$segd" stats --db "$tmp/db" | sed -n 's/^unpublished outbox *\([0-9]*\) entries.*/\1/p'; }

"$segd" generate --users $users --now $now --out "$tmp/in.json" > /dev/null
"$segd" backfill --db "$tmp/db" "$tmp/in.json" > "$tmp/backfill.log" || fail "backfill"
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" --topic "${tp}events" --buckets 2 --now $now \
  > "$tmp/export.log" 2>&1 || fail "export"
[ "$(live u0000000003)" -gt 0 ] || fail "u0000000003 has no segments before the erase"
"$segd" get --db "$tmp/db" --now $now --json u0000000004 > "$tmp/other.before"
before=$(outbox)

# usage errors and refusals write nothing
set +e
"$segd" erase --db "$tmp/db" u0000000003 $'\xff' 2> "$tmp/bad.log"; rc=$?
"$segd" erase --db "$tmp/db" 2>/dev/null; rc2=$?
set -e
[ $rc -eq 2 ] || fail "invalid user id: exit $rc, want 2"
grep -q "not valid UTF-8" "$tmp/bad.log" || fail "no reason for the bad id: $(cat "$tmp/bad.log")"
[ $rc2 -eq 2 ] || fail "no user: exit $rc2, want 2"
# a mistyped --db is refused, not turned into a new store that takes the erasure
set +e
"$segd" erase --db "$tmp/typo" u0000000003 2> "$tmp/typo.log"; rc=$?
set -e
[ $rc -eq 1 ] || fail "missing store: exit $rc, want 1"
grep -q "is not a segd store" "$tmp/typo.log" || fail "missing store: $(cat "$tmp/typo.log")"
[ ! -e "$tmp/typo" ] || fail "erase created a store at a mistyped --db"
# a store held by another writer (RocksDB's LOCK) is refused by name
/usr/bin/python3 -c 'import fcntl,sys,time
f = open(sys.argv[1], "r+"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' \
  "$tmp/db/LOCK" > "$tmp/lock.out" &
lock_pid=$!
pids+=($lock_pid)
for _ in $(seq 50); do grep -q locked "$tmp/lock.out" && break; sleep 0.1; done
set +e
"$segd" erase --db "$tmp/db" u0000000003 2> "$tmp/locked.log"; rc=$?
set -e
kill $lock_pid; wait $lock_pid 2>/dev/null || true
[ $rc -eq 1 ] || fail "locked store: exit $rc, want 1"
grep -q "is in use: another process holds its RocksDB lock $tmp/db/LOCK" "$tmp/locked.log" ||
  fail "locked store: $(cat "$tmp/locked.log")"
[ "$(live u0000000003)" -gt 0 ] || fail "a refused erase erased u0000000003"
[ "$(outbox)" = "$before" ] || fail "a refused erase wrote an outbox entry"

"$segd" erase --db "$tmp/db" u0000000003 > "$tmp/erase.out" || fail "erase exit $?"
grep -q "^erased 1 users before ts_ms " "$tmp/erase.out" || fail "erase said: $(cat "$tmp/erase.out")"
[ "$(live u0000000003)" -eq 0 ] || fail "u0000000003 still has segments after the erase"
"$segd" get --db "$tmp/db" --now $now --json u0000000004 | cmp -s - "$tmp/other.before" ||
  fail "erasing u0000000003 changed u0000000004"
[ "$(outbox)" -eq $((before + 1)) ] || fail "outbox $(outbox), want $((before + 1)): no change entry"

# a later event recreates the user (an erasure is not a ban)
erased_ms=$(sed -n 's/^erased 1 users before ts_ms \([0-9]*\)$/\1/p' "$tmp/erase.out")
printf '{"user_id":"u0000000003","ts_ms":%d,"op":"UPSERT","segments":[{"segment_id":7,"ttl_s":86400}]}\n' \
  $((erased_ms + 1)) > "$tmp/later.json"
"$segd" backfill --db "$tmp/db" "$tmp/later.json" > /dev/null || fail "later event"
[ "$(live u0000000003)" -eq 1 ] || fail "a later event did not recreate u0000000003"

# the erasure travels the change stream: a cache from the older snapshot
# tails it and ends equal to the store, u0000000003 included
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
  -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 200); do [ "$(outbox)" = 0 ] 2>/dev/null && break; sleep 0.1; done
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
[ "$(outbox)" = 0 ] || fail "segd run left $(outbox) outbox entries"
port=$(/usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port --now $((now + 1)) 2> "$tmp/cache.log" &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" 2>/dev/null | grep -q '"status":"ok"' && break
  sleep 0.1
done
/usr/bin/python3 - "$port" "$segd" "$tmp/db" $((now + 1)) $users <<'PY' || fail "cache != store"
import http.client, json, subprocess, sys
port, segd, db, now, users = sys.argv[1:6]
ids = ["u%010d" % i for i in range(int(users))]
out = subprocess.run([segd, "get", "--db", db, "--now", now, "--json"] + ids,
                     capture_output=True, text=True, check=True).stdout
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
for w in map(json.loads, out.splitlines()):
    c.request("GET", "/v1/users/" + w["user_id"])
    body = json.loads(c.getresponse().read())
    assert body.get("known") is True, w["user_id"]  # every user here has a history
    assert body == w, (w["user_id"], len(body["segments"]), len(w["segments"]))
    if w["user_id"] == "u0000000003":
        assert [s["id"] for s in body["segments"]] == [7], body
print("cache equals store for", users, "users")
PY

# once the GC watermark has moved (here by a full compaction at a clock 10
# days ahead), an erasure older than W + grace could miss entries already
# joined away: refused, nothing written
"$segd" compact --db "$tmp/db" --now $((now + 10 * 86400)) --allow-future-now --end-history > /dev/null || fail "compact"
n3=$(live u0000000003)
set +e
"$segd" erase --db "$tmp/db" --at-ms $((now * 1000)) u0000000003 2> "$tmp/late.log"; rc=$?
set -e
[ $rc -eq 2 ] || fail "too_late erase: exit $rc, want 2"
grep -q "too_late" "$tmp/late.log" || fail "too_late erase: $(cat "$tmp/late.log")"
[ "$(live u0000000003)" = "$n3" ] || fail "a too_late erase changed u0000000003"
echo "cli_erase: ok"
