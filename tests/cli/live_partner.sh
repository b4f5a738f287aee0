#!/usr/bin/env bash
# Partner retirement (issue 23, DESIGN 3.2): a partner's contract ends, so
# every entry it contributed goes, whatever its segment. Events carrying
# partner ids 7 and 8 (raw Avro through kcat) are ingested by segd run, a
# snapshot is exported and `segd cache` loads it and tails the change stream.
# `segd segments retire --partner --brokers` sends the control event
# segd.control:retire-partner to every partition: the store lists
# partner:7, its entries are dead in the store and in the cache, partner 8's
# stay, a later event of partner 7 lives again, the next snapshot's manifest
# carries the marker, a cache loaded from it holds the marker, and an event
# of partner 7 stamped before it stays dead in the store and both caches.
# Stopped, the offline form retires partner 8.
# usage: live_partner.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
. "$2/tests/support/lib.bash"
lib_init live_partner
command -v kcat >/dev/null || fail "kcat is not installed"
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
case "$brokers" in 127.0.0.1:*|localhost:*) ;; *) fail "broker not on loopback: $brokers";; esac
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
users=12

# write_events DIR TS_MS USER:SEG:PARTNER...: one raw Avro UPSERT per argument
write_events() {
  /usr/bin/python3 - "$src/schemas/segment_event.avsc" "$@" <<'PY'
import io, sys, avro.schema, avro.io
schema = avro.schema.parse(open(sys.argv[1]).read())
out, ts = sys.argv[2], int(sys.argv[3])
for i, spec in enumerate(sys.argv[4:]):
    user, seg, partner = spec.split(":")
    ev = {"user_id": user, "ts_ms": ts, "op": "UPSERT", "source": "partner-test",
          "segments": [{"segment_id": int(seg), "ttl_s": 86400, "flags": 0,
                        "partner_id": int(partner)}]}
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(ev, avro.io.BinaryEncoder(buf))
    open("%s/%03d-%s.avro" % (out, i, user), "wb").write(buf.getvalue())
PY
}
send_events() { # DIR: each file keyed by its user
  for f in "$1"/*.avro; do
    u=$(basename "$f" .avro); u=${u#*-}
    kcat -P -b "$brokers" -X partitioner=murmur2_random -t "${tp}events" -k "$u" "$f" || fail "kcat produce $f"
  done
}
specs=()
for i in $(seq 0 $((users - 1))); do
  specs+=("pu$i:100:7" "pu$i:200:8" "pu$i:$((300 + i)):7")
done
mkdir -p "$tmp/ev1" "$tmp/ev2"
write_events "$tmp/ev1" $(( ($(date +%s) - 60) * 1000 )) "${specs[@]}"
send_events "$tmp/ev1"

cat > "$tmp/segd.conf" <<CONF
input.format = raw
batch.max.ms = 20
CONF
"$segd" run --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --group "${tp}g" --db "$tmp/db" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
# segments of every user in the store, as "pu0=100,200,300 pu1=..."
store_view() {
  # shellcheck disable=SC2046
  "$segd" get --db "$tmp/db" --json $(seq -f 'pu%g' 0 $((users - 1))) 2>/dev/null |
    /usr/bin/python3 -c "
import json,sys
print(' '.join(u['user_id'] + '=' + ','.join(str(s['id']) for s in sorted(u['segments'], key=lambda s: s['id']))
               for u in map(json.loads, sys.stdin)))"; }
want_all() { # the view where every user holds "$1" (with {i} the user's index)
  /usr/bin/python3 -c "print(' '.join('pu%d=%s' % (i, '$1'.format(i=300 + i)) for i in range($users)))"; }
full=$(want_all '100,200,{i}')
for _ in $(seq 300); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited: $(tail -5 "$tmp/run.log")"
  [ -d "$tmp/db" ] && [ "$(store_view || true)" = "$full" ] && break
  sleep 0.2
done
[ "$(store_view)" = "$full" ] || fail "store never held every event: $(store_view)"
sleep 1 # let the publisher acknowledge the last batches
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" \
  > "$tmp/export.log" 2>&1 || fail "export: $(cat "$tmp/export.log")"

port=$(free_port)
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port 2> "$tmp/cache.log" &
cache_pid=$!
cache1_pid=$cache_pid
pids+=($cache_pid)
cache_view() { # the cache's answer for every user, as store_view
  /usr/bin/python3 - "$port" "$users" <<'PY'
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
out = []
for i in range(int(sys.argv[2])):
    c.request("GET", "/v1/users/pu%d" % i)
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 200, (r.status, body)
    out.append("pu%d=%s" % (i, ",".join(str(s["id"]) for s in sorted(body["segments"], key=lambda s: s["id"]))))
print(" ".join(out))
PY
}
wait_cache() { # until the cache answers "$1" (60 s); it must stay up
  for _ in $(seq 300); do
    kill -0 $cache_pid 2>/dev/null || fail "segd cache $cache_pid exited: $(tail -5 "$tmp"/cache*.log)"
    [ "$(cache_view 2>/dev/null || true)" = "$1" ] && return 0
    sleep 0.2
  done
  fail "cache $2: $(cache_view 2>&1), want $1"
}
wait_cache "$full" "after load"

# the partner's contract ends: retire partner 7 through the log
"$segd" segments retire --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --db "$tmp/db" --wait-s 120 --partner 7 > "$tmp/retire.out" 2> "$tmp/retire.log" ||
  fail "retire --partner exit $?: $(cat "$tmp/retire.log")"
grep -q "^produced a retirement of 1 partner before ts_ms [0-9]* to all 2 partitions of ${tp}events$" \
  "$tmp/retire.out" || fail "retire said: $(cat "$tmp/retire.out")"
grep -q "^applied: $tmp/db lists all 1 retirements$" "$tmp/retire.out" || fail "$(cat "$tmp/retire.out")"
at=$(sed -n 's/^produced .* before ts_ms \([0-9]*\) .*/\1/p' "$tmp/retire.out")
"$segd" segments list-retired --db "$tmp/db" | grep -Eq "^partner:7 +$at$" ||
  fail "not listed: $("$segd" segments list-retired --db "$tmp/db")"
"$segd" segments list-retired --db "$tmp/db" --json | grep -qx "{\"partner_id\":7,\"retired_before_ms\":$at}" ||
  fail "not listed as JSON: $("$segd" segments list-retired --db "$tmp/db" --json)"
only8=$(want_all '200')
[ "$(store_view)" = "$only8" ] || fail "store after the retirement: $(store_view)"
wait_cache "$only8" "after the retirement"
"$segd" stats --db "$tmp/db" | grep -q "^misrouted events *0$" ||
  fail "the control events counted as misrouted"

# a later event of partner 7 lives again, in the store and the cache
write_events "$tmp/ev2" $((at + 1000)) "pu3:100:7"
send_events "$tmp/ev2"
again=$(want_all '200'); again=${again/pu3=200/pu3=100,200}
for _ in $(seq 300); do [ "$(store_view)" = "$again" ] && break; sleep 0.2; done
[ "$(store_view)" = "$again" ] || fail "a later event of partner 7: $(store_view)"
wait_cache "$again" "after a later event of partner 7"

# the next snapshot carries the marker by name
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap2" \
  > "$tmp/export2.log" 2>&1 || fail "export 2: $(cat "$tmp/export2.log")"
for m in "$tmp/snap2/${tp}events"/p-*/manifest.json; do
  /usr/bin/python3 -c "
import json,sys; m = json.load(open(sys.argv[1]))
assert {'partner_id': 7, 'retired_before_ms': $at} in m['retirements'], m['retirements']" "$m" ||
    fail "manifest $m lacks partner 7's retirement"
done

# a cache loaded from that snapshot holds the marker (the manifest's), and
# an event of partner 7 stamped before the marker stays dead in the store
# and in both caches
port1=$port
port=$(free_port)
"$segd" cache --snapshot "$tmp/snap2" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port 2> "$tmp/cache2.log" &
cache_pid=$!
pids+=($cache_pid)
wait_cache "$again" "loaded after the retirement"
curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"retirements":1[,}]' ||
  fail "the second cache lacks the manifest's retirement: $(curl -s "http://127.0.0.1:$port/healthz")"
mkdir -p "$tmp/ev3"
write_events "$tmp/ev3" $((at - 5000)) "pu5:400:7" "pu5:500:8"
send_events "$tmp/ev3"
late=${again/pu5=200/pu5=200,500}
for _ in $(seq 300); do [ "$(store_view)" = "$late" ] && break; sleep 0.2; done
[ "$(store_view)" = "$late" ] || fail "an event of partner 7 before the marker: $(store_view)"
wait_cache "$late" "cache 2 after an event of partner 7 before the marker"
port=$port1
cache_pid=$cache1_pid
wait_cache "$late" "cache 1 after an event of partner 7 before the marker"

# stopped, the offline form writes the store itself
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
"$segd" segments retire --db "$tmp/db" --partner 8 > "$tmp/offline.out" 2> "$tmp/offline.log" ||
  fail "offline retire --partner: $(cat "$tmp/offline.log")"
grep -q "^retired partner 8 before [0-9]*$" "$tmp/offline.out" || fail "$(cat "$tmp/offline.out")"
"$segd" segments list-retired --db "$tmp/db" | grep -Eq "^partner:8 +[0-9]+$" || fail "partner 8 not listed"
want=$(/usr/bin/python3 -c "print(' '.join('pu%d=%s' % (i, '100' if i == 3 else '') for i in range($users)))")
[ "$(store_view)" = "$want" ] || fail "offline partner retirement: $(store_view)"
echo "live_partner: partner 7 retired through the log (store, cache, snapshot), partner 8 offline"
