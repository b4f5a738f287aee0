#!/usr/bin/env bash
# The edge cache as a process: a broker (tests/support/lib.bash), `segd produce`, `segd run`
# (publishing the change stream), `segd snapshot export` beside it (native
# records_format; segd run's periodic ones too, snapshot.format), then
# `segd cache` loads the snapshot's units (one per input partition), tails
# the changes from their minimum positions and serves HTTP: every
# user's GET /v1/users/{id} equals `segd get --json` at the same clock, first
# right after start, then again after more events went through segd run.
# usage: cache_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init cache
now=$(date +%s)
users=200
# The seed workload's events are up to 30 days old: late arrivals far beyond
# the default 7-day horizon, whose outcome would depend on when compaction ran
# (DESIGN §3). A 40-day horizon everywhere keeps store and cache exact.
horizon=$((40 * 86400))
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }

start_broker 4 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"

"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now \
  > "$tmp/produce1.out" 2> "$tmp/produce.log" || fail "produce"
SEGD_STORE_HORIZON_S=$horizon SEGD_SNAPSHOT_INTERVAL=1 SEGD_SNAPSHOT_TO="$tmp/periodic" \
  SEGD_SNAPSHOT_BUCKETS=2 SEGD_SNAPSHOT_FORMAT=native "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" \
  --db "$tmp/db" -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
wait_users() { # until segd get sees the last user with $1 or more live segments
  for _ in $(seq 300); do
    n=$("$segd" get --db "$tmp/db" --now $now --json "$2" 2>/dev/null |
        /usr/bin/python3 -c "import json,sys;print(len(json.load(sys.stdin)['segments']))" 2>/dev/null || echo 0)
    [ "$n" -ge "$1" ] && return 0
    sleep 0.2
  done
  fail "store never reached $1 segments for $2"
}
wait_users 100 u0000000199
sleep 1 # let the publisher acknowledge the last batches
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" --now $now \
  --horizon-s $horizon --format native > "$tmp/export.log" 2>&1 || fail "export"
grep -q "snapshot: 4 units of ${tp}events (4 partitions" "$tmp/export.log" ||
  fail "a unit per input partition: $(cat "$tmp/export.log")"
[ "$(grep -l '"records_format": "native"' "$tmp/snap/${tp}events"/p-*/manifest.json | wc -l)" = 4 ] ||
  fail "not native units"

port=$(free_port)
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port --now $now --horizon-s $horizon --batch-max 50 2> "$tmp/cache.log" &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" > "$tmp/health.json" 2>/dev/null && break
  sleep 0.1
done
grep -q '"status":"ok"' "$tmp/health.json" || fail "healthz: $(cat "$tmp/health.json" 2>/dev/null)"
grep -q "\"users\":$users" "$tmp/health.json" || fail "healthz users: $(cat "$tmp/health.json")"
grep -q "msg=\"loaded 4 units of ${tp}events\" units=4 users=$users " "$tmp/cache.log" || fail "cache load: $(cat "$tmp/cache.log")"
grep -q '"snapshot_units":4' "$tmp/health.json" || fail "healthz units: $(cat "$tmp/health.json")"

compare() { # every user: cache == store at the same clock, once both caught up
  /usr/bin/python3 - "$port" "$segd" "$tmp/db" $now $users "$1" <<'PY'
import http.client, json, subprocess, sys, time
port, segd, db, now, users, phase = sys.argv[1:7]
ids = ["u%010d" % i for i in range(int(users))]
deadline = time.time() + 60
while True:  # segd run and the cache both work asynchronously
    out = subprocess.run([segd, "get", "--db", db, "--now", now, "--json"] + ids,
                         capture_output=True, text=True, check=True).stdout
    want = [json.loads(l) for l in out.splitlines()]
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
    bad = []
    for w in want:
        c.request("GET", "/v1/users/" + w["user_id"])
        r = c.getresponse()
        body = json.loads(r.read())
        if r.status != 200 or body.get("known") is not True or body != w:
            bad.append(w["user_id"])
    if not bad or time.time() > deadline:
        break
    time.sleep(0.5)
assert not bad, f"{phase}: {len(bad)} users differ, e.g. {bad[:3]}"
assert len(want) == int(users) and sum(len(w["segments"]) for w in want) > 0
c.request("GET", "/v1/users/nobody")
r = c.getresponse()
assert r.status == 404 and json.loads(r.read()) == {"user_id": "nobody", "known": False,
                                                     "segments": []}
c.request("GET", "/nope")
assert c.getresponse().status == 404
print(f"{phase}: {len(want)} users equal")
PY
}
compare "after load" || fail "cache != store after load"

# the bidders' API (cache/http.h): filters as segd get's flags, 400s, batch
# in request order with known per user, 413 above --batch-max 50
/usr/bin/python3 - "$port" "$segd" "$tmp/db" $now <<'PY' || fail "HTTP API"
import http.client, json, subprocess, sys
port, segd, db, now = sys.argv[1:5]
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
def call(method, path, body=None):
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    assert r.getheader("Content-Length") == str(len(data)), r.getheaders()
    return r.status, json.loads(data)
def get(users, *flags):
    out = subprocess.run([segd, "get", "--db", db, "--now", now, "--json", *flags] + users,
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines()]
ids = ["u%010d" % i for i in (7, 3, 150, 42)]
after, since = int(now) + 5 * 86400, (int(now) - 10 * 86400) * 1000
for flags, query in ((["--expiring-after", str(after)], "expiring_after=%d" % after),
                     (["--updated-since", str(since)], "updated_since_ms=%d" % since),
                     (["--count-range", "100:5000"], "count_range=100:5000")):
    for w in get(ids, *flags):
        st, body = call("GET", "/v1/users/%s?%s" % (w["user_id"], query))
        assert st == 200 and body.get("known") is True and body == w, (query, body, w)
everything = get(ids)
assert any(len(a["segments"]) != len(w["segments"])
           for a, w in zip(get(ids, "--expiring-after", str(after)), everything))
st, body = call("GET", "/v1/users/u0000000007?expiring_after=1&colour=red&size=2")
assert st == 400 and body["parameters"] == ["colour", "size"], body
st, body = call("GET", "/v1/users/u0000000007?count_range=9")
assert st == 400 and body["parameters"] == ["count_range"], body
st, body = call("GET", "/v1/users/%FFab")
assert st == 400 and body["error"] == "bad user id", (st, body)
st, body = call("GET", "/v1/users/a%22b%5Cc%09%01%C3%A9")
assert st == 404 and body == {"user_id": 'a"b\\c\t\x01\u00e9', "known": False, "segments": []}, body
req = {"users": ids[:2] + ["nobody"] + ids[2:], "expiring_after": after,
       "count_range": "100:5000"}
st, body = call("POST", "/v1/users:batch", json.dumps(req))
want = get(ids, "--expiring-after", str(after), "--count-range", "100:5000")
want = want[:2] + [{"user_id": "nobody", "known": False, "segments": [],
                    "count_range": {"from": 100, "to": 5000, "count": 0}}] + want[2:]
assert st == 200 and [r.get("known") for r in body["results"]] == [True] * 2 + [False] + [True] * 2
assert body["results"] == want, body
st, body = call("POST", "/v1/users:batch", json.dumps({"users": ["u%d" % i for i in range(51)]}))
assert st == 413 and "limit of 50" in body["error"], (st, body)
st, body = call("POST", "/v1/users:batch", json.dumps({"users": ["x" * 200] * 200}))
assert st == 413, (st, body)
for bad in ('{"users": [', '{"users": ["a"], "colour": 1}', '{"users": [1]}', '[]'):
    st, body = call("POST", "/v1/users:batch", bad)
    assert st == 400, (bad, st, body)
st, body = call("POST", "/v1/users:batch", '{"users": []}')
assert st == 200 and body == {"results": []}
print("HTTP API: filters, 400s, batch order and known, 413 ok")
PY
# keep-alive: curl reuses one connection for two URLs
curl -sv "http://127.0.0.1:$port/v1/users/u0000000001" "http://127.0.0.1:$port/v1/users/u0000000002" \
  -o /dev/null -o /dev/null 2> "$tmp/curl.txt" || fail "curl"
grep -q "Re-using existing connection" "$tmp/curl.txt" || fail "no keep-alive: $(cat "$tmp/curl.txt")"
grep -qi "content-length" "$tmp/curl.txt" || fail "no Content-Length"
! grep -qi "transfer-encoding: chunked" "$tmp/curl.txt" || fail "chunked"

# more events: the cache follows the change stream
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now --seed 2 \
  > "$tmp/produce2.out" 2>> "$tmp/produce.log" || fail "second produce"
# Until the store has consumed both produces (each event is one message):
# a segment count alone can already hold before the second produce arrives,
# and then store and cache agree without the cache having tailed anything.
produced=$(cat "$tmp/produce1.out" "$tmp/produce2.out" | sed -n 's/^produced \([0-9]*\) events.*/\1/p' |
  awk '{n += $1} END {print n + 0}')
[ "$produced" -gt 0 ] || fail "produce counts: $(cat "$tmp/produce1.out" "$tmp/produce2.out")"
for _ in $(seq 300); do
  consumed=$("$segd" offsets show --db "$tmp/db" --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys
print(sum(o['next_offset'] for o in json.load(sys.stdin)['offsets'] if o['topic'] == '${tp}events'))" \
    2>/dev/null || echo 0)
  [ "$consumed" -ge "$produced" ] && break
  sleep 0.2
done
[ "$consumed" -ge "$produced" ] || fail "store consumed $consumed of $produced events"
compare "after tailing" || fail "cache != store after tailing"
curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"changes_applied":[1-9]' ||
  fail "healthz shows no applied changes"
# /readyz and /metrics on the same server (docs/metrics.md): the lookups
# the comparisons above made (each user at least twice, and "nobody"), each
# timed, and the tail caught up
curl -sf "http://127.0.0.1:$port/readyz" > "$tmp/ready.json" ||
  fail "readyz: $(curl -s "http://127.0.0.1:$port/readyz")"
grep -q '"ready":true,"reason":null,"lag":0,' "$tmp/ready.json" || fail "readyz: $(cat "$tmp/ready.json")"
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics.txt" || fail "no /metrics"
for want in "segd_cache_users $users" 'segd_cache_tail_lag_messages 0' \
    'segd_cache_http_requests_total{route="batch",code="413"} 2' \
    'segd_cache_http_requests_total{route="user",code="404"} 3' \
    '# TYPE segd_cache_http_request_seconds histogram' 'segd_cache_http_batch_users_count 3' \
    'segd_cache_snapshot_units 4' '# TYPE segd_cache_lookup_seconds histogram'; do
  grep -qxF "$want" "$tmp/metrics.txt" || fail "/metrics lacks '$want': $(grep segd_cache "$tmp/metrics.txt")"
done
lookups=$(awk '/^segd_cache_lookups_total[{]/ {n += $2} END {print n + 0}' "$tmp/metrics.txt")
timed=$(sed -n 's/^segd_cache_lookup_seconds_count //p' "$tmp/metrics.txt")
applied=$(sed -n 's/^segd_cache_deltas_applied_total //p' "$tmp/metrics.txt")
[ "$lookups" -ge $((2 * users + 2)) ] && [ "$lookups" = "$timed" ] && [ "${applied:-0}" -gt 0 ] ||
  fail "lookups=$lookups (want >= $((2 * users + 2)), = timed $timed), deltas applied=$applied"
# segd run's own periodic snapshots (snapshot.interval / snapshot.to): the
# units of the partitions it owns (all 4: it is the group's only member), in
# its snapshot.format (native)
"$segd" snapshot verify "$tmp/periodic/${tp}events" |
  grep -q "^valid: ${tp}events, 4 units (4 partitions, murmur2_random), $users users.*records_format=native$" ||
  fail "periodic snapshot: $("$segd" snapshot verify "$tmp/periodic/${tp}events")"
grep -q "msg=\"snapshot: 4 units of ${tp}events\" units=4 topic=${tp}events users=$users " "$tmp/run.log" ||
  fail "run did not log its snapshots"
[ "$(grep -l '"records_format": "native"' "$tmp/periodic/${tp}events"/p-*/manifest.json | wc -l)" = 4 ] ||
  fail "snapshot.format = native did not reach segd run's units"
# A cache pointed at another change topic than its units' manifests name
# would serve the snapshot unchanged for ever (issue 30): refused at start,
# exit 2, naming both, whether the topic exists or not.
for wrong in "${tp}events" "${tp}nosuch4"; do
  rc=0
  timeout 60 "$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "$wrong" \
    --listen 127.0.0.1:$(free_port) --now $now --horizon-s $horizon 2> "$tmp/wrong.log" || rc=$?
  [ $rc = 2 ] || fail "cache --changes $wrong: exit $rc, want 2: $(cat "$tmp/wrong.log")"
  grep -q -- "--changes $wrong is not the change topic the snapshot's units were taken beside (${tp}segments.changes, named in their manifests)" "$tmp/wrong.log" ||
    fail "cache --changes $wrong: $(cat "$tmp/wrong.log")"
  if grep -q "serving" "$tmp/wrong.log"; then fail "cache --changes $wrong served"; fi
done
# units that name a change topic the brokers do not have: refused too
mkdir -p "$tmp/snap2"
cp -r "$tmp/snap/${tp}events" "$tmp/snap2/"
sed -i "s/\"${tp}segments.changes\"/\"${tp}nosuch5\"/" "$tmp/snap2/${tp}events"/p-*/manifest.json
grep -q "\"${tp}nosuch5\"" "$tmp/snap2/${tp}events/p-00000/manifest.json" || fail "manifest not edited"
rc=0
timeout 60 "$segd" cache --snapshot "$tmp/snap2" --brokers "$brokers" --changes "${tp}nosuch5" \
  --listen 127.0.0.1:$(free_port) --now $now --horizon-s $horizon 2> "$tmp/wrong.log" || rc=$?
[ $rc != 0 ] || fail "cache on a change topic that does not exist: exit 0"
# Kafka answers "unknown topic"; the mock creates it on the tail's metadata
# request, empty, which falls short of the units' positions
grep -Eq "change topic ${tp}nosuch5: .*Unknown topic|${tp}nosuch5/[0-9]+ ends at offset 0 but the snapshot's position is" "$tmp/wrong.log" ||
  fail "cache on a missing change topic: $(cat "$tmp/wrong.log")"
if grep -q "serving" "$tmp/wrong.log"; then fail "cache on a missing change topic served"; fi
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
echo "cache_cli: ok"
