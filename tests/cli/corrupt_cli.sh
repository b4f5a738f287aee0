#!/usr/bin/env bash
# Corruption is reported, never hidden: with three bytes flipped in the
# store's SST, `segd get` over every user prints each readable user, names
# each unreadable one and exits 1 (it used to stop at the first); `segd
# compact` fails with RocksDB's reason (it used to exit 0).
# usage: corrupt_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-corrupt-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000

"$segd" generate --out "$tmp/seed.jsonl" --users 2000 --now $now >/dev/null
"$segd" backfill --db "$tmp/db" --now $now --no-changes "$tmp/seed.jsonl" >/dev/null
"$segd" compact --db "$tmp/db" --now $now --allow-future-now >/dev/null
sst=$(ls -S "$tmp/db"/*.sst | head -1)
/usr/bin/python3 - "$sst" <<'PY'
import os, sys
path = sys.argv[1]
size = os.path.getsize(path)
with open(path, "r+b") as f:
    for off in (size // 3, size // 2, 2 * size // 3):
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
PY
users=$(/usr/bin/python3 -c "
import json
print(' '.join(sorted({json.loads(l)['user_id'] for l in open('$tmp/seed.jsonl')})))")
set +e
"$segd" get --db "$tmp/db" --now $now --json $users > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ $rc = 1 ] || fail "get over a corrupt store: exit $rc, want 1"
bad=$(grep -c 'Corruption' "$tmp/err")
good=$(wc -l < "$tmp/out")
[ "$bad" -gt 0 ] || fail "no user reported unreadable: $(head -3 "$tmp/err")"
[ $((bad + good)) = 2000 ] || fail "$good printed + $bad reported != 2000 users"
[ "$good" -gt 1000 ] || fail "only $good users printed: get stopped early"
grep -q '^segd get: u[0-9]*: ' "$tmp/err" || fail "errors do not name the user"

set +e
"$segd" compact --db "$tmp/db" --now $now --allow-future-now > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ $rc = 1 ] && grep -q 'compaction failed.*Corruption' "$tmp/err" ||
  fail "compact over a corrupt SST: exit $rc: $(cat "$tmp/err")"
# a snapshot would leave the unreadable users out and still verify: refused
set +e
"$segd" snapshot export --db "$tmp/db" --to "$tmp/snap" --topic events --now $now > "$tmp/out" \
  2> "$tmp/err"
rc=$?
set -e
[ $rc = 1 ] && grep -qi 'corrupt\|do not decode' "$tmp/err" ||
  fail "snapshot export over a corrupt store: exit $rc: $(cat "$tmp/err")"
[ -z "$(find "$tmp/snap" -name 'manifest.json*' -o -name '*.avro*' -o -name topology.json)" ] ||
  fail "a unit was written for a partial snapshot: $(find "$tmp/snap")"
echo "corrupt_cli: $good users printed, $bad reported; compaction failure surfaced"
