#!/usr/bin/env bash
# Snapshots end to end through the CLI: export to a directory, verify, read
# every bucket back with an independent Avro reader (Debian's python3-avro)
# and compare each user's live segments with `segd get --json`; the native
# format decoded by an independent decoder written from docs/record-format.md
# equals the avro one; a damaged
# bucket fails verify; upload to a real nginx (WebDAV PUT) on loopback and
# verify over HTTP; a second export replaces the first without a moment
# without a manifest and removes the first one's files; a server that keeps
# failing one PUT is retried, leaves no manifest and no files behind, and an
# older snapshot at the same place stays valid.
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

# a store with upserts, removes, an erase and a retirement
"$segd" generate --out "$tmp/seed.jsonl" --users 300 --now $now >/dev/null
cat > "$tmp/hand.jsonl" <<'JL'
{"user_id":"u0000000001","ts_ms":1799999990000,"op":"REMOVE","segments":[{"segment_id":1,"ttl_s":0}]}
{"user_id":"u0000000002","ts_ms":1799999990000,"op":"ERASE_USER","segments":[]}
{"user_id":"u0000000002","ts_ms":1799999995000,"op":"UPSERT","segments":[{"segment_id":77,"ttl_s":86400,"flags":3,"partner_id":-4}]}
{"user_id":"only-tombstones","ts_ms":1799999990000,"op":"REMOVE","segments":[{"segment_id":5,"ttl_s":0}]}
JL
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" "$tmp/hand.jsonl" >/dev/null
first_seg=$(/usr/bin/python3 -c "import json;print(json.loads(open('$tmp/seed.jsonl').readline())['segments'][0]['segment_id'])")
"$segd" segments retire --db "$tmp/db" --before-ms $((now * 1000)) "$first_seg" >/dev/null

# export + verify
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --buckets 8 --now $now > "$tmp/out"
grep -q "snapshot: 301 users" "$tmp/out" || fail "export summary: $(cat "$tmp/out")"
[ "$(ls "$tmp/snap"/bucket-*.avro | wc -l)" = 8 ] || fail "expected 8 bucket files"
ls "$tmp/snap" | grep -q partial && fail "staging files left behind"
# what a SIGKILLed export leaves (staged buckets, a manifest temporary) is
# removed by the next export into the directory; other files are not ours
touch "$tmp/snap/bucket-00003-1.avro.partial" "$tmp/snap/manifest.json.tmp.424242" \
  "$tmp/snap/notes.txt"
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --buckets 8 --now $now >/dev/null
ls "$tmp/snap" | grep -q 'partial\|\.tmp\.' && fail "a killed export's files were kept"
[ -e "$tmp/snap/notes.txt" ] || fail "an unrelated file was removed"
rm "$tmp/snap/notes.txt"
"$segd" snapshot verify "$tmp/snap" | grep -q "^valid: 301 users" || fail "verify"

# every user: python3-avro's view of the snapshot == segd get --json
"$segd" get --db "$tmp/db" --now $now --json $(
  /usr/bin/python3 -c "
import json
users = sorted({json.loads(l)['user_id'] for f in ('$tmp/seed.jsonl', '$tmp/hand.jsonl') for l in open(f)})
print(' '.join(users))") > "$tmp/get.jsonl"
/usr/bin/python3 - "$tmp/snap" "$tmp/get.jsonl" $now <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
snap, get, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
manifest = json.load(open(os.path.join(snap, "manifest.json")))
retired = {r["segment_id"]: r["retired_before_ms"] for r in manifest["retirements"]}
assert retired, "the retirement is in the manifest"
seen, records = {}, 0
for f in manifest["files"]:
    n = 0
    with DataFileReader(open(os.path.join(snap, f["name"]), "rb"), DatumReader()) as r:
        assert r.meta["avro.codec"] == b"deflate"
        for rec in r:
            n += 1
            live = [s for s in rec["segments"]
                    if s["expires_at"] > now and s["ts_ms"] > rec["erased_before_ms"]
                    and s["ts_ms"] > retired.get(s["id"], -1)]
            seen[rec["user_id"]] = live
    assert n == f["records"], (f["name"], n, f["records"])
    records += n
assert records == manifest["records"] == 301, records
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
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snapz" --buckets 8 --now $now \
  --codec zstandard --level 3 >/dev/null || fail "zstandard export"
"$segd" snapshot verify "$tmp/snapz" | grep -q "^valid: 301 users" || fail "zstandard verify"
/usr/bin/python3 - "$tmp/snap" "$tmp/snapz" <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
def read(d):
    out = {}
    for f in json.load(open(os.path.join(d, "manifest.json")))["files"]:
        with DataFileReader(open(os.path.join(d, f["name"]), "rb"), DatumReader()) as r:
            for rec in r:
                out[rec["user_id"]] = rec
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
assert json.load(open(os.path.join(sys.argv[2], "manifest.json")))["codec"] == "zstandard"
assert a == b and len(a) == 301
PY

# the native format: verified by segd, its container read by python3-avro, and
# every record decoded by tests/record_format_ref.py (written from
# docs/record-format.md alone) equal to the avro snapshot's record
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snapn" --buckets 8 --now $now \
  --format native >/dev/null || fail "native export"
"$segd" snapshot verify "$tmp/snapn" | grep -q "^valid: 301 users.*record_format=native$" || fail "native verify"
if "$segd" snapshot export --db "$tmp/db" --to "$tmp/snapx" --format protobuf 2>/dev/null; then
  fail "an unknown --format was taken"
fi
/usr/bin/python3 - "$tmp/snap" "$tmp/snapn" "$2/tests" <<'PY'
import json, os, sys
from avro.datafile import DataFileReader
from avro.io import DatumReader
sys.path.insert(0, sys.argv[3])
import record_format_ref
def read(d):
    out = {}
    m = json.load(open(os.path.join(d, "manifest.json")))
    for f in m["files"]:
        with DataFileReader(open(os.path.join(d, f["name"]), "rb"), DatumReader()) as r:
            for rec in r:
                out[rec["user_id"]] = rec
    return m, out
ma, a = read(sys.argv[1])
mn, n = read(sys.argv[2])
assert mn["record_format"] == "native" and mn["codec"] == "null", mn
assert ma["record_format"] == "avro" and ma["segments"] == mn["segments"]
assert a.keys() == n.keys() and len(a) == 301
for user, rec in n.items():
    erased, entries = record_format_ref.decode(rec["record"])
    want = a[user]
    got = [{"id": i, "expires_at": e, "ts_ms": t, "flags": f, "partner_id": p}
           for i, t, e, f, p in entries]
    assert erased == want["erased_before_ms"], user
    assert got == want["segments"], user
PY
# a native manifest with an unknown record format is refused by name
cp -r "$tmp/snapn" "$tmp/badfmt"
sed -i 's/"record_format": "native"/"record_format": "columnar"/' "$tmp/badfmt/manifest.json"
if "$segd" snapshot verify "$tmp/badfmt" > "$tmp/out"; then fail "unknown record_format verified"; fi
grep -q "record_format 'columnar'" "$tmp/out" || fail "unknown format: $(cat "$tmp/out")"

# a damaged bucket is detected
cp -r "$tmp/snap" "$tmp/bad"
b3=$(basename "$(ls "$tmp/bad"/bucket-00003-*.avro)")
printf 'X' | dd of="$tmp/bad/$b3" bs=1 seek=200 conv=notrunc status=none
if "$segd" snapshot verify "$tmp/bad" > "$tmp/out"; then fail "damaged snapshot verified"; fi
grep -q "$b3" "$tmp/out" || fail "verify names the file: $(cat "$tmp/out")"

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
    location ~ ^/failing/(empty/)?bucket-00003- {
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
"$segd" snapshot export --db "$tmp/db" --to "http://127.0.0.1:$port/snaps/a" --buckets 8 \
  --now $now > "$tmp/out" || fail "upload: $(cat "$tmp/out")"
ls "$tmp/nginx/www/snaps/a"/bucket-00005-*.avro >/dev/null 2>&1 || fail "bucket not uploaded"
[ -s "$tmp/nginx/www/snaps/a/manifest.json" ] || fail "manifest not uploaded"
"$segd" snapshot verify "http://127.0.0.1:$port/snaps/a" | grep -q "^valid: 301 users" ||
  fail "verify over http"
# a second export replaces the first: a reader polling meanwhile always finds
# a whole snapshot, and the first one's files are gone afterwards
first=$(ls "$tmp/nginx/www/snaps/a"/bucket-*.avro | sort | head -1)
( for _ in $(seq 40); do
    "$segd" snapshot verify "http://127.0.0.1:$port/snaps/a" >/dev/null || echo gap
    sleep 0.05
  done ) > "$tmp/poll" &
poller=$!
"$segd" snapshot export --db "$tmp/db" --to "http://127.0.0.1:$port/snaps/a" --buckets 8 \
  --now $now >/dev/null || fail "second upload"
wait $poller
[ -s "$tmp/poll" ] && fail "a reader found no whole snapshot during the second export"
"$segd" snapshot verify "http://127.0.0.1:$port/snaps/a" >/dev/null || fail "second verify"
[ -e "$first" ] && fail "the first snapshot's files were not removed"
[ "$(ls "$tmp/nginx/www/snaps/a"/bucket-*.avro | wc -l)" = 8 ] || fail "stale bucket files"

# a failing export over a valid snapshot leaves that snapshot valid
cp -r "$tmp/nginx/www/snaps/a" "$tmp/nginx/www/failing"

if "$segd" snapshot export --db "$tmp/db" --to "http://127.0.0.1:$port/failing" --buckets 8 \
  --now $now > "$tmp/out" 2> "$tmp/err"; then fail "export to a failing server succeeded"; fi
"$segd" snapshot verify "http://127.0.0.1:$port/failing" | grep -q "^valid: 301 users" ||
  fail "a failed upload broke the snapshot that was there"
[ "$(ls "$tmp/nginx/www/failing"/bucket-*.avro | wc -l)" = 8 ] || fail "a failed upload left files"
grep -q "503" "$tmp/err" || fail "error names the status: $(cat "$tmp/err")"
attempts=$(grep -c "PUT /failing/bucket-00003-" "$tmp/nginx/access.log" || true)
[ "$attempts" = 6 ] || fail "expected 1 try + 5 retries, saw $attempts"
# and into an empty place: no manifest at all
if "$segd" snapshot export --db "$tmp/db" --to "http://127.0.0.1:$port/failing/empty" \
  --buckets 8 --now $now > /dev/null 2>&1; then fail "export to a failing server succeeded"; fi
[ -e "$tmp/nginx/www/failing/empty/manifest.json" ] && fail "a failed upload left a manifest"
if "$segd" snapshot verify "http://127.0.0.1:$port/failing/empty" > "$tmp/out"; then
  fail "verify of a half upload succeeded"
fi
echo "snapshot_cli: ok"
