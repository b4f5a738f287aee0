#!/usr/bin/env bash
# The identity graph end to end (DESIGN §10): segment events backfilled,
# random LINK/UNLINK events with weights, duplicated and shuffled, produced
# to the links topic and consumed by a real `segd run` (identity.enable);
# for every id `segd get --linked` equals a reference union-find + §3 join,
# `segd identity check` agrees for random pairs, a super-node attempt is
# refused (DLQ reason supernode, counted), a bad link is dead-lettered, and
# `segd identity rebuild` after the UNLINKs equals the model's offline
# components over the final edges. The same events through `segd backfill`
# and `segd identity backfill` (no Kafka) give a store that passes the same
# checks.
# usage: identity_run.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$2/tests/support/lib.bash"
lib_init identity
start_broker 2 segments.events,segments.events.dlq,segments.changes,segments.links
export SEGD_IDENTITY_LINKS_TOPIC="${tp}segments.links"

python3 - "$tmp" <<'PY'
import json, random, sys, time
tmp = sys.argv[1]
rnd = random.Random(14)
now = int(time.time() * 1000)
ids = ["i%02d" % k for k in range(26)]  # i24, i25: never linked
groups = [ids[4 * g:4 * g + 4] for g in range(6)]
events, used_ts = [], set()
def ts_near(spread):
    return now - 3_600_000 + rnd.randrange(spread)
for g in groups[:2]:  # g0, g1: chains of weight 1, components of exactly 4
    for a, b in zip(g, g[1:]):
        events.append({"id_a": a, "id_b": b, "op": "LINK", "ts_ms": ts_near(50), "weight": 1.0})
for _ in range(90):
    g = rnd.choice(groups)
    a, b = rnd.sample(g, 2)
    ev = {"id_a": a, "id_b": b, "op": rnd.choice(["LINK", "LINK", "UNLINK"]),
          "ts_ms": ts_near(50), "weight": rnd.choice([0.3, 0.6, 1.0])}
    events.append(ev)
    if rnd.random() < 0.25:
        events.append(dict(ev, id_a=b, id_b=a))  # a duplicate, ids swapped
rnd.shuffle(events)
with open(f"{tmp}/links1.jsonl", "w") as f:
    for e in events:
        f.write(json.dumps(e) + "\n")
# phase 2: g0 + g1 = 8 ids > identity.max.component 6; and a self-link
bad = [{"id_a": "i00", "id_b": "i04", "op": "LINK", "ts_ms": now - 7_200_000, "weight": 1.0},
       {"id_a": "i05", "id_b": "i05", "op": "LINK", "ts_ms": now - 3_600_000}]
with open(f"{tmp}/links2.jsonl", "w") as f:
    for e in bad:
        f.write(json.dumps(e) + "\n")
# segment events: overlapping segment ids across members, distinct ts
segs = []
for u in ids:
    for _ in range(3):
        t = ts_near(3_000_000)
        while t in used_ts:
            t += 1
        used_ts.add(t)
        segs.append({"user_id": u, "ts_ms": t, "op": rnd.choice(["UPSERT"] * 4 + ["REMOVE"]),
                     "segments": [{"segment_id": rnd.randrange(10), "ttl_s": 30 * 86400,
                                   "flags": rnd.randrange(3), "partner_id": int(u[1:])}
                                  for _ in range(3)]})
with open(f"{tmp}/segs.jsonl", "w") as f:
    for e in segs:
        f.write(json.dumps(e) + "\n")
json.dump({"events": events, "segs": segs, "ids": ids}, open(f"{tmp}/model_in.json", "w"))
PY

"$segd" backfill --db "$tmp/db" "$tmp/segs.jsonl" > "$tmp/backfill.log" 2>&1 || fail "backfill"
"$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" "$tmp/links1.jsonl" \
  > "$tmp/produce.out" 2> "$tmp/produce.log" || fail "produce"
n1=$(wc -l < "$tmp/links1.jsonl")
u1=$(grep -c '"op": "UNLINK"' "$tmp/links1.jsonl" || true)
# what a broker acknowledged, counted by the delivery reports
grep -qx "produced $n1 link events ($((n1 - u1)) links, $u1 unlinks) to ${tp}segments.links: delivered $n1 of $n1" \
  "$tmp/produce.out" || fail "produce's report: $(cat "$tmp/produce.out")"

cat > "$tmp/segd.conf" <<CONF
changes.enable = 0
batch.max.ms = 20
identity.enable = 1
identity.max.component = 6
kafka.session.timeout.ms = 6000
CONF
"$segd" run --brokers "$brokers" --topic "${tp}segments.events" --group "${tp}ident" --db "$tmp/db" \
  --config "$tmp/segd.conf" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)

links_done() { # the stored offsets of the links topic add up to $1
  "$segd" identity stats --db "$tmp/db" --topic "${tp}segments.links" 2>/dev/null | grep -qx "links_offsets_sum $1"
}
for _ in $(seq 150); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  links_done "$n1" && break
  sleep 0.1
done
links_done "$n1" || fail "links not consumed"
# beside the running writer (idle now: every link applied): a read-only
# listing that agrees with `identity members` for every id of the model
"$segd" identity components --db "$tmp/db" --json > "$tmp/comp.json" 2> "$tmp/comp.err" ||
  fail "identity components beside segd run: $(cat "$tmp/comp.err")"
python3 - "$segd" "$tmp/db" "$tmp/comp.json" "$tmp/model_in.json" <<'PY' ||
import json, subprocess, sys
segd, db = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(sys.argv[3])]
ids = json.load(open(sys.argv[4]))["ids"]
keys = [(-r["size"], r["master"]) for r in rows]
assert keys == sorted(keys), keys
listed = {r["master"]: r["members"] for r in rows}
for i in ids:
    m = subprocess.run([segd, "identity", "members", "--db", db, i], check=True,
                       capture_output=True, text=True).stdout.split()
    if len(m) >= 2:
        assert listed.get(m[0]) == m, (i, m, listed.get(m[0]))
assert sum(len(v) for v in listed.values()) <= len(ids), rows
assert all(r["size"] == len(r["members"]) >= 2 for r in rows), rows
PY
  fail "components beside segd run: $(cat "$tmp/comp.json")"
"$segd" identity produce --brokers "$brokers" --topic "${tp}segments.links" "$tmp/links2.jsonl" 2>> "$tmp/produce.log" \
  || fail "produce 2"
for _ in $(seq 150); do
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  links_done $((n1 + 2)) && break
  sleep 0.1
done
links_done $((n1 + 2)) || fail "phase 2 not consumed"
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"

"$segd" identity stats --db "$tmp/db" | grep -qx "supernode_refused 1" \
  || fail "counter: $("$segd" identity stats --db "$tmp/db")"
kcat -C -b "$brokers" -t "${tp}segments.events.dlq" -e -q -f '%h %k\n' > "$tmp/dlq.out" 2>/dev/null \
  || fail "kcat"
grep -q "segd.error=supernode.* i00$" "$tmp/dlq.out" || fail "no supernode letter: $(cat "$tmp/dlq.out")"
grep -q "segd.error=id_a equals id_b.* i05$" "$tmp/dlq.out" || fail "no invalid letter: $(cat "$tmp/dlq.out")"

model_check() { # $1: the store to hold against the model
python3 - "$segd" "$tmp" "$1" <<'PY'
import json, random, subprocess, sys
segd, tmp, db = sys.argv[1:]
m = json.load(open(f"{tmp}/model_in.json"))
ids, events = m["ids"], m["events"]

def comps(edges_of):
    parent = {i: i for i in ids}
    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for a, b in edges_of:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
    return root

fs = {}
for e in events:
    for x in (e["id_a"], e["id_b"]):
        fs[x] = min(fs.get(x, e["ts_ms"]), e["ts_ms"])
online = comps([(e["id_a"], e["id_b"]) for e in events
                if e["op"] == "LINK" and e.get("weight", 1.0) >= 0.5])
edge = {}  # LWW: larger (ts, unlinked, weight)
for e in events:
    k = tuple(sorted((e["id_a"], e["id_b"])))
    v = (e["ts_ms"], e["op"] == "UNLINK", e.get("weight", 1.0))
    edge[k] = max(edge.get(k, v), v)
offline = comps([k for k, v in edge.items() if not v[1] and v[2] >= 0.5])

def members(root, x):
    ms = sorted(i for i in ids if root(i) == root(x)) if x in fs else [x]
    master = min(ms, key=lambda i: (fs[i], i)) if x in fs else x
    return master, ms

# the §3 join per (member, segment): the larger (ts, is_removal, ...)
entry = {}
for s in m["segs"]:
    for u in s["segments"]:
        k = (s["user_id"], u["segment_id"])
        v = (s["ts_ms"], s["op"] == "REMOVE", u["flags"], u["partner_id"])
        entry[k] = max(entry.get(k, v), v)

def expect_linked(root, x):
    master, ms = members(root, x)
    best = {}
    for (u, seg), v in entry.items():
        if u in ms:
            best[seg] = max(best.get(seg, v), v)
    segs = sorted((seg, v[0], v[2], v[3]) for seg, v in best.items() if not v[1])
    return master, ms, segs

def check_all(root, what):
    out = subprocess.run([segd, "get", "--db", db, "--json", "--linked"] + ids,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(ids), out
    for x, line in zip(ids, out):
        got = json.loads(line)
        assert got["user_id"] == x, got
        master, ms, segs = expect_linked(root, x)
        assert got["master"] == master, (what, x, got["master"], master)
        assert got["members"][0] == master and sorted(got["members"]) == ms, (what, x, got, ms)
        gs = sorted((s["id"], s["ts_ms"], s["flags"], s["partner_id"]) for s in got["segments"])
        assert gs == segs, (what, x, gs, segs)
    rnd = random.Random(7)
    for _ in range(12):
        a, b = rnd.sample(ids, 2)
        r = subprocess.run([segd, "identity", "check", "--db", db, a, b],
                           capture_output=True, text=True)
        want = a in fs and b in fs and root(a) == root(b)
        assert r.returncode == (0 if want else 1), (what, a, b, r.returncode, r.stdout)
        if want:
            assert r.stdout.strip() == "connected master=" + members(root, a)[0], r.stdout
        else:
            assert r.stdout.strip() == "not connected", r.stdout
    print(what, "ok:", len(set(map(root, fs))), "components")

check_all(online, "online")
r = subprocess.run([segd, "identity", "rebuild", "--db", db], capture_output=True,
                   text=True, check=True)
check_all(offline, "rebuild")
PY
}
model_check "$tmp/db" || fail "segd run's store != model"

# the same events without Kafka: segments, then links in the order the run
# consumed them (phase 1, phase 2); the guard refuses the same link
"$segd" backfill --db "$tmp/db2" "$tmp/segs.jsonl" > "$tmp/backfill2.log" 2>&1 || fail "backfill 2"
rc=0
"$segd" identity backfill --db "$tmp/db2" --max-component 6 "$tmp/links1.jsonl" \
  "$tmp/links2.jsonl" > "$tmp/ibackfill.out" 2> "$tmp/ibackfill.log" || rc=$?
[ $rc = 3 ] || fail "identity backfill exit $rc (want 3: two lines refused)"
grep -qx "applied $n1 link events, refused 2" "$tmp/ibackfill.out" ||
  fail "identity backfill: $(cat "$tmp/ibackfill.out")"
grep -q "links2.jsonl:1: supernode: " "$tmp/ibackfill.log" || fail "no supernode line: $(cat "$tmp/ibackfill.log")"
grep -q "links2.jsonl:2: " "$tmp/ibackfill.log" || fail "no invalid line: $(cat "$tmp/ibackfill.log")"
"$segd" identity stats --db "$tmp/db2" | grep -qx "supernode_refused 1" || fail "backfill counter"
model_check "$tmp/db2" || fail "identity backfill's store != model"

# a chain whose every link makes an older id master of the whole component:
# ~20 000 membership changes in one batch go out as outbox entries of at
# most 10 000 (SEGD_OUTBOX_MAX_MEMBERS), which the publisher can send and
# have acknowledged one cycle at a time
python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(199):
        f.write(json.dumps({'id_a': 'c%03d' % i, 'id_b': 'c%03d' % (i + 1), 'op': 'LINK',
                            'ts_ms': 1800000000000 - i}) + '\\n')
" "$tmp/chain.jsonl"
"$segd" identity backfill --db "$tmp/db3" "$tmp/chain.jsonl" > "$tmp/chain.out" 2>&1 ||
  fail "chain backfill: $(cat "$tmp/chain.out")"
entries=$("$segd" stats --db "$tmp/db3" | sed -n 's/^unpublished outbox *\([0-9]*\) entries.*/\1/p')
[ "${entries:-0}" -ge 2 ] || fail "membership changes not cut into entries: ${entries:-none}"
[ "$("$segd" identity members --db "$tmp/db3" c000 | head -1)" = c198 ] || fail "chain master"
echo "identity_run: ok"
