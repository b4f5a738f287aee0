#!/usr/bin/env bash
# `segd identity --config FILE`: segd run's configuration gives the offline
# commands the same guard segd run applies (identity.min.weight,
# identity.max.component) and the store (db); explicit flags win over the
# file; without --config the defaults apply (the file is not read).
# usage: identity_config.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-identcfg-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cat > "$tmp/segd.conf" <<CONF
db=$tmp/db
identity.max.component=2
identity.min.weight=0.8
CONF
cat > "$tmp/links.jsonl" <<'JSON'
{"id_a":"a","id_b":"b","op":"LINK","ts_ms":1}
{"id_a":"b","id_b":"c","op":"LINK","ts_ms":2}
{"id_a":"c","id_b":"d","op":"LINK","ts_ms":3,"weight":0.7}
JSON

# the file's guard: b-c would make 3 ids > 2 (refused, exit 3); c-d at 0.7 is
# under the file's min.weight 0.8 (an edge only)
rc=0
"$segd" identity backfill --config "$tmp/segd.conf" "$tmp/links.jsonl" \
  > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 3 ] || fail "backfill --config: exit $rc, want 3: $(cat "$tmp/out" "$tmp/err")"
grep -q "links.jsonl:2: supernode" "$tmp/err" || fail "line 2 not refused: $(cat "$tmp/err")"
[ "$(grep -c supernode "$tmp/err")" = 1 ] || fail "more than line 2 refused: $(cat "$tmp/err")"
[ "$("$segd" identity members --config "$tmp/segd.conf" a | tr '\n' ' ')" = "a b " ] ||
  fail "members a: want a b"
rc=0
"$segd" identity check --config "$tmp/segd.conf" c d > "$tmp/out" || rc=$?
[ "$rc" = 1 ] && grep -q "not connected" "$tmp/out" || fail "c d joined under min.weight 0.8"
"$segd" identity stats --config "$tmp/segd.conf" | grep -q "supernode_refused 1" ||
  fail "stats --config"

# flags win over the file: max.component 3 and min.weight 0.6 join a b c; c-d
# (0.7 >= 0.6) would make 4 > 3
rm -rf "$tmp/db"
rc=0
"$segd" identity backfill --config "$tmp/segd.conf" --max-component 3 --min-weight 0.6 \
  "$tmp/links.jsonl" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 3 ] && grep -q "links.jsonl:3: supernode" "$tmp/err" ||
  fail "flags over --config: exit $rc: $(cat "$tmp/err")"
[ "$("$segd" identity members --config "$tmp/segd.conf" a | tr '\n' ' ')" = "a b c " ] ||
  fail "members a after the flags' backfill: want a b c"

# rebuild under the file's guard splits {a, b, c} (3 > 2): the same guard
"$segd" identity rebuild --config "$tmp/segd.conf" > "$tmp/out" 2> "$tmp/err" ||
  fail "rebuild --config: $(cat "$tmp/err")"
grep -q "refused=1" "$tmp/out" || fail "rebuild did not apply max.component 2: $(cat "$tmp/out")"
[ "$("$segd" identity members --db "$tmp/db" a | tr '\n' ' ')" = "a b " ] ||
  fail "members a after rebuild --config: want a b"
# --db wins over the file's db; a bad file is a usage error
"$segd" identity rebuild --config "$tmp/segd.conf" --db "$tmp/db2" > /dev/null 2>&1 || true
[ -d "$tmp/db2" ] || fail "--db did not win over the file's db"
rc=0
"$segd" identity members --config "$tmp/nope.conf" a > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a missing --config file: exit $rc, want 2"
echo "identity_config: ok"
