#!/usr/bin/env bash
# segd against a real schema registry (Apicurio Registry, its Confluent API;
# scripts/registry.sh), compatibility BACKWARD:
# - input: an independent producer (python3-avro + confluent-kafka) registers
#   v1 of SegmentEvent and a compatible v2 (a field added with a default, a
#   defaulted field dropped) and produces Confluent-framed events of both;
#   `segd run` looks both ids up and applies every event (the dropped field
#   read as its default), nothing dead-lettered.
# - output: the publisher registers ChangeEvent under <changes>-value and
#   MemberEvent under <changes>-segd.MemberEvent (a LINK makes membership
#   changes); every change message carries one of those two ids and decodes
#   with the schema the registry returns for it.
# - restart: with the registry stopped, events written with a schema id segd
#   has not seen yet wait (the log says so, nothing is applied or
#   dead-lettered); after `registry.sh restart` they are applied.
# - refusal: a change topic whose subject holds an incompatible schema: the
#   registry refuses segd's ChangeEvent (HTTP 409), segd's log names the
#   subject and the registry's reason, and nothing reaches that topic.
# usage: schema_registry.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
. "$src/tests/support/lib.bash"
lib_init schema_registry
export REGISTRY_DIR="$tmp/registry"
trap 'bash "$src/scripts/registry.sh" stop >/dev/null 2>&1 || true; lib_cleanup' EXIT
start_broker 2 segments.events,segments.events.dlq,segments.changes,segments.links,refused.changes

bash "$src/scripts/registry.sh" start > "$tmp/registry.out" 2> "$tmp/registry-start.log" ||
  fail "registry did not start: $(tail -5 "$tmp/registry-start.log")"
url=$(sed -n 's/^url=//p' "$tmp/registry.out")
[ -n "$url" ] || fail "registry.sh printed no url"
case "$url" in http://127.0.0.1:*) ;; *) fail "registry not on loopback: $url";; esac

py=/usr/bin/python3
# The producer: registers schemas and produces Confluent-framed Avro, with no
# code of segd's. Commands: config LEVEL | register SUBJECT AVSC (prints id) |
# produce TOPIC ID AVSC JSONL | consume TOPIC N (prints id<TAB>decoded json
# of every message, waiting for at least N).
cat > "$tmp/client.py" <<'PY'
import io, json, struct, sys, time, urllib.request, urllib.error
import avro.io, avro.schema
from confluent_kafka import Consumer, KafkaError, Producer

url, brokers, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
CT = "application/vnd.schemaregistry.v1+json"

def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": CT})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)

if cmd == "config":
    print(call("PUT", "/config", {"compatibility": args[0]})["compatibility"])
elif cmd == "register":
    try:
        print(call("POST", "/subjects/%s/versions" % args[0], {"schema": open(args[1]).read()})["id"])
    except urllib.error.HTTPError as e:
        print("refused %d %s" % (e.code, e.read().decode()))
elif cmd == "produce":
    topic, sid, schema = args[0], int(args[1]), avro.schema.parse(open(args[2]).read())
    p = Producer({"bootstrap.servers": brokers, "partitioner": "murmur2_random"})
    for line in open(args[3]):
        ev = json.loads(line)
        buf = io.BytesIO()
        buf.write(b"\0" + struct.pack(">i", sid))
        avro.io.DatumWriter(schema).write(ev, avro.io.BinaryEncoder(buf))
        p.produce(topic, key=ev.get("user_id", ev.get("id_a")).encode(), value=buf.getvalue())
    if p.flush(30):
        sys.exit("produce: messages not delivered")
elif cmd == "consume":  # every message there now: at least N, then to the end
    topic, want = args[0], int(args[1])
    c = Consumer({"bootstrap.servers": brokers, "group.id": "check-%d" % time.time_ns(),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.subscribe([topic])
    got, deadline, schemas, at_end = 0, time.time() + 60, {}, set()
    parts = len(c.list_topics(topic, timeout=30).topics[topic].partitions)
    while (got < want or len(at_end) < parts) and time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
            continue
        at_end.discard(m.partition())
        v = m.value()
        if v[0] != 0:
            sys.exit("not Confluent-framed: %r" % v[:8])
        sid = struct.unpack(">i", v[1:5])[0]
        if sid not in schemas:
            schemas[sid] = avro.schema.parse(call("GET", "/schemas/ids/%d" % sid)["schema"])
        ev = avro.io.DatumReader(schemas[sid]).read(avro.io.BinaryDecoder(io.BytesIO(v[5:])))
        print("%d\t%s" % (sid, json.dumps(ev, sort_keys=True)))
        got += 1
    c.close()
    if len(at_end) < parts:
        sys.exit("consume %s: end not reached in 60 s" % topic)
PY
client() { "$py" "$tmp/client.py" "$url" "$brokers" "$@"; }

[ "$(client config BACKWARD)" = BACKWARD ] || fail "cannot set compatibility BACKWARD"

# v2: a field added with a default, SegmentUpdate.flags (defaulted) dropped;
# v3: v2 plus one more defaulted field, registered before the registry stops
"$py" - "$src/schemas/segment_event.avsc" "$tmp" <<'PY'
import json, sys
v1 = json.load(open(sys.argv[1]))
v2 = json.loads(json.dumps(v1))
v2["fields"].append({"name": "campaign", "type": "string", "default": "none"})
upd = v2["fields"][3]["type"]["items"]
upd["fields"] = [f for f in upd["fields"] if f["name"] != "flags"]
v3 = json.loads(json.dumps(v2))
v3["fields"].append({"name": "region", "type": "int", "default": 0})
for name, s in (("v1", v1), ("v2", v2), ("v3", v3)):
    json.dump(s, open("%s/%s.avsc" % (sys.argv[2], name), "w"))
PY
ev_subject="${tp}segments.events-value"
id1=$(client register "$ev_subject" "$tmp/v1.avsc")
id2=$(client register "$ev_subject" "$tmp/v2.avsc")
id3=$(client register "$ev_subject" "$tmp/v3.avsc")
for id in "$id1" "$id2" "$id3"; do
  [[ "$id" =~ ^[0-9]+$ ]] || fail "registering SegmentEvent: $id1 / $id2 / $id3"
done
[ "$id1" != "$id2" ] && [ "$id2" != "$id3" ] || fail "evolutions got the same id: $id1 $id2 $id3"
# BACKWARD is in force (else v2 and v3 proved nothing): a v4 that reads
# user_id as an int cannot read v3's data, and the registry says so
"$py" -c 'import json,sys; s=json.load(open(sys.argv[1])); s["fields"][0]["type"]="int"; print(json.dumps(s))' \
  "$tmp/v3.avsc" > "$tmp/v4_bad.avsc"
bad=$(client register "$ev_subject" "$tmp/v4_bad.avsc")
case "$bad" in "refused 409 "*) ;; *) fail "an incompatible SegmentEvent was not refused: $bad";; esac
client register "${tp}segments.links-value" "$src/schemas/link_event.avsc" > "$tmp/link.id"
[[ "$(cat "$tmp/link.id")" =~ ^[0-9]+$ ]] || fail "registering LinkEvent: $(cat "$tmp/link.id")"

now=$(date +%s)000
# r0..r2 written with v1 (flags 2), r3..r5 with v2 (no flags: read as 0)
"$py" - "$tmp" "$now" <<'PY'
import json, sys
tmp, now = sys.argv[1], int(sys.argv[2])
def ev(u, seg, extra):
    d = {"user_id": u, "ts_ms": now - 60000 + seg, "op": "UPSERT", "source": "reg",
         "segments": [dict({"segment_id": seg, "ttl_s": 86400, "partner_id": seg}, **extra)]}
    return d
with open(tmp + "/e1.jsonl", "w") as f:
    for i in range(3):
        f.write(json.dumps(ev("r%d" % i, 100 + i, {"flags": 2})) + "\n")
with open(tmp + "/e2.jsonl", "w") as f:
    for i in range(3, 6):
        d = ev("r%d" % i, 100 + i, {})
        d["campaign"] = "spring"
        f.write(json.dumps(d) + "\n")
with open(tmp + "/e3.jsonl", "w") as f:
    for i in range(6, 8):
        d = ev("r%d" % i, 100 + i, {})
        d["campaign"], d["region"] = "fall", 7
        f.write(json.dumps(d) + "\n")
with open(tmp + "/links.jsonl", "w") as f:
    f.write(json.dumps({"id_a": "r0", "id_b": "r1", "op": "LINK", "ts_ms": now - 30000,
                        "weight": 1.0, "source": None}) + "\n")
PY
client produce "${tp}segments.events" "$id1" "$tmp/v1.avsc" "$tmp/e1.jsonl" || fail "produce v1"
client produce "${tp}segments.events" "$id2" "$tmp/v2.avsc" "$tmp/e2.jsonl" || fail "produce v2"
client produce "${tp}segments.links" "$(cat "$tmp/link.id")" "$src/schemas/link_event.avsc" \
  "$tmp/links.jsonl" || fail "produce links"

cat > "$tmp/segd.conf" <<CONF
input.format = confluent
input.schema.registry.url = $url
changes.topic = ${tp}segments.changes
changes.format = confluent
identity.enable = 1
identity.links.topic = ${tp}segments.links
batch.max.ms = 20
kafka.session.timeout.ms = 6000
CONF
"$segd" run --brokers "$brokers" --topic "${tp}segments.events" --group "${tp}g" \
  --db "$tmp/db" --config "$tmp/segd.conf" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)

has_segments() { # USER SEGMENT...: every segment readable for the user
  local out u=$1; shift
  out=$("$segd" get --db "$tmp/db" --json "$u" 2>/dev/null) || return 1
  for s in "$@"; do echo "$out" | grep -q "\"id\":$s," || return 1; done
}
all_users() { # FIRST LAST: users rFIRST..rLAST each have their segment 100+i
  local i
  for i in $(seq "$1" "$2"); do has_segments "r$i" $((100 + i)) || return 1; done
}
wait_users() { # FIRST LAST
  for _ in $(seq 600); do
    kill -0 $run_pid 2>/dev/null || fail "segd run exited"
    all_users "$1" "$2" && return 0
    sleep 0.2
  done
  return 1
}
wait_users 0 5 || fail "v1 and v2 events not all applied"
"$segd" get --db "$tmp/db" --json r1 | grep -q '"id":101,[^}]*"flags":2,' || fail "v1 flags: $("$segd" get --db "$tmp/db" --json r1)"
"$segd" get --db "$tmp/db" --json r4 | grep -q '"id":104,[^}]*"flags":0,"partner_id":104' ||
  fail "v2 event (flags dropped) not read with the default: $("$segd" get --db "$tmp/db" --json r4)"

# the publisher registered both subjects; the change topic carries their ids
subject_id() { curl -sf "$url/subjects/$1/versions/latest" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
for _ in $(seq 300); do
  cid=$(subject_id "${tp}segments.changes-value" 2>/dev/null || true)
  mid=$(subject_id "${tp}segments.changes-segd.MemberEvent" 2>/dev/null || true)
  [ -n "$cid" ] && [ -n "$mid" ] && break
  sleep 0.2
done
[ -n "$cid" ] || fail "ChangeEvent subject not registered by segd run"
[ -n "$mid" ] || fail "MemberEvent subject not registered by segd run"
curl -sf "$url/schemas/ids/$cid" | grep -q 'ChangeEvent' || fail "id $cid is not ChangeEvent"
curl -sf "$url/schemas/ids/$mid" | grep -q 'MemberEvent' || fail "id $mid is not MemberEvent"
# 6 users' changes and r1's membership change (r0 stays its own master)
client consume "${tp}segments.changes" 7 > "$tmp/changes.out" || fail "consume changes"
[ "$(wc -l < "$tmp/changes.out")" -ge 7 ] || fail "change messages: $(cat "$tmp/changes.out")"
awk -F'\t' -v c="$cid" -v m="$mid" '$1 != c && $1 != m { bad = 1 } END { exit bad }' \
  "$tmp/changes.out" || fail "a change message with another id: $(cut -f1 "$tmp/changes.out" | sort -u)"
for u in r0 r1 r2 r3 r4 r5; do
  grep -q "^$cid	.*\"user_id\": \"$u\"" "$tmp/changes.out" || fail "no ChangeEvent for $u"
done
grep -q "^$mid	.*\"id\": \"r1\", \"master\": \"r0\"" "$tmp/changes.out" ||
  fail "no MemberEvent for r1 (master r0)"

# registry down: events of id3 (not yet looked up) wait, then apply
bash "$src/scripts/registry.sh" stop || fail "registry stop"
client_offline() { "$py" "$tmp/client.py" "http://127.0.0.1:1" "$brokers" "$@"; }
client_offline produce "${tp}segments.events" "$id3" "$tmp/v3.avsc" "$tmp/e3.jsonl" || fail "produce v3"
for _ in $(seq 300); do
  grep -q "waiting: schema registry .*$url" "$tmp/run.log" 2>/dev/null && break
  sleep 0.2
done
grep -q "waiting: schema registry" "$tmp/run.log" || fail "segd did not report waiting on the registry"
has_segments r6 106 && fail "r6 applied while its schema was unreachable"
bash "$src/scripts/registry.sh" restart > "$tmp/registry.out" 2>> "$tmp/registry-start.log" ||
  fail "registry did not restart"
wait_users 6 7 || fail "events of the new schema id not applied after the registry came back"
grep -q "resumed after: schema registry" "$tmp/run.log" || fail "no resume logged"
kill -TERM $run_pid
wait $run_pid || fail "segd run exited with $?"
grep -q "msg=final consumed=8 events=8 segments=8 dlq=0 misrouted=0" "$tmp/run.log" ||
  fail "run summary"
client consume "${tp}segments.events.dlq" 0 > "$tmp/dlq.out" || fail "consume dlq"
[ ! -s "$tmp/dlq.out" ] || fail "dead-lettered: $(cat "$tmp/dlq.out")"

# refusal: <refused.changes>-value holds a ChangeEvent that segd's cannot
# follow under BACKWARD (its required fields would be missing in old data)
echo '{"type":"record","name":"ChangeEvent","namespace":"segd","fields":[{"name":"x","type":"int"}]}' \
  > "$tmp/old_change.avsc"
refused="${tp}refused.changes-value"
[[ "$(client register "$refused" "$tmp/old_change.avsc")" =~ ^[0-9]+$ ]] || fail "pre-register $refused"
sed -e "s/^changes.topic = .*/changes.topic = ${tp}refused.changes/" -e '/^identity/d' \
  "$tmp/segd.conf" > "$tmp/refused.conf"
"$segd" run --brokers "$brokers" --topic "${tp}segments.events" --group "${tp}g2" \
  --db "$tmp/db2" --config "$tmp/refused.conf" 2> "$tmp/refused.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 600); do
  grep -q "publisher waiting: register $refused" "$tmp/refused.log" 2>/dev/null && break
  kill -0 $run_pid 2>/dev/null || fail "segd run (refused) exited"
  sleep 0.2
done
line=$(grep "publisher waiting: register $refused" "$tmp/refused.log" | head -1) ||
  fail "segd did not report the refused subject"
case "$line" in *"HTTP 409"*Incompatible*) ;; *) fail "refusal not explained: $line";; esac
versions=$(curl -sf "$url/subjects/$refused/versions")
[ "$versions" = "[1]" ] || fail "the refused subject has versions $versions"
kill -TERM $run_pid
wait $run_pid || true # the publisher could not drain: its exit code is not the point
client consume "${tp}refused.changes" 0 > "$tmp/refused.out" || fail "consume refused"
[ ! -s "$tmp/refused.out" ] || fail "a change reached the refused topic: $(cat "$tmp/refused.out")"
echo "schema_registry: ok"
