#!/usr/bin/env bash
# `segd backfill` reads every input format alike (issue 10): the same events
# as JSON lines, an Avro container file (deflate, written by python3-avro),
# JSON lines in gzip (two members) and zstd, and the container in zstd,
# each backfilled with --threads 1 and --threads 3, give byte-identical
# `segd get` output for every user and the same summary counts. Refused
# records name their line / record number whichever thread read them; a
# truncated .gz / .zst is reported, exit 3, with what was readable applied.
# usage: backfill_formats.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
tmp=$(mktemp -d /tmp/segd-formats-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000

# 3000 events (several 1 MiB blocks): lines 1234 and 2500 are valid JSON and
# Avro but refused by validation (empty user id, ts_ms 0)
"$segd" generate --out "$tmp/gen.jsonl" --users 60 --now $now >/dev/null
/usr/bin/python3 - "$tmp/gen.jsonl" "$tmp/in.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 3000
ev = json.loads(lines[1233]); ev["user_id"] = ""; lines[1233] = json.dumps(ev)
ev = json.loads(lines[2499]); ev["ts_ms"] = 0; lines[2499] = json.dumps(ev)
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
/usr/bin/python3 - "$src/schemas/segment_event.avsc" "$tmp/in.jsonl" "$tmp/in.avro" <<'PY'
import avro.schema, avro.datafile, avro.io, json, sys
schema = avro.schema.parse(open(sys.argv[1]).read())
w = avro.datafile.DataFileWriter(open(sys.argv[3], "wb"), avro.io.DatumWriter(), schema,
                                 codec="deflate")
for line in open(sys.argv[2]):
    ev = json.loads(line)
    ev.setdefault("source", None)
    for s in ev["segments"]:
        s.setdefault("flags", 0); s.setdefault("partner_id", 0)
    w.append(ev)
w.close()
PY
head -n 1500 "$tmp/in.jsonl" | gzip -c > "$tmp/in.jsonl.gz"
tail -n +1501 "$tmp/in.jsonl" | gzip -c >> "$tmp/in.jsonl.gz" # a second member
zstd -q -c "$tmp/in.jsonl" > "$tmp/in.jsonl.zst"
zstd -q -c "$tmp/in.avro" > "$tmp/in.avro.zst"
cp "$tmp/in.jsonl.gz" "$tmp/no_extension" # the magic decides, not the name
# zero padding after the last member (block devices, tapes) ends the stream, as for gzip -t
{ cat "$tmp/in.jsonl.gz"; head -c 512 /dev/zero; } > "$tmp/padded.gz"

users=$(/usr/bin/python3 -c '
import json, sys
print(" ".join(sorted({json.loads(l)["user_id"] for l in open(sys.argv[1])} - {""})))' "$tmp/in.jsonl")
[ "$(echo $users | wc -w)" = 60 ] || fail "user list"

ref=""
for f in in.jsonl in.avro in.jsonl.gz in.jsonl.zst in.avro.zst no_extension padded.gz; do
  for t in 1 3; do
    db="$tmp/db-$f-$t"
    rc=0
    "$segd" backfill --db "$db" --now $now --threads $t "$tmp/$f" > "$tmp/out" 2> "$tmp/err" || rc=$?
    [ $rc = 3 ] || fail "$f --threads $t: exit $rc, want 3: $(cat "$tmp/err")"
    grep -q "applied 2998 events (59960 segments), skipped 2, .* $t threads" "$tmp/out" ||
      fail "$f --threads $t summary: $(cat "$tmp/out")"
    [ "$(wc -l < "$tmp/err")" = 2 ] || fail "$f --threads $t: stderr: $(cat "$tmp/err")"
    case $f in
    *avro*) mark="#" ;;
    *) mark="" ;;
    esac
    grep -q "^$tmp/$f:${mark}1234: empty user_id" "$tmp/err" || fail "$f: 1234: $(cat "$tmp/err")"
    grep -q "^$tmp/$f:${mark}2500: ts_ms must be > 0" "$tmp/err" || fail "$f: 2500: $(cat "$tmp/err")"
    # shellcheck disable=SC2086
    "$segd" get --db "$db" --now $now --json $users > "$tmp/get-$f-$t"
    [ "$(wc -l < "$tmp/get-$f-$t")" = 60 ] || fail "$f: get printed $(wc -l < "$tmp/get-$f-$t") users"
    if [ -z "$ref" ]; then
      ref="$tmp/get-$f-$t"
      grep -q '"segments":\[{"id"' "$ref" || fail "reference store is empty: $(head -c 300 "$ref")"
    else
      cmp -s "$ref" "$tmp/get-$f-$t" || fail "$f --threads $t differs from in.jsonl --threads 1"
    fi
  done
done

# bad lines in the middle of a multi-block file keep their own numbers
/usr/bin/python3 - "$tmp/gen.jsonl" "$tmp/bad.jsonl" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
for n in (1, 777, 1501, 2999):
    lines[n - 1] = "garbage line %d {" % n
lines[2000] = ""      # an empty line (2001) is no record at all
lines[2001] = "  \r"  # blanks are not JSON: refused (line 2002)
open(sys.argv[2], "w").write("\n".join(lines) + "\r\n")
PY
rc=0
"$segd" backfill --db "$tmp/bad-db" --now $now --threads 3 "$tmp/bad.jsonl" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ $rc = 3 ] || fail "bad lines: exit $rc"
for n in 1 777 1501 2999 2002; do
  grep -q "^$tmp/bad.jsonl:$n: invalid JSON" "$tmp/err" || fail "line $n not reported: $(cat "$tmp/err")"
done
[ "$(wc -l < "$tmp/err")" = 5 ] || fail "bad lines: stderr: $(cat "$tmp/err")"
grep -q "applied 2994 events (59880 segments), skipped 5," "$tmp/out" || fail "bad lines: $(cat "$tmp/out")"

# a truncated .gz and .zst: the readable part applied, the cut reported, exit 3
for f in in.jsonl.gz in.jsonl.zst in.avro.zst; do
  size=$(stat -c %s "$tmp/$f")
  head -c $((size * 2 / 3)) "$tmp/$f" > "$tmp/cut-$f"
  rc=0
  "$segd" backfill --db "$tmp/cut-db-$f" --now $now --threads 3 "$tmp/cut-$f" > "$tmp/out" 2> "$tmp/err" || rc=$?
  [ $rc = 3 ] || fail "cut $f: exit $rc: $(cat "$tmp/err")"
  grep -q "truncated \(gzip\|zstd\) stream" "$tmp/err" || fail "cut $f: not reported: $(cat "$tmp/err")"
  applied=$(sed -n 's/^applied \([0-9]*\) events.*/\1/p' "$tmp/out")
  [ -n "$applied" ] && [ "$applied" -gt 1000 ] && [ "$applied" -lt 2998 ] ||
    fail "cut $f: applied '$applied': $(cat "$tmp/out")"
done

# a container written with another (resolvable) schema: plain, avro-c
# resolves it on one thread; compressed, it is refused with the reason
/usr/bin/python3 - "$tmp/old.avro" <<'PY'
import avro.schema, avro.datafile, avro.io, json, sys
schema = avro.schema.parse(json.dumps({"type": "record", "name": "SegmentEvent",
  "namespace": "com.segd", "fields": [
    {"name": "user_id", "type": "string"}, {"name": "ts_ms", "type": "long"},
    {"name": "op", "type": {"type": "enum", "name": "Op", "symbols": ["UPSERT", "REMOVE", "ERASE_USER"]}},
    {"name": "segments", "type": {"type": "array", "items": {"type": "record", "name": "SegmentUpdate",
      "fields": [{"name": "segment_id", "type": "long"}, {"name": "ttl_s", "type": "int"},
                 {"name": "flags", "type": "int"}, {"name": "partner_id", "type": "int"}]}}}]}))
w = avro.datafile.DataFileWriter(open(sys.argv[1], "wb"), avro.io.DatumWriter(), schema)
for u in ("old1", "old2"):
    w.append({"user_id": u, "ts_ms": 1799990000000, "op": "UPSERT",
              "segments": [{"segment_id": 5, "ttl_s": 86400, "flags": 0, "partner_id": 0}]})
w.close()
PY
"$segd" backfill --db "$tmp/old-db" --now $now --threads 2 "$tmp/old.avro" > "$tmp/out" 2> "$tmp/err" ||
  fail "old schema: exit $?: $(cat "$tmp/err")"
grep -q "applied 2 events (2 segments), skipped 0" "$tmp/out" || fail "old schema: $(cat "$tmp/out")"
"$segd" get --db "$tmp/old-db" --now $now --json old2 | grep -q '"id":5,' || fail "old schema: not applied"
zstd -q -c "$tmp/old.avro" > "$tmp/old.avro.zst"
rc=0
"$segd" backfill --db "$tmp/old-db" --now $now "$tmp/old.avro.zst" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ $rc = 3 ] && grep -q "must use SegmentEvent's own schema" "$tmp/err" || fail "old schema zst: $rc $(cat "$tmp/err")"

# --help documents the formats and --threads; a bad --threads is usage
"$segd" backfill --help | grep -q "zstd" || fail "--help lacks the formats"
"$segd" backfill --help | grep -q -- "--threads" || fail "--help lacks --threads"
rc=0
"$segd" backfill --db "$tmp/x" --threads 0 "$tmp/in.jsonl" > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "--threads 0: exit $rc, want 2"
echo "backfill_formats: ok"
