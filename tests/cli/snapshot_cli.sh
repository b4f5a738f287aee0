#!/usr/bin/env bash
# Snapshots (one unit per input partition) end to end through the CLI:
# export a backfilled store as --buckets units and a store with offsets as
# the units of its partitions; topology.json and the unit manifests; verify
# (a line per unit); read every unit back with an independent Avro reader
# (Debian's python3-avro) and an independent murmur2 (Kafka's), checking that
# each user sits in the unit of its partition and equals `segd get --json`;
# the native format (every unit's records_format) decoded by an independent
# decoder written from docs/record-format.md equals the avro one, an unknown
# records_format is refused by name; a damaged unit fails verify, named; a
# unit that cannot be written leaves
# its previous unit while the others land; upload to a real nginx (WebDAV
# PUT) on loopback and verify over HTTP; a second export replaces the first
# without a moment without a manifest and removes the first one's files; a
# server that keeps failing one unit's PUT is retried and leaves that unit as
# it was.
# usage: snapshot_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-snap-XXXXXX)
nginx_pid=
cleanup() {
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000
# Under ThreadSanitizer (scripts/test.sh sets UNDER_TSAN) what matters is the
# exporter's threads, not the formats: fewer users, and the independent
# Python readers (the same in every build) are left to the other runs.
users=300
[ -n "${UNDER_TSAN:-}" ] && users=60
nusers=$((users + 1))
pycheck() { # python3 ARGS... with the program on stdin, unless under TSan
  if [ -n "${UNDER_TSAN:-}" ]; then cat > /dev/null; return 0; fi
  /usr/bin/python3 "$@"
}

# a store with upserts, removes, an erase and a retirement
"$segd" generate --out "$tmp/seed.jsonl" --users $users --now $now >/dev/null
cat > "$tmp/hand.jsonl" <<'JL'
{"user_id":"u0000000001","ts_ms":1799999990000,"op":"REMOVE","segments":[{"segment_id":1,"ttl_s":0}]}
{"user_id":"u0000000002","ts_ms":1799999990000,"op":"ERASE_USER","segments":[]}
{"user_id":"u0000000002","ts_ms":1799999995000,"op":"UPSERT","segments":[{"segment_id":77,"ttl_s":86400,"flags":3,"partner_id":-4}]}
{"user_id":"only-tombstones","ts_ms":1799999990000,"op":"REMOVE","segments":[{"segment_id":5,"ttl_s":0}]}
JL
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" "$tmp/hand.jsonl" >/dev/null
first_seg=$(/usr/bin/python3 -c "import json;print(json.loads(open('$tmp/seed.jsonl').readline())['segments'][0]['segment_id'])")
"$segd" segments retire --db "$tmp/db" --before-ms $((now * 1000)) "$first_seg" >/dev/null

# a store without offsets needs a topic, then exports --buckets units
if "$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --now $now 2> "$tmp/err"; then
  fail "export without offsets or --topic succeeded"
fi
grep -q -- "--topic" "$tmp/err" || fail "usage error names --topic: $(cat "$tmp/err")"
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --topic events --buckets 8 \
  --now $now > "$tmp/out"
grep -q "snapshot: 8 units of events (8 partitions, murmur2_random), $nusers users" "$tmp/out" ||
  fail "export summary: $(cat "$tmp/out")"
[ "$(ls -d "$tmp/snap/events"/p-0000[0-7] | wc -l)" = 8 ] || fail "expected 8 unit directories"

# the configuration comes from SEGD_* variables as for segd run (issue 23):
# the topic, the buckets and the change topic the manifests name; flags win
changes_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["changes"]["topic"])' "$1"; }
SEGD_TOPICS=events SEGD_SNAPSHOT_BUCKETS=4 SEGD_CHANGES_TOPIC=env.changes \
  "$segd" snapshot export --db "$tmp/db" --to "$tmp/snapenv" --now $now > "$tmp/out" ||
  fail "export from the environment: $(cat "$tmp/out")"
grep -q "snapshot: 4 units of events" "$tmp/out" || fail "environment's topic and buckets: $(cat "$tmp/out")"
horizon_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["horizon_ms"])' "$1"; }
[ "$(horizon_of "$tmp/snapenv/events/p-00000/manifest.json")" = 604800000 ] ||
  fail "default horizon not store.horizon.s's 7 days: $(horizon_of "$tmp/snapenv/events/p-00000/manifest.json")"
SEGD_STORE_HORIZON_S=86400 "$segd" snapshot export --db "$tmp/db" --to "$tmp/snaphz" --topic events \
  --buckets 2 --now $now > /dev/null || fail "export with SEGD_STORE_HORIZON_S"
[ "$(horizon_of "$tmp/snaphz/events/p-00000/manifest.json")" = 86400000 ] ||
  fail "SEGD_STORE_HORIZON_S not in the manifest: $(horizon_of "$tmp/snaphz/events/p-00000/manifest.json")"
[ "$(changes_of "$tmp/snapenv/events/p-00000/manifest.json")" = env.changes ] ||
  fail "SEGD_CHANGES_TOPIC not in the manifest: $(cat "$tmp/snapenv/events/p-00000/manifest.json")"
SEGD_CHANGES_TOPIC=env.changes "$segd" snapshot export --db "$tmp/db" --to "$tmp/snapflag" \
  --topic events --buckets 2 --changes-topic flag.changes --now $now > /dev/null
[ "$(changes_of "$tmp/snapflag/events/p-00000/manifest.json")" = flag.changes ] ||
  fail "--changes-topic does not win over SEGD_CHANGES_TOPIC"
if SEGD_NO_SUCH_KEY=1 "$segd" snapshot export --db "$tmp/db" --to "$tmp/snapbad" --topic events \
  --now $now > /dev/null 2> "$tmp/err"; then fail "an unknown SEGD_ variable was accepted"; fi
grep -q "SEGD_NO_SUCH_KEY" "$tmp/err" || fail "unknown variable not named: $(cat "$tmp/err")"

# dead entries (issue 23): a backfilled store (W = 0) keeps its expired entries
# in the units (a cache needs them to join older deltas exactly) and says so,
# naming what ends it; after `segd compact --end-history` (W = now - horizon -
# grace) the units hold only the live entries: the expired ones are older than W
wall=$(date +%s)
old=$(((wall - 10 * 86400) * 1000))
cat > "$tmp/dead.jsonl" <<JL
{"user_id":"live","ts_ms":$old,"op":"UPSERT","segments":[{"segment_id":1,"ttl_s":2592000}]}
{"user_id":"gone","ts_ms":$old,"op":"UPSERT","segments":[{"segment_id":2,"ttl_s":86400}]}
{"user_id":"mixed","ts_ms":$old,"op":"UPSERT","segments":[{"segment_id":3,"ttl_s":86400},{"segment_id":4,"ttl_s":2592000}]}
JL
"$segd" backfill --db "$tmp/dbdead" --now "$wall" "$tmp/dead.jsonl" > /dev/null || fail "backfill dead"
dead_export() { # DEST: exports the store, the summary in $tmp/out, stderr in $tmp/err
  "$segd" snapshot export --db "$tmp/dbdead" --to "$1" --topic events --buckets 2 \
    --now "$wall" > "$tmp/out" 2> "$tmp/err" || fail "export $1: $(cat "$tmp/err")"
}
dead_export "$tmp/dead1"
grep -q "snapshot: 2 units of events .*, 3 users, 4 entries" "$tmp/out" ||
  fail "W = 0 export: $(cat "$tmp/out")"
grep -q "GC watermark W is 0 .*keep every tombstone and expired entry.*segd compact --end-history" \
  "$tmp/err" || fail "no note on the dead entries kept: $(cat "$tmp/err")"
"$segd" compact --db "$tmp/dbdead" --now "$wall" --end-history > "$tmp/compact.out" 2>&1 ||
  fail "compact --end-history: $(cat "$tmp/compact.out")"
dead_export "$tmp/dead2"
grep -q "snapshot: 2 units of events .*, 2 users, 2 entries" "$tmp/out" ||
  fail "after compact --end-history the export holds dead entries: $(cat "$tmp/out")"
grep -q "GC watermark" "$tmp/err" && fail "the note with W > 0: $(cat "$tmp/err")"
"$segd" snapshot verify "$tmp/dead2/events" | grep -q "^valid: events, 2 units .* 2 users, 2 entries" ||
  fail "verify after compact: $("$segd" snapshot verify "$tmp/dead2/events" 2>&1)"
[ "$(ls "$tmp/snap/events"/p-*/p-*.avro | wc -l)" = 8 ] || fail "expected 8 unit files"
ls -R "$tmp/snap" | grep -q partial && fail "staging files left behind"
# what a SIGKILLed export leaves (a staged file, a manifest temporary) is
# removed by the next export into the unit; other files are not ours
touch "$tmp/snap/events/p-00003/p-00003-1.avro.partial" \
  "$tmp/snap/events/p-00003/manifest.json.tmp.424242" "$tmp/snap/events/p-00003/notes.txt"
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --topic events --buckets 8 \
  --now $now >/dev/null
ls "$tmp/snap/events/p-00003" | grep -q 'partial\|\.tmp\.' && fail "a killed export's files were kept"
[ -e "$tmp/snap/events/p-00003/notes.txt" ] || fail "an unrelated file was removed"
rm "$tmp/snap/events/p-00003/notes.txt"
"$segd" snapshot verify "$tmp/snap" > "$tmp/out" || fail "verify: $(cat "$tmp/out")"
grep -q "^valid: events, 8 units (8 partitions, murmur2_random), $nusers users" "$tmp/out" ||
  fail "verify summary: $(cat "$tmp/out")"
[ "$(grep -c '^p-0000[0-7]: valid: ' "$tmp/out")" = 8 ] || fail "a line per unit: $(cat "$tmp/out")"
"$segd" snapshot verify "$tmp/snap/events" | grep -q "^valid: events, 8 units" ||
  fail "verify of DEST/<topic>"

# Kafka's murmur2 partitioner, written again from the Java client's
# Utils.murmur2 (not from core/partition.c)
cat > "$tmp/kafka_partition.py" <<'PY'
def murmur2(data):
    m, r = 0x5bd1e995, 24
    length = len(data)
    h = (0x9747b28c ^ length) & 0xffffffff
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xffffffff
        k ^= k >> r
        k = (k * m) & 0xffffffff
        h = (h * m) & 0xffffffff
        h ^= k
    tail = length % 4
    base = length - tail
    if tail >= 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    h ^= h >> 15
    return h

def partition(user_id, partitions):
    return (murmur2(user_id.encode()) & 0x7fffffff) % partitions
PY

# topology.json, the unit manifests, every user in the unit of its
# partition, and python3-avro's view of the units == segd get --json
"$segd" get --db "$tmp/db" --now $now --json $(
  /usr/bin/python3 -c "
import json
users = sorted({json.loads(l)['user_id'] for f in ('$tmp/seed.jsonl', '$tmp/hand.jsonl') for l in open(f)})
print(' '.join(users))") > "$tmp/get.jsonl"
PYTHONPATH="$tmp" pycheck - "$tmp/snap/events" "$tmp/get.jsonl" $now <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
from kafka_partition import partition
snap, get, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
topo = json.load(open(os.path.join(snap, "topology.json")))
assert topo["format"] == "segd-snapshot-topology" and topo["format_version"] == 1, topo
assert topo["topic"] == "events" and topo["partitions"] == 8, topo
assert topo["partitioner"] == "murmur2_random" and topo["records_format"] == "avro", topo
assert len(topo["schema_fingerprint"]) == 16, topo
seen, records, retired = {}, 0, None
for p in range(8):
    manifest = json.load(open(os.path.join(snap, "p-%05d" % p, "manifest.json")))
    assert manifest["format"] == "segd-snapshot-unit" and manifest["format_version"] == 2
    assert (manifest["topic"], manifest["partition"], manifest["partitions"]) == ("events", p, 8)
    assert manifest["partitioner"] == "murmur2_random"
    assert manifest["schema_fingerprint"] == topo["schema_fingerprint"]
    assert manifest["input_offsets"] == [], "a backfilled store has no offsets"
    units_retired = {r["segment_id"]: r["retired_before_ms"] for r in manifest["retirements"]}
    assert units_retired and (retired is None or retired == units_retired), "every unit has them"
    retired = units_retired
    n_unit = 0
    for f in manifest["files"]:
        n = 0
        with DataFileReader(open(os.path.join(snap, "p-%05d" % p, f["name"]), "rb"),
                            DatumReader()) as r:
            assert r.meta["avro.codec"] == b"deflate"
            for rec in r:
                n += 1
                assert partition(rec["user_id"], 8) == p, (rec["user_id"], p)
                assert rec["user_id"] not in seen, "a user in one unit only"
                live = [s for s in rec["segments"]
                        if s["expires_at"] > now and s["ts_ms"] > rec["erased_before_ms"]
                        and s["ts_ms"] > retired.get(s["id"], -1)]
                seen[rec["user_id"]] = live
        assert n == f["records"], (f["name"], n, f["records"])
        n_unit += n
    assert n_unit == manifest["records"]
    records += n_unit
assert records == 301, records
assert "only-tombstones" in seen and seen["only-tombstones"] == [], "tombstones travel"
compared = 0
for line in open(get):
    want = json.loads(line)
    got = seen.get(want["user_id"], [])
    assert got == want["segments"], (want["user_id"], len(got), len(want["segments"]))
    compared += 1
assert compared == 301, compared
assert any(s["partner_id"] == -4 for s in seen["u0000000002"])
PY

# the zstandard codec: verified by segd, read by python3-avro (python3-zstandard)
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snapz" --topic events --buckets 8 --now $now \
  --codec zstandard --level 3 >/dev/null || fail "zstandard export"
"$segd" snapshot verify "$tmp/snapz" | grep -q "^valid: events, 8 units .* $nusers users" ||
  fail "zstandard verify"
pycheck - "$tmp/snap/events" "$tmp/snapz/events" <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
def read(d, codec):
    out = {}
    for p in range(8):
        unit = os.path.join(d, "p-%05d" % p)
        manifest = json.load(open(os.path.join(unit, "manifest.json")))
        assert manifest["codec"] == codec
        for f in manifest["files"]:
            with DataFileReader(open(os.path.join(unit, f["name"]), "rb"), DatumReader()) as r:
                for rec in r:
                    out[rec["user_id"]] = rec
    return out
a, b = read(sys.argv[1], "deflate"), read(sys.argv[2], "zstandard")
assert a == b and len(a) == 301
PY

# the native format: verified by segd (every unit says records_format=native),
# its containers read by python3-avro, and every record decoded by
# tests/support/record_format_ref.py (written from docs/record-format.md alone) equal
# to the avro unit's record, each in the unit of its partition
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snapn" --topic events --buckets 8 \
  --now $now --format native >/dev/null || fail "native export"
"$segd" snapshot verify "$tmp/snapn" > "$tmp/out" || fail "native verify: $(cat "$tmp/out")"
grep -q "^valid: events, 8 units .* $nusers users.*records_format=native$" "$tmp/out" ||
  fail "native verify summary: $(cat "$tmp/out")"
[ "$(grep -c '^p-0000[0-7]: valid: .*records_format=native$' "$tmp/out")" = 8 ] ||
  fail "native verify units: $(cat "$tmp/out")"
if "$segd" snapshot export --db "$tmp/db" --to "$tmp/snapx" --topic events --format protobuf \
  2>/dev/null; then
  fail "an unknown --format was taken"
fi
PYTHONPATH="$tmp:$2/tests/support" pycheck - "$tmp/snap/events" "$tmp/snapn/events" <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
from kafka_partition import partition
import record_format_ref
def read(d, fmt):
    topo = json.load(open(os.path.join(d, "topology.json")))
    assert topo["records_format"] == fmt, topo
    out, segments = {}, 0
    for p in range(topo["partitions"]):
        unit = os.path.join(d, "p-%05d" % p)
        m = json.load(open(os.path.join(unit, "manifest.json")))
        assert m["records_format"] == fmt, m
        assert m["schema_fingerprint"] == topo["schema_fingerprint"], (m, topo)
        segments += m["segments"]
        for f in m["files"]:
            with DataFileReader(open(os.path.join(unit, f["name"]), "rb"), DatumReader()) as r:
                for rec in r:
                    assert partition(rec["user_id"], 8) == p, (rec["user_id"], p)
                    out[rec["user_id"]] = rec
    return topo, segments, out
ta, sa, a = read(sys.argv[1], "avro")
tn, sn, n = read(sys.argv[2], "native")
assert ta["schema_fingerprint"] != tn["schema_fingerprint"]
assert sa == sn
for p in range(8):
    m = json.load(open(os.path.join(sys.argv[2], "p-%05d" % p, "manifest.json")))
    assert m["codec"] == "null", m
assert a.keys() == n.keys() and len(a) == 301
for user, rec in n.items():
    erased, entries = record_format_ref.decode(rec["record"])
    want = a[user]
    got = [{"id": i, "expires_at": e, "ts_ms": t, "flags": f, "partner_id": p}
           for i, t, e, f, p in entries]
    assert erased == want["erased_before_ms"], user
    assert got == want["segments"], user
PY
# a unit manifest with an unknown records_format is refused by name
cp -r "$tmp/snapn" "$tmp/badfmt"
sed -i 's/"records_format": "native"/"records_format": "columnar"/' \
  "$tmp/badfmt/events/p-00004/manifest.json"
if "$segd" snapshot verify "$tmp/badfmt" > "$tmp/out"; then fail "unknown records_format verified"; fi
grep -q "^p-00004: invalid: .*records_format 'columnar'" "$tmp/out" ||
  fail "unknown format: $(cat "$tmp/out")"
# units of both formats in one snapshot (a fleet changing snapshot.format):
# each unit is read by its own manifest
cp -r "$tmp/snap" "$tmp/mixed"
"$segd" snapshot export --db "$tmp/db" --to "$tmp/mixed" --topic events --buckets 8 \
  --partitions 1,6 --now $now --format native >/dev/null || fail "native units into avro ones"
"$segd" snapshot verify "$tmp/mixed" > "$tmp/out" || fail "mixed verify: $(cat "$tmp/out")"
grep -q "^valid: events, 8 units .* $nusers users.*records_format=mixed$" "$tmp/out" ||
  fail "mixed verify summary: $(cat "$tmp/out")"
grep -q "^p-00006: valid: .*records_format=native$" "$tmp/out" || fail "p-00006 native"
grep -q "^p-00005: valid: .*records_format=avro$" "$tmp/out" || fail "p-00005 avro"

# a damaged unit is detected and named; the other units still verify
cp -r "$tmp/snap" "$tmp/bad"
b3=$(basename "$(ls "$tmp/bad/events/p-00003"/p-00003-*.avro)")
printf 'X' | dd of="$tmp/bad/events/p-00003/$b3" bs=1 seek=200 conv=notrunc status=none
if "$segd" snapshot verify "$tmp/bad" > "$tmp/out"; then fail "damaged snapshot verified"; fi
grep -q "^p-00003: invalid: $b3: SHA-256 mismatch" "$tmp/out" ||
  fail "verify names the unit and file: $(cat "$tmp/out")"
grep -q "^invalid: events unit p-00003: " "$tmp/out" || fail "summary names the unit: $(cat "$tmp/out")"
[ "$(grep -c '^p-0000[0-7]: valid: ' "$tmp/out")" = 7 ] || fail "the other units: $(cat "$tmp/out")"

# a unit that cannot be written (its lock is a directory) fails alone: its
# previous unit stays whole, the other units land, the export says so
cp -r "$tmp/snap" "$tmp/one"
old2=$(grep -o '"created_at_ms": [0-9]*' "$tmp/one/events/p-00002/manifest.json")
old5=$(grep -o '"created_at_ms": [0-9]*' "$tmp/one/events/p-00005/manifest.json")
rm "$tmp/one/events/p-00002/.segd-export.lock"
mkdir "$tmp/one/events/p-00002/.segd-export.lock"
if "$segd" snapshot export --db "$tmp/db" --to "$tmp/one" --topic events --buckets 8 \
  --now $now > "$tmp/out" 2> "$tmp/err"; then fail "export with an unwritable unit succeeded"; fi
grep -q "1 units failed .*unit events/p-00002" "$tmp/err" || fail "names the unit: $(cat "$tmp/err")"
grep -q "snapshot: 7 units of events" "$tmp/out" || fail "the other units landed: $(cat "$tmp/out")"
[ "$(grep -o '"created_at_ms": [0-9]*' "$tmp/one/events/p-00002/manifest.json")" = "$old2" ] ||
  fail "the failed unit's manifest changed"
[ "$(grep -o '"created_at_ms": [0-9]*' "$tmp/one/events/p-00005/manifest.json")" != "$old5" ] ||
  fail "another unit was not replaced"
[ "$(ls "$tmp/one/events"/p-*/*.avro | wc -l)" = 8 ] || fail "files left or lost: $(ls -R "$tmp/one")"
"$segd" snapshot verify "$tmp/one" | grep -q "^valid: events, 8 units .* $nusers users" ||
  fail "the snapshot is no longer whole"

# a store with input offsets: a unit per partition it holds an offset for,
# P = the largest + 1 unless the destination's topology or --partition-count
# says more; --partitions restricts
cp -r "$tmp/db" "$tmp/dbo"
"$segd" offsets set --db "$tmp/dbo" --topic in --force 1:10,4:20 >/dev/null
"$segd" snapshot export --db "$tmp/dbo" --to "$tmp/byoff" --now $now > "$tmp/out" ||
  fail "export by offsets: $(cat "$tmp/out")"
grep -q "snapshot: 2 units of in (5 partitions, murmur2_random)" "$tmp/out" ||
  fail "units by offsets: $(cat "$tmp/out")"
[ "$(ls "$tmp/byoff/in" | tr '\n' ' ')" = "p-00001 p-00004 topology.json " ] ||
  fail "unit directories: $(ls "$tmp/byoff/in")"
grep -q '"next_offset": 20' "$tmp/byoff/in/p-00004/manifest.json" || fail "p-00004's offset"
grep -q '"next_offset": 10' "$tmp/byoff/in/p-00004/manifest.json" && fail "p-00001's offset in p-00004"
# a unit never goes back along its input: the store rewound to 4:5 (as a
# store replaying the partition from its beginning would be) keeps unit 4
cp -r "$tmp/dbo" "$tmp/dbr"
"$segd" offsets set --db "$tmp/dbr" --topic in 4:5 >/dev/null
if "$segd" snapshot export --db "$tmp/dbr" --to "$tmp/byoff" --now $now > "$tmp/out" 2>&1
then fail "a unit behind the destination's replaced it"; fi
grep -q "p-00004.*further along its input (offset 20 > 5): kept" "$tmp/out" ||
  fail "kept unit not named: $(cat "$tmp/out")"
grep -q '"next_offset": 20' "$tmp/byoff/in/p-00004/manifest.json" || fail "unit 4 went back"
grep -q '"next_offset": 10' "$tmp/byoff/in/p-00001/manifest.json" || fail "unit 1 not exported"
if "$segd" snapshot verify "$tmp/byoff" > "$tmp/out"; then fail "3 of 5 units missing, yet valid"; fi
grep -q "^p-00000: invalid: missing" "$tmp/out" || fail "missing unit named: $(cat "$tmp/out")"
"$segd" snapshot export --db "$tmp/dbo" --to "$tmp/byoff8" --partition-count 8 \
  --partitions 4 --partitioner fnv1a_random --now $now > "$tmp/out"
grep -q "snapshot: 1 units of in (8 partitions, fnv1a_random)" "$tmp/out" ||
  fail "--partition-count/--partitions: $(cat "$tmp/out")"
[ "$(ls "$tmp/byoff8/in" | tr '\n' ' ')" = "p-00004 topology.json " ] || fail "only unit 4"
grep -q '"partitions": 8' "$tmp/byoff8/in/topology.json" || fail "topology partitions"
# a later export into it takes P from the topology (a fleet member holding
# only partitions 1 and 4 of 8)
"$segd" snapshot export --db "$tmp/dbo" --to "$tmp/byoff8" --partitioner fnv1a_random \
  --now $now > "$tmp/out"
grep -q "snapshot: 2 units of in (8 partitions" "$tmp/out" || fail "P from topology: $(cat "$tmp/out")"
if "$segd" snapshot export --db "$tmp/dbo" --to "$tmp/x" --partitions 5 --now $now 2>"$tmp/err"
then fail "a unit past P was exported"; fi

# nginx with WebDAV PUT on loopback; one path always fails with 503
port=$(/usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
mkdir -p "$tmp/nginx/www" "$tmp/nginx/body"
cat > "$tmp/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
user root;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
events {}
http {
  access_log $tmp/nginx/access.log;
  client_body_temp_path $tmp/nginx/body;
  client_max_body_size 100m;
  server {
    listen 127.0.0.1:$port;
    root $tmp/nginx/www;
    location ~ ^/failing/(empty/)?events/p-00003/p-00003- {
      if (\$request_method = PUT) { return 503; }
      dav_methods PUT DELETE;
    }
    location / { dav_methods PUT DELETE; create_full_put_path on; }
  }
}
EOF
/usr/sbin/nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
nginx_pid=$!
for _ in $(seq 50); do
  (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.1
done
exp=(--db "$tmp/db" --topic events --buckets 8 --now $now)
"$segd" snapshot export "${exp[@]}" --to "http://127.0.0.1:$port/snaps/a" > "$tmp/out" ||
  fail "upload: $(cat "$tmp/out")"
www=$tmp/nginx/www
ls "$www/snaps/a/events/p-00005"/p-00005-*.avro >/dev/null 2>&1 || fail "unit not uploaded"
[ -s "$www/snaps/a/events/p-00005/manifest.json" ] || fail "manifest not uploaded"
[ -s "$www/snaps/a/events/topology.json" ] || fail "topology not uploaded"
"$segd" snapshot verify "http://127.0.0.1:$port/snaps/a/events" |
  grep -q "^valid: events, 8 units .* $nusers users" || fail "verify over http"
# a second export replaces the first: a reader polling meanwhile always finds
# a whole snapshot, and the first one's files are gone afterwards
first=$(ls "$www/snaps/a/events"/p-*/*.avro | sort | head -1)
( for _ in $(seq 40); do
    "$segd" snapshot verify "http://127.0.0.1:$port/snaps/a/events" >/dev/null || echo gap
    sleep 0.05
  done ) > "$tmp/poll" &
poller=$!
"$segd" snapshot export "${exp[@]}" --to "http://127.0.0.1:$port/snaps/a" >/dev/null ||
  fail "second upload"
wait $poller
[ -s "$tmp/poll" ] && fail "a reader found no whole snapshot during the second export"
"$segd" snapshot verify "http://127.0.0.1:$port/snaps/a/events" >/dev/null || fail "second verify"
[ -e "$first" ] && fail "the first snapshot's files were not removed"
[ "$(ls "$www/snaps/a/events"/p-*/*.avro | wc -l)" = 8 ] || fail "stale unit files"

# a failing unit over a valid snapshot leaves that unit as it was (and the
# snapshot valid); the other units are replaced. Retries as the config says.
printf 'snapshot.upload.retries = 2\nsnapshot.upload.backoff.ms = 20\n' > "$tmp/retry.conf"
exp+=(--config "$tmp/retry.conf")
cp -r "$www/snaps/a" "$www/failing"
old3=$(cat "$www/failing/events/p-00003/manifest.json")
if "$segd" snapshot export "${exp[@]}" --to "http://127.0.0.1:$port/failing" > "$tmp/out" \
  2> "$tmp/err"; then fail "export to a failing server succeeded"; fi
"$segd" snapshot verify "http://127.0.0.1:$port/failing/events" |
  grep -q "^valid: events, 8 units .* $nusers users" ||
  fail "a failed upload broke the snapshot that was there"
[ "$(cat "$www/failing/events/p-00003/manifest.json")" = "$old3" ] || fail "unit 3 changed"
[ "$(ls "$www/failing/events/p-00003"/*.avro | wc -l)" = 1 ] || fail "a failed upload left files"
[ "$(ls "$www/failing/events"/p-*/*.avro | wc -l)" = 8 ] || fail "stale files of other units"
grep -q "503" "$tmp/err" || fail "error names the status: $(cat "$tmp/err")"
grep -q "p-00003" "$tmp/err" || fail "error names the unit: $(cat "$tmp/err")"
attempts=$(grep -c "PUT /failing/events/p-00003/p-00003-" "$tmp/nginx/access.log" || true)
[ "$attempts" = 3 ] || fail "expected 1 try + 2 retries (snapshot.upload.retries), saw $attempts"
# and into an empty place: no manifest for that unit, which verify names
if "$segd" snapshot export "${exp[@]}" --to "http://127.0.0.1:$port/failing/empty" \
  > /dev/null 2>&1; then fail "export to a failing server succeeded"; fi
[ -e "$www/failing/empty/events/p-00003/manifest.json" ] && fail "a failed upload left a manifest"
if "$segd" snapshot verify "http://127.0.0.1:$port/failing/empty/events" > "$tmp/out"; then
  fail "verify of a half upload succeeded"
fi
grep -q "^p-00003: invalid: missing" "$tmp/out" || fail "the missing unit: $(cat "$tmp/out")"
echo "snapshot_cli: ok"
