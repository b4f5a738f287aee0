#!/usr/bin/env bash
# The edge cache embeds without the writer side: examples/edge_lookup
# (cache/edge.c + base, core, wire) names no RocksDB, librdkafka, libcurl,
# jansson or avro-c symbol or library, and, loaded with one unit's file of a
# real snapshot, answers every user of that unit as `segd get` does.
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
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --topic events --buckets 2 --now $now \
  >/dev/null
bucket=$(ls "$tmp/snap/events/p-00000"/p-00000-*.avro)
users=$(/usr/bin/python3 -c "
import json
print(' '.join(sorted({json.loads(l)['user_id'] for l in open('$tmp/seed.jsonl')})))")
checked=0
for u in $users; do
  got=$("$lookup" "$bucket" "$u" $now) || fail "edge_lookup $u"
  [ -n "$got" ] || continue # the user lives in the other unit
  want=$("$segd" get --db "$tmp/db" --now $now --json "$u" | /usr/bin/python3 -c "
import json, sys
for s in json.loads(sys.stdin.readline())['segments']:
    print(s['id'], s['expires_at'], s['ts_ms'])")
  [ "$got" = "$want" ] || fail "user $u: edge_lookup and segd get differ"
  checked=$((checked + 1))
done
[ $checked -gt 5 ] || fail "only $checked users found in unit 0"
echo "edge_embed: $checked users equal to segd get; no writer-side symbols"
