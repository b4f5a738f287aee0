#!/usr/bin/env bash
# `segd identity components` (DESIGN §10.5): a graph of known components,
# loaded by `segd identity backfill` and split by `segd identity rebuild`
# (an UNLINK), is listed largest first, ties by master id, the master first
# in each member list, members cut after 20 in text and all in --json;
# --min-size and --limit filter; a minimum under 2 is a usage error; a store
# without links lists nothing. And `segd identity produce` to a broker that
# never answers says "delivered 0 of N" and exits 1 (about 30 s: librdkafka's
# message.timeout.ms). No Kafka needed.
# usage: identity_components.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-identcomp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The components after the rebuild (the master is the smallest (first_seen,
# id); the first link of each names its master at equal first_seen):
#   t5  25 ids: t5 and u00..u23 (a hub)
#   m1   4 ids: m1 x1 y1 z1
#   b2   3 ids: b2 a2 k2 (a2 sorts before b2 but joined later)
#   c3   3 ids: c3 d3 e3 (ties with b2: after it by master id)
#   f4   2 ids: f4 g4 (h4 linked, then unlinked: alone after the rebuild)
#   s1, s2: linked under identity.min.weight, each alone (never listed)
/usr/bin/python3 - "$tmp/links.jsonl" <<'PY'
import json, sys
ev = []
def link(a, b, ts, op="LINK", w=1.0):
    ev.append({"id_a": a, "id_b": b, "op": op, "ts_ms": ts, "weight": w})
for i in range(24):
    link("t5", "u%02d" % i, 1 + i)
link("m1", "z1", 1); link("m1", "y1", 2); link("y1", "x1", 3)
link("b2", "k2", 1); link("k2", "a2", 5)
link("c3", "d3", 1); link("d3", "e3", 2)
link("f4", "g4", 1); link("f4", "h4", 2); link("f4", "h4", 3, "UNLINK")
link("s1", "s2", 1, w=0.3)
with open(sys.argv[1], "w") as f:
    for e in ev:
        f.write(json.dumps(e) + "\n")
PY
"$segd" identity backfill --db "$tmp/db" "$tmp/links.jsonl" > "$tmp/out" 2>&1 ||
  fail "identity backfill: $(cat "$tmp/out")"
# online, the UNLINK does not split: f4's component still holds h4
"$segd" identity components --db "$tmp/db" > "$tmp/online" 2> "$tmp/err" ||
  fail "components before the rebuild: $(cat "$tmp/err")"
grep -qx "f4 size=3 members=f4,g4,h4" "$tmp/online" || fail "online f4: $(cat "$tmp/online")"
"$segd" identity rebuild --db "$tmp/db" > "$tmp/out" 2>&1 || fail "rebuild: $(cat "$tmp/out")"

"$segd" identity components --db "$tmp/db" > "$tmp/all" 2> "$tmp/err" ||
  fail "components: $(cat "$tmp/err")"
[ ! -s "$tmp/err" ] || fail "components wrote to stderr: $(cat "$tmp/err")"
want_hub="t5 size=25 members=t5,$(seq -f 'u%02g' 0 18 | paste -sd,) …+5 more"
cat > "$tmp/want" <<EOF
$want_hub
m1 size=4 members=m1,x1,y1,z1
b2 size=3 members=b2,a2,k2
c3 size=3 members=c3,d3,e3
f4 size=2 members=f4,g4
EOF
diff -u "$tmp/want" "$tmp/all" || fail "components: the listing above differs"

# --min-size and --limit
"$segd" identity components --db "$tmp/db" --min-size 3 | cut -d' ' -f1,2 | paste -sd' ' > "$tmp/out"
[ "$(cat "$tmp/out")" = "t5 size=25 m1 size=4 b2 size=3 c3 size=3" ] || fail "--min-size 3: $(cat "$tmp/out")"
"$segd" identity components --db "$tmp/db" --min-size 4 --limit 1 | cut -d' ' -f1 > "$tmp/out"
[ "$(cat "$tmp/out")" = t5 ] || fail "--min-size 4 --limit 1: $(cat "$tmp/out")"
"$segd" identity components --db "$tmp/db" --limit 3 | cut -d' ' -f1 | paste -sd' ' > "$tmp/out"
[ "$(cat "$tmp/out")" = "t5 m1 b2" ] || fail "--limit 3: $(cat "$tmp/out")"
"$segd" identity components --db "$tmp/db" --min-size 26 > "$tmp/out" || fail "--min-size 26: exit $?"
[ ! -s "$tmp/out" ] || fail "--min-size 26 listed: $(cat "$tmp/out")"
for bad in "--min-size 1" "--min-size x" "--limit 0"; do
  rc=0
  # shellcheck disable=SC2086
  "$segd" identity components --db "$tmp/db" $bad > /dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "components $bad: exit $rc, want 2"
done

# --json: every member, the same order
"$segd" identity components --db "$tmp/db" --json > "$tmp/json" || fail "--json: exit $?"
/usr/bin/python3 - "$tmp/json" <<'PY' || fail "--json: $(cat "$tmp/json")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = [("t5", ["t5"] + ["u%02d" % i for i in range(24)]), ("m1", ["m1", "x1", "y1", "z1"]),
        ("b2", ["b2", "a2", "k2"]), ("c3", ["c3", "d3", "e3"]), ("f4", ["f4", "g4"])]
got = [(r["master"], r["members"]) for r in rows]
assert got == want, got
assert [r["size"] for r in rows] == [25, 4, 3, 3, 2], rows
assert all(set(r) == {"master", "size", "members"} for r in rows), rows
PY
"$segd" identity components --db "$tmp/db" --json --min-size 3 --limit 2 | wc -l > "$tmp/out"
[ "$(cat "$tmp/out")" = 2 ] || fail "--json --limit 2: $(cat "$tmp/out") lines"

# a store whose graph is empty lists nothing (exit 0)
: > "$tmp/empty.jsonl"
"$segd" identity backfill --db "$tmp/db0" "$tmp/empty.jsonl" > /dev/null 2>&1 || fail "empty backfill"
"$segd" identity components --db "$tmp/db0" > "$tmp/out" || fail "components of an empty graph"
[ ! -s "$tmp/out" ] || fail "empty graph listed: $(cat "$tmp/out")"

# produce to a broker that never answers: nothing acknowledged, exit 1
rc=0
head -3 "$tmp/links.jsonl" > "$tmp/three.jsonl"
"$segd" identity produce --brokers 127.0.0.1:1 --topic t.links "$tmp/three.jsonl" \
  > "$tmp/pout" 2> "$tmp/perr" || rc=$?
[ "$rc" = 1 ] || fail "produce to no broker: exit $rc, want 1: $(cat "$tmp/pout" "$tmp/perr")"
grep -qx "produced 3 link events (3 links, 0 unlinks) to t.links: delivered 0 of 3" "$tmp/pout" ||
  fail "produce's report: $(cat "$tmp/pout")"
grep -q "delivered 0 of 3 link events to t.links: no broker answered at 127.0.0.1:1: " "$tmp/perr" ||
  fail "produce's error: $(cat "$tmp/perr")"
# SIGINT while nothing can be delivered: the queue is dropped, the report
# says so and counts nothing delivered (exit 1, not the signal's 130), at
# once rather than after the 30 s delivery timeout
"$segd" identity produce --brokers 127.0.0.1:1 --topic t.links "$tmp/three.jsonl" \
  > "$tmp/pout" 2> "$tmp/perr" &
ppid=$!
sleep 1
kill -INT $ppid
rc=0
start=$(date +%s)
wait $ppid || rc=$?
[ "$rc" = 1 ] || fail "produce after SIGINT: exit $rc, want 1: $(cat "$tmp/perr")"
[ $(( $(date +%s) - start )) -lt 15 ] || fail "produce took $(( $(date +%s) - start )) s to stop"
grep -q "interrupted (3 of 3 link events queued): delivered 0 of 3 link events to t.links" \
  "$tmp/perr" || fail "produce's interrupted report: $(cat "$tmp/perr")"
echo "identity_components: ok"
