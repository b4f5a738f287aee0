#!/usr/bin/env bash
# Issue 9 #15: `segd backfill` of an Avro file whose records include user ids
# that are not UTF-8 (a surrogate, an overlong '/'): each is reported as
# file:#record and skipped, the valid ones apply, exit status 3; the
# snapshot exported afterwards verifies and `segd get --json` prints ids.
# usage: cli_utf8.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
tmp=$(mktemp -d /tmp/segd-utf8-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000
/usr/bin/python3 - "$src/schemas/segment_event.avsc" "$tmp/events.avro" <<'PY'
import avro.schema, avro.datafile, avro.io, sys
schema = avro.schema.parse(open(sys.argv[1]).read())
w = avro.datafile.DataFileWriter(open(sys.argv[2], "wb"), avro.io.DatumWriter(), schema)
# placeholders of the same length as the bad bytes, patched below (python's
# Avro writer only writes well-formed strings; the null codec keeps bytes)
for user in ["caf\u00e9", "XXXsur", "YYovl", "ok"]:
    w.append({"user_id": user, "ts_ms": 1799990000000, "op": "UPSERT",
              "segments": [{"segment_id": 5, "ttl_s": 86400, "flags": 0, "partner_id": 0}],
              "source": None})
w.close()
data = open(sys.argv[2], "rb").read()
data = data.replace(b"XXXsur", b"\xed\xa0\x80sur").replace(b"YYovl", b"\xc0\xafovl")
open(sys.argv[2], "wb").write(data)
PY
rc=0
"$segd" backfill --db "$tmp/db" --now $now "$tmp/events.avro" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ $rc = 3 ] || fail "backfill exit $rc, want 3: $(cat "$tmp/err")"
grep -q "applied 2 events (2 segments), skipped 2" "$tmp/out" || fail "summary: $(cat "$tmp/out")"
grep -q "events.avro:#2: user_id is not valid UTF-8" "$tmp/err" || fail "report: $(cat "$tmp/err")"
grep -q "events.avro:#3: user_id is not valid UTF-8" "$tmp/err" || fail "report: $(cat "$tmp/err")"
out=$("$segd" get --db "$tmp/db" --now $now --json "café" ok)
[ "$(echo "$out" | grep -c '"user_id"')" = 2 ] || fail "get --json: $out"
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --topic events --buckets 2 --now $now \
  > /dev/null 2>&1 || fail "export"
"$segd" snapshot verify "$tmp/snap" | grep -q "^valid: events, 2 units .* 2 users" ||
  fail "verify: $("$segd" snapshot verify "$tmp/snap" 2>&1)"
echo "cli_utf8: ok"
