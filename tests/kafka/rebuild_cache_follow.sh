#!/usr/bin/env bash
# A running `segd cache` follows a rebuild swap without a restart (issue 29
# finding 5; DESIGN §3.2 "Caches follow the swap", §5 "Replacing deltas"), on
# the real Kafka cluster. segd run consumes 200 users with the change stream
# on; a snapshot is exported and a cache loads it and tails the change topic
# (one process for the whole test, never restarted). Then the live store is
# made to differ from what the topics hold: `segd backfill` offline adds 20
# users the topics lack and an extra segment to a topic user, and events of
# 50 topic users older than the store's floor (now - store.horizon.s) are
# produced, which segd run refuses as too_late (dead-lettered). The cache
# gets the backfill's deltas (it was following). segd run stops, `segd
# rebuild` builds DB.rebuilt from the topic (the too_late events taken, the
# backfill absent), and the next segd run swaps it in, logging
# replacing_deltas=N > 0. Once its outbox is empty, the running cache equals
# `segd get --json` for every user: the backfilled ones gone (known: false),
# the extra segment gone, the late events' segments there. A produce after
# the swap reaches the cache too.
# usage: rebuild_cache_follow.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init rebuild_cache_follow
require_kafka
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps.sh)"
start_broker 4 events,events.dlq,segments.changes
now=$(date +%s)
users=200
# The seed workload's events are up to 30 days old: a 40-day horizon keeps
# them above the floor (as tests/cli/cache_cli.sh); the late produce is 45 days
# older than now, below it.
horizon=$((40 * 86400))
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
cat > "$tmp/segd.conf" <<CONF
brokers = $brokers
topics = ${tp}events
group = ${tp}g
db = $tmp/db
kafka.session.timeout.ms = 6000
store.horizon.s = $horizon
changes.topic = ${tp}segments.changes
metrics.listen = off
CONF
produced=0
produce() { # produce OUT ARGS...: adds what was delivered to $produced
  local out=$1 n
  shift
  "$segd" produce --brokers "$brokers" --topic "${tp}events" "$@" > "$tmp/$out" \
    2>> "$tmp/produce.log" || fail "produce $*: $(cat "$tmp/$out")"
  n=$(sed -n 's/^produced \([0-9]*\) events.*/\1/p' "$tmp/$out")
  [ "${n:-0}" -gt 0 ] || fail "produce $*: $(cat "$tmp/$out")"
  produced=$((produced + n))
}
start_run() {
  "$segd" run --config "$tmp/segd.conf" 2>> "$tmp/run.log" &
  run_pid=$!
  pids+=($run_pid)
}
stop_run() {
  kill -TERM $run_pid
  wait $run_pid || fail "segd run exit $?"
}
consumed() {
  "$segd" offsets show --db "$tmp/db" --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys
print(sum(o['next_offset'] for o in json.load(sys.stdin)['offsets'] if o['topic'] == '${tp}events'))" \
    2>/dev/null || echo 0
}
outbox() {
  "$segd" stats --db "$tmp/db" --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys; print(json.load(sys.stdin)['outbox_entries'])" 2>/dev/null || echo -1
}
settle() { # until segd run consumed all $produced events and published its outbox
  local c=0 o=-1
  for _ in $(seq 600); do
    kill -0 $run_pid 2>/dev/null || fail "segd run exited"
    c=$(consumed)
    [ "$c" -ge "$produced" ] && o=$(outbox) && [ "$o" = 0 ] && return 0
    sleep 0.2
  done
  fail "segd run: consumed $c of $produced events, outbox $o entries"
}

produce produce1.out --users $users --now $now
start_run
settle
"$segd" snapshot export --db "$tmp/db" --changes-topic "${tp}segments.changes" --to "$tmp/snap" \
  --now $now --horizon-s $horizon --format native > "$tmp/export.log" 2>&1 || fail "export"
grep -q "snapshot: 4 units of ${tp}events (4 partitions" "$tmp/export.log" ||
  fail "a unit per input partition: $(cat "$tmp/export.log")"

port=$(free_port)
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port --now $now --horizon-s $horizon 2> "$tmp/cache.log" &
cache_pid=$!
pids+=($cache_pid)
for _ in $(seq 150); do
  curl -sf "http://127.0.0.1:$port/healthz" > "$tmp/health.json" 2>/dev/null && break
  sleep 0.1
done
grep -q "\"status\":\"ok\".*\"users\":$users" "$tmp/health.json" ||
  fail "healthz: $(cat "$tmp/health.json" 2>/dev/null)"

# every id the test touches: the topic's users, the backfilled ones, one never seen
seq -f 'u%010g' 0 $((users - 1)) > "$tmp/ids"
seq -f 'bf%03g' 0 19 >> "$tmp/ids"
echo nobody >> "$tmp/ids"
# compare PHASE: the running cache answers every id as segd get --json does
# at the same clock, once both caught up (60 s); prints how many were known
compare() {
  kill -0 $cache_pid 2>/dev/null || fail "$1: the cache exited"
  /usr/bin/python3 - "$port" "$segd" "$tmp/db" $now "$tmp/ids" "$1" <<'PY'
import http.client, json, subprocess, sys, time
port, segd, db, now, ids_file, phase = sys.argv[1:7]
ids = open(ids_file).read().split()
deadline = time.time() + 60
while True:
    out = subprocess.run([segd, "get", "--db", db, "--now", now, "--json"] + ids,
                         capture_output=True, text=True, check=True).stdout
    want = [json.loads(l) for l in out.splitlines()]
    assert [w["user_id"] for w in want] == ids, phase
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
    bad = []
    for w in want:
        c.request("GET", "/v1/users/" + w["user_id"])
        r = c.getresponse()
        body = json.loads(r.read())
        if r.status != (200 if w["known"] else 404) or body != w:
            bad.append((w, r.status, body))
    if not bad or time.time() > deadline:
        break
    time.sleep(0.5)
def brief(w, st, body):
    ws = {x["id"] for x in w["segments"]}
    bs = {x["id"] for x in body.get("segments", [])}
    return (f"{w['user_id']}: store known={w['known']} {len(ws)} segments, cache {st} "
            f"known={body.get('known')} {len(bs)} segments, only in the store "
            f"{sorted(ws - bs)[:4]}, only in the cache {sorted(bs - ws)[:4]}")
if bad:
    sys.exit(f"{phase}: {len(bad)} of {len(ids)} users differ, e.g.\n  " +
             "\n  ".join(brief(*b) for b in bad[:3]))
print(f"{phase}: {len(ids)} users equal, {sum(w['known'] for w in want)} known")
PY
}
compare "after load" > "$tmp/cmp.out" || fail "cache != store after load"
grep -q "221 users equal, 200 known" "$tmp/cmp.out" || fail "after load: $(cat "$tmp/cmp.out")"

# the cache follows: more events for every user, changing what it loaded
"$segd" get --db "$tmp/db" --now $now --json $(head -$users "$tmp/ids") > "$tmp/before.json"
produce produce2.out --users $users --events 400 --seed 2 --now $now
settle
"$segd" get --db "$tmp/db" --now $now --json $(head -$users "$tmp/ids") > "$tmp/after.json"
! cmp -s "$tmp/before.json" "$tmp/after.json" || fail "the second produce changed no user"
compare "after tailing" > "$tmp/cmp.out" || fail "cache != store after tailing"
curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"changes_applied":[1-9]' ||
  fail "the cache applied no change: $(curl -s "http://127.0.0.1:$port/healthz")"

# segd run ends the store's history phase (three upkeeps 10 s apart caught
# up, DESIGN §3): from then on its floor refuses events older than now - horizon
floor=0
for _ in $(seq 600); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  floor=$("$segd" offsets show --db "$tmp/db" --json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['ingest_floor_ms'])" 2>/dev/null || echo 0)
  [ "$floor" -gt 0 ] && break
  sleep 0.2
done
[ "$floor" -gt $(( (now - horizon - 3600) * 1000 )) ] || fail "no ingest floor after catching up: $floor"

# differences a rebuild corrects. Offline: a backfill of users the topic
# lacks and of a segment the topic never gave u0000000005.
stop_run
t=$(( (now - 3600) * 1000 ))
for i in $(seq 0 19); do
  printf '{"user_id":"bf%03d","ts_ms":%d,"op":"UPSERT","segments":[{"segment_id":%d,"ttl_s":2592000}]}\n' \
    "$i" $((t + i)) $((700000 + i))
done > "$tmp/backfill.jsonl"
echo "{\"user_id\":\"u0000000005\",\"ts_ms\":$t,\"op\":\"UPSERT\",\"segments\":[{\"segment_id\":999999,\"ttl_s\":2592000}]}" \
  >> "$tmp/backfill.jsonl"
"$segd" backfill --db "$tmp/db" --now $now "$tmp/backfill.jsonl" > "$tmp/backfill.out" 2>&1 ||
  fail "backfill: $(cat "$tmp/backfill.out")"
# Events of u0..u49 45 to 75 days old: below the live store's floor (too_late,
# dead-lettered), taken by a fresh rebuild; a 60-day TTL keeps some live.
produce produce3.out --users 50 --events 400 --seed 3 --now $((now - 45 * 86400))
start_run
settle
# every late event dead-lettered as too_late
late_events=$(sed -n 's/^produced \([0-9]*\) events.*/\1/p' "$tmp/produce3.out")
dlq=$(timeout 60 kcat -C -b "$brokers" -t "${tp}events.dlq" -e -q -f '%h\n' 2>/dev/null |
  grep -c 'segd.error=too_late' || true)
[ "$dlq" = "$late_events" ] || fail "$dlq too_late dead letters in ${tp}events.dlq, want $late_events"
# before the rebuild the cache has the backfilled users: it got their deltas
compare "after backfill and late events" > "$tmp/cmp.out" || fail "cache != store after the backfill"
grep -q "221 users equal, 220 known" "$tmp/cmp.out" || fail "after backfill: $(cat "$tmp/cmp.out")"
stop_run
"$segd" get --db "$tmp/db" --now $now --json $(cat "$tmp/ids") > "$tmp/live.json"

"$segd" rebuild --config "$tmp/segd.conf" > "$tmp/rebuild.out" 2> "$tmp/rebuild.log" ||
  fail "rebuild exit $?: $(cat "$tmp/rebuild.out" "$tmp/rebuild.log")"
grep -q "^rebuilt $produced messages ($produced events, 0 dead-lettered) into $tmp/db.rebuilt" \
  "$tmp/rebuild.out" || fail "rebuild said: $(cat "$tmp/rebuild.out")"
"$segd" get --db "$tmp/db.rebuilt" --now $now --json $(cat "$tmp/ids") > "$tmp/rebuilt.json"
# the differences the swap must bring to the cache, read from both stores
/usr/bin/python3 - "$tmp/live.json" "$tmp/rebuilt.json" > "$tmp/diff.out" <<'PY' || fail "$(cat "$tmp/diff.out")"
import json, sys
live = [json.loads(l) for l in open(sys.argv[1])]
re = [json.loads(l) for l in open(sys.argv[2])]
segs = lambda u: {s["id"] for s in u["segments"]}
gone = [l["user_id"] for l, r in zip(live, re) if l["known"] and not r["known"]]
assert gone == ["bf%03d" % i for i in range(20)], gone
u5 = live[5]
assert u5["user_id"] == "u0000000005" and 999999 in segs(u5) and 999999 not in segs(re[5])
late = [l["user_id"] for l, r in zip(live[:50], re[:50]) if segs(r) - segs(l)]
assert len(late) >= 5, f"only {late} gained segments from the late events"
assert all(l == r for l, r in zip(live[50:200], re[50:200])), "users u50.. differ"
print(f"differ: {len(gone)} gone, u0000000005's backfilled segment, {len(late)} with late segments")
PY

# the swap, under the same running cache
start_run
for _ in $(seq 300); do grep -q "rebuilt store swapped in" "$tmp/run.log" && break; sleep 0.2; done
grep -q "msg=\"rebuilt store swapped in\" db=$tmp/db " "$tmp/run.log" ||
  fail "no swap logged: $(tail -3 "$tmp/run.log")"
settle
compare "after the swap" > "$tmp/cmp.out" || fail "the running cache did not follow the swap"
grep -q "221 users equal, 200 known" "$tmp/cmp.out" || fail "after the swap: $(cat "$tmp/cmp.out")"
# One replacing delta per user whose stored record differs: the 20 backfilled
# users and u0..u49, each of which got 8 late events (dead or alive, the
# rebuilt store keeps them: its W is 0, as is the live store's, whose history
# phase began less than store.gc.grace.s ago); the outbox was empty at the stop.
n=$(sed -n 's/.*msg="rebuilt store swapped in".* replacing_deltas=\([0-9]*\).*/\1/p' "$tmp/run.log")
[ "$n" = 70 ] || fail "replacing_deltas=$n, want 70 (20 backfilled users, u0..u49; $(cat "$tmp/diff.out"))"
"$segd" get --db "$tmp/db" --now $now --json $(cat "$tmp/ids") | cmp -s - "$tmp/rebuilt.json" ||
  fail "the swapped-in store differs from the rebuilt one"
# and it goes on following after the swap
produce produce4.out --users $users --events 200 --seed 4 --now $now
settle
compare "after the swap and more events" > "$tmp/cmp.out" || fail "cache != store after the swap and more events"
kill -0 $cache_pid 2>/dev/null || fail "the cache exited"
[ "$(grep -c 'msg="loaded ' "$tmp/cache.log")" = 1 ] || fail "the cache loaded more than once"
stop_run
echo "rebuild_cache_follow: a running cache followed the swap: $(cat "$tmp/diff.out"), replacing_deltas=$n; $produced events"
