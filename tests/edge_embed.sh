#!/usr/bin/env bash
# The edge cache embeds without the writer side: examples/edge_lookup
# (cache/edge.c + base, core, wire) names no RocksDB, librdkafka, libcurl,
# jansson or avro-c symbol or library, and, loaded with one unit's file of a
# real snapshot (avro and native records_format), answers every user of that
# unit as `segd get` does.
# usage: edge_embed.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
lookup=$(dirname "$segd")/edge_lookup
tmp=$(mktemp -d /tmp/segd-embed-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000

[ -x "$lookup" ] || fail "no $lookup"
if nm -u "$lookup" | grep -E ' (rocksdb_|rd_kafka_|curl_|json_|avro_)'; then
  fail "edge_lookup references writer-side symbols"
fi
if readelf -d "$lookup" | grep NEEDED | grep -E 'rocksdb|rdkafka|curl|jansson|avro'; then
  fail "edge_lookup needs writer-side libraries"
fi

"$segd" generate --out "$tmp/seed.jsonl" --users 40 --now $now >/dev/null
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" >/dev/null
users=$(/usr/bin/python3 -c "
import json
print(' '.join(sorted({json.loads(l)['user_id'] for l in open('$tmp/seed.jsonl')})))")
# both record formats: the unit file's schema tells edge_lookup which
for fmt in avro native; do
  "$segd" snapshot export --db "$tmp/db" --to "$tmp/snap-$fmt" --topic events --buckets 2 \
    --now $now --format $fmt >/dev/null
  grep -q "\"records_format\": \"$fmt\"" "$tmp/snap-$fmt/events/p-00000/manifest.json" ||
    fail "unit 0 is not $fmt"
  bucket=$(ls "$tmp/snap-$fmt/events/p-00000"/p-00000-*.avro)
  checked=0
  for u in $users; do
    got=$("$lookup" "$bucket" "$u" $now) || fail "edge_lookup $u ($fmt)"
    [ -n "$got" ] || continue # the user lives in the other unit
    want=$("$segd" get --db "$tmp/db" --now $now --json "$u" | /usr/bin/python3 -c "
import json, sys
for s in json.loads(sys.stdin.readline())['segments']:
    print(s['id'], s['expires_at'], s['ts_ms'])")
    [ "$got" = "$want" ] || fail "user $u: edge_lookup ($fmt) and segd get differ"
    checked=$((checked + 1))
  done
  [ $checked -gt 5 ] || fail "only $checked users found in unit 0 ($fmt)"
  echo "edge_embed: $fmt: $checked users equal to segd get"
done
printf 'nothing' > "$tmp/junk"
if "$lookup" "$tmp/junk" u1 $now 2>/dev/null; then fail "edge_lookup took a file that is no snapshot"; fi
echo "edge_embed: no writer-side symbols"
