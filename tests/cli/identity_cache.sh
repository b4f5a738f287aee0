#!/usr/bin/env bash
# The identity graph downstream (DESIGN §10.6): membership changes reach the
# change stream as MemberEvents and snapshots carry the graph's ids, so that
# a cache built from a snapshot plus the change stream after it knows every
# id's master as the store does. A real `segd run` (identity.enable, the
# change stream on) consumes random LINK/UNLINK events in two phases with a
# snapshot exported between them, then `segd identity rebuild` splits
# components (a new epoch) and a second run publishes the rebuild's changes.
# Checked for every id against `segd get --linked`:
#  - the register fold of every MemberEvent on the change topic;
#  - the snapshot's members files folded with the MemberEvents after the
#    snapshot's change positions (what a cache does);
#  - `segd cache` loaded from that snapshot and tailing the change topic:
#    GET /v1/users/{id}?linked=true gives the store's master, members and
#    joined segments.
# usage: identity_cache.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init identcache
start_broker 3 segments.events,segments.events.dlq,segments.changes,segments.links
export SEGD_CHANGES_TOPIC="${tp}segments.changes" SEGD_IDENTITY_LINKS_TOPIC="${tp}segments.links"
now=$(date +%s)

/usr/bin/python3 - "$tmp" "$now" <<'PY'
import json, random, sys
tmp, now = sys.argv[1], int(sys.argv[2]) * 1000
rnd = random.Random(1406)
ids = ["p%02d" % k for k in range(30)]
groups = [ids[5 * g:5 * g + 5] for g in range(6)]
def link(a, b, op="LINK", w=1.0):
    return {"id_a": a, "id_b": b, "op": op, "ts_ms": now - 3_600_000 + rnd.randrange(600_000),
            "weight": w}
phase1 = [link(*rnd.sample(g, 2), w=rnd.choice([0.3, 0.8, 1.0])) for g in groups for _ in range(4)]
# phase 2: groups join pairwise (re-pointing whole components), duplicates,
# and UNLINKs that only the rebuild turns into splits
phase2 = [link(groups[g][0], groups[g + 1][0]) for g in (0, 2, 4)]
phase2 += [dict(e, op="UNLINK", ts_ms=e["ts_ms"] + 1) for e in rnd.sample(phase1, 10)]
phase2 += rnd.sample(phase1, 5)
rnd.shuffle(phase2)
for name, evs in (("links1", phase1), ("links2", phase2)):
    with open(f"{tmp}/{name}.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in evs)
with open(f"{tmp}/segs.jsonl", "w") as f:
    for u in ids:
        for k in range(2):
            f.write(json.dumps({"user_id": u, "ts_ms": now - 7_200_000 + rnd.randrange(10**6),
                                "op": "UPSERT", "segments": [
                                    {"segment_id": rnd.randrange(12), "ttl_s": 30 * 86400,
                                     "flags": k, "partner_id": int(u[1:])} for _ in range(4)]})
                    + "\n")
json.dump(ids, open(f"{tmp}/ids.json", "w"))
PY

cat > "$tmp/segd.conf" <<CONF
batch.max.ms = 20
identity.enable = 1
kafka.session.timeout.ms = 6000
CONF
"$segd" backfill --db "$tmp/db" "$tmp/segs.jsonl" > "$tmp/backfill.log" 2>&1 || fail "backfill"

run_pid=
start_run() {
  "$segd" run --brokers "$brokers" --topic "${tp}segments.events" --group "${tp}identcache" --db "$tmp/db" \
    --config "$tmp/segd.conf" 2>> "$tmp/run.log" &
  run_pid=$!
  pids+=($run_pid)
}
stop_run() {
  kill -TERM $run_pid
  wait $run_pid || fail "segd run exit $?"
}
# the links' stored offsets add up to $1 and the outbox is published
settled() {
  for _ in $(seq 200); do
    kill -0 $run_pid 2>/dev/null || fail "segd run exited"
    if "$segd" identity stats --db "$tmp/db" --topic "${tp}segments.links" 2>/dev/null | grep -qx "links_offsets_sum $1" &&
       "$segd" stats --db "$tmp/db" 2>/dev/null | grep -q "unpublished outbox *0 entries"; then
      return 0
    fi
    sleep 0.1
  done
  fail "not settled at $1 links: $("$segd" stats --db "$tmp/db" 2>&1 | grep outbox)"
}
n1=$(wc -l < "$tmp/links1.jsonl")
n2=$(wc -l < "$tmp/links2.jsonl")
"$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" "$tmp/links1.jsonl" 2> "$tmp/produce.log" ||
  fail "produce 1"
start_run
settled "$n1"
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" --now "$now" --topic "${tp}segments.events" \
  --partition-count 3 > "$tmp/export.log" 2>&1 ||
  fail "export"
ls "$tmp"/snap/"${tp}"segments.events/p-*/members-*.avro > /dev/null 2>&1 || fail "no members files"
"$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" "$tmp/links2.jsonl" 2>> "$tmp/produce.log" ||
  fail "produce 2"
settled $((n1 + n2))
stop_run
"$segd" identity rebuild --db "$tmp/db" > "$tmp/rebuild.out" 2> "$tmp/rebuild.log" ||
  fail "rebuild"
grep -q "repointed=[1-9]" "$tmp/rebuild.out" || fail "the rebuild split nothing: $(cat "$tmp/rebuild.out")"
start_run
settled $((n1 + n2))
stop_run
"$segd" get --db "$tmp/db" --now "$now" --json --linked $(/usr/bin/python3 -c \
  "import json,sys;print(' '.join(json.load(open(sys.argv[1]))))" "$tmp/ids.json") \
  > "$tmp/linked.jsonl" || fail "get --linked"

/usr/bin/python3 - "$tmp" "$brokers" "$tp" <<'PY' || fail "MemberEvents / members files != store"
import glob, io, json, sys
import avro.datafile, avro.io
from confluent_kafka import Consumer, TopicPartition
tmp, brokers, tp = sys.argv[1:4]
want = {}
for line in open(f"{tmp}/linked.jsonl"):
    o = json.loads(line)
    want[o["user_id"]] = o["master"]
assert len(set(want.values())) < len(want), "no linked component at all"

def zz(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if not c & 0x80:
            return (v >> 1) ^ -(v & 1), i
def member_body(b):  # MemberEvent: tag, id, master, first_seen, epoch, ...
    tag, i = zz(b, 0)
    n, i = zz(b, i); mid = b[i:i + n].decode(); i += n
    n, i = zz(b, i); master = b[i:i + n].decode(); i += n
    fs, i = zz(b, i)
    epoch, i = zz(b, i)
    return mid, (epoch, fs, master)
def wins(x, y):  # wire/member.h: larger epoch, then smaller (first_seen, master bytes)
    if x[0] != y[0]:
        return x[0] > y[0]
    return (x[1], x[2].encode()) < (y[1], y[2].encode())
def fold(reg, mid, key):
    if mid not in reg or wins(key, reg[mid]):
        reg[mid] = key

c = Consumer({"bootstrap.servers": brokers, "group.id": tp + "identcache-check",
              "enable.auto.commit": False, "enable.partition.eof": True})
changes = tp + "segments.changes"
parts = c.list_topics(changes, timeout=10).topics[changes].partitions
c.assign([TopicPartition(changes, p, 0) for p in parts])
events, eof = [], set()
while len(eof) < len(parts):
    m = c.poll(10)
    assert m is not None, "change topic: poll timed out"
    if m.error():
        eof.add(m.partition())
        continue
    v = m.value()
    assert v[:2] == b"\xc3\x01", "not single-object framed"
    if v[10] == 0x01:
        mid, key = member_body(v[10:])
        assert m.key().decode() == mid
        events.append((m.partition(), m.offset(), mid, key))
c.close()
assert events, "no MemberEvent on the change topic"
assert any(k[0] > 0 for _, _, _, k in events), "no MemberEvent of the rebuild's epoch"

reg = {}
for _, _, mid, key in events:
    fold(reg, mid, key)
got = {x: reg[x][2] if x in reg else x for x in want}
assert got == want, ("change topic", {x: (got[x], want[x]) for x in want if got[x] != want[x]})

# the snapshot's members files, then what came after its positions
reg, pos = {}, {}
for man in glob.glob(f"{tmp}/snap/{tp}segments.events/p-*/manifest.json"):
    mf = json.load(open(man))
    for p in mf["changes"]["positions"]:
        pos[p["partition"]] = min(pos.get(p["partition"], p["offset"]), p["offset"])
    if "members" in mf:
        path = man.replace("manifest.json", mf["members"]["name"])
        for r in avro.datafile.DataFileReader(open(path, "rb"), avro.io.DatumReader()):
            assert r["tag"] == -1 and r["buckets"] == 3
            fold(reg, r["id"], (r["epoch_ms"], r["master_first_seen_ms"], r["master"]))
assert reg, "members files are empty"
snap_only = {x: reg[x][2] if x in reg else x for x in want}
for part, off, mid, key in events:
    if off >= pos.get(part, 0):
        fold(reg, mid, key)
got = {x: reg[x][2] if x in reg else x for x in want}
assert got == want, ("snapshot + tail", {x: (got[x], want[x]) for x in want if got[x] != want[x]})
assert snap_only != want, "the snapshot already held the final graph: the tail proved nothing"
print("identity_cache: %d MemberEvents, %d ids: change topic and snapshot + tail equal the store"
      % (len(events), len(want)))
PY
# a cache from the snapshot and the change stream after it
port=$(/usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$port --now "$now" 2> "$tmp/cache.log" &
pids+=($!)
/usr/bin/python3 - "$tmp" "$port" <<'PY' || fail "cache linked reads != store"
import http.client, json, sys, time
tmp, port = sys.argv[1:3]
want = [json.loads(l) for l in open(f"{tmp}/linked.jsonl")]
deadline = time.time() + 60
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
        c.request("GET", "/readyz")
        r = c.getresponse()
        r.read()
        ready = r.status == 200
    except OSError:
        ready = False
    bad = []
    for w in want if ready else []:
        c.request("GET", "/v1/users/%s?linked=true" % w["user_id"])
        r = c.getresponse()
        got = json.loads(r.read())
        if (r.status != 200 or got["master"] != w["master"] or got["members"] != w["members"]
                or got["segments"] != w["segments"]):
            bad.append((w["user_id"], got.get("master"), w["master"]))
    if ready and not bad or time.time() > deadline:
        break
    time.sleep(0.3)
assert ready, "cache never ready"
assert not bad, bad[:5]
linked = sum(len(w["members"]) > 1 for w in want)
assert linked, "no linked id"
c.request("GET", "/metrics")
metrics = c.getresponse().read().decode()
ids = [l for l in metrics.splitlines() if l.startswith("segd_cache_identity_ids ")]
assert ids and float(ids[0].split()[1]) >= linked, ids
print("identity_cache: cache linked reads of %d ids (%d in components) equal the store"
      % (len(want), linked))
PY
echo "identity_cache: ok"
