#!/usr/bin/env bash
# `segd demo` (the README's first command, small): exits 0 and prints every
# line of the README's demo excerpt in the same shape (numbers aside), so the
# README and the program say the same: the group join apart from the ingest,
# timed from the first message, and the store's read latency p50/p99.
# usage: demo_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
readme=$2/README.md
tmp=$(mktemp -d /tmp/segd-demo-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$tmp/out" >&2 2>/dev/null || true; exit 1; }

"$segd" demo --dir "$tmp/d" --users 40 > "$tmp/out" 2> "$tmp/err" || fail "demo exited $?: $(cat "$tmp/err")"
sed -n '/<!-- demo-output -->/,/<!-- \/demo-output -->/p' "$readme" | grep -v '^<!--\|^```' \
  > "$tmp/want"
[ "$(wc -l < "$tmp/want")" -ge 4 ] || fail "README has no demo excerpt"
while IFS= read -r line; do
  # the line as a regex: metacharacters escaped, every number any number
  re=$(printf '%s' "$line" | sed -e 's/[][\.*^$()+?{}|/]/\\&/g' \
                                 -e 's/[0-9][0-9]*\(\\\.[0-9][0-9]*\)\{0,1\}/[0-9][0-9.]*/g')
  grep -qE "^$re\$" "$tmp/out" || fail "demo does not print a line like: $line"
done < "$tmp/want"
# the figures are figures: p50 <= p99, the ingest timed after the join
grep -o 'p50 [0-9.]* us, p99 [0-9.]* us' "$tmp/out" | while read -r _ p50 _ _ p99 _; do
  awk -v a="${p50%,}" -v b="$p99" 'BEGIN { exit !(a > 0 && a <= b) }' || fail "p50 $p50 p99 $p99"
done
grep -q "consumed 2002 messages in [0-9.]* s from the first one" "$tmp/out" || fail "message count"
# the hint names the binary that ran (issue 23: it always said ./build/segd)
bin=$(readlink -f "$segd")
grep -qxE "Try: $bin get --db $tmp/d/db-[0-9]+ --json u0000000042" "$tmp/out" ||
  fail "the hint does not name $bin: $(grep Try: "$tmp/out")"
echo "demo_cli: $(wc -l < "$tmp/want") README lines matched"
