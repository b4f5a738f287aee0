#!/usr/bin/env bash
# docs/configuration.md against the code: every key of config/config.c's
# table (as `segd run --print-config` lists it) is in the document's segd run
# table and every key there is known; a default in backticks is the one the
# code fills in; every `segd cache` option of its --help is documented and
# every documented option exists. Then --print-config itself: exit 0, secrets masked, bad values refused.
# usage: config_doc.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
doc=$2/docs/configuration.md
tmp=$(mktemp -d /tmp/segd-confdoc-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# the defaults are the code's, not the caller's (scripts/test.sh sets
# SEGD_STORE_MIN_FREE_MB for every test)
for v in $(compgen -e | grep '^SEGD_' || true); do unset "$v"; done

# rows "| `key` | type | default | ..." between <!-- keys:NAME --> markers
rows() { sed -n "/<!-- keys:$1 -->/,/<!-- \/keys:$1 -->/p" "$doc" | grep '^| `'; }
doc_keys() { rows "$1" | sed 's/^| `\([^`]*\)`.*/\1/' | sort; }

"$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" --print-config \
  > "$tmp/print" || fail "--print-config exited $?"
[ ! -e "$tmp/db" ] || fail "--print-config opened the store"
sed -n 's/^\(# \)\{0,1\}\([a-z][a-z0-9._-]*\) = .*/\2/p' "$tmp/print" | grep -v '^kafka\.' | sort \
  > "$tmp/code"
[ "$(wc -l < "$tmp/code")" -ge 40 ] || fail "too few keys printed: $(cat "$tmp/print")"
doc_keys run > "$tmp/doc"

missing=$(comm -23 "$tmp/code" "$tmp/doc")
[ -z "$missing" ] || fail "keys missing from docs/configuration.md: $missing"
unknown=$(comm -13 "$tmp/code" "$tmp/doc")
[ -z "$unknown" ] || fail "documented keys segd run does not know: $unknown"
[ "$(uniq -d "$tmp/doc")" = "" ] || fail "keys documented twice: $(uniq -d "$tmp/doc")"

# documented defaults in backticks are the code's (column 4)
rows run | while IFS='|' read -r _ key _ def _; do
  key=$(echo "$key" | tr -d ' `')
  case "$def" in *'`'*) ;; *) continue ;; esac
  want=$(echo "$def" | sed 's/^[^`]*`\([^`]*\)`.*/\1/')
  have=$(sed -n "s/^$key = //p" "$tmp/print")
  [ "$have" = "$want" ] || fail "$key: documented default '$want', the code's '$have'"
done

# segd cache: the options of its usage text both ways
"$segd" cache --help > "$tmp/cache.help"
grep -o -- '--[a-z][a-z-]*\|-X' "$tmp/cache.help" | grep -v -- '--help' | sort -u > "$tmp/cache.code"
doc_keys cache | sort -u > "$tmp/cache.doc"
[ "$(wc -l < "$tmp/cache.code")" -ge 10 ] || fail "segd cache --help: $(cat "$tmp/cache.help")"
diff "$tmp/cache.code" "$tmp/cache.doc" > "$tmp/cache.diff" ||
  fail "segd cache options (<) vs docs/configuration.md (>): $(cat "$tmp/cache.diff")"

# --print-config: the effective values, secrets masked, a valid config file
SEGD_KAFKA_SASL_PASSWORD=hunter2 SEGD_LOG_FORMAT=json "$segd" run --brokers b:9092 --topic t \
  --group g --db "$tmp/db" -X ssl.key.password=swordfish -X client.id=c7 \
  -X sasl.username=alice --print-config > "$tmp/print2"
grep -q 'hunter2\|swordfish' "$tmp/print2" && fail "a secret was printed: $(cat "$tmp/print2")"
for want in 'kafka.sasl.password = \*\*\*' 'kafka.ssl.key.password = \*\*\*' \
            'kafka.client.id = c7' 'kafka.sasl.username = alice' 'log.format = json' \
            'dlq.topic = t.dlq' 'changes.topic = segments.changes'; do
  grep -qx "$want" "$tmp/print2" || fail "--print-config lacks '$want': $(cat "$tmp/print2")"
done
grep -v '\*\*\*' "$tmp/print" > "$tmp/again.conf"
"$segd" run --config "$tmp/again.conf" --print-config > "$tmp/print3" ||
  fail "--print-config's output is not a valid config file"
cmp "$tmp/print" "$tmp/print3" || fail "the output read back differs"
rc=0
"$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" -X x=y \
  --config /dev/null --print-config > /dev/null 2> "$tmp/err" || rc=$?
# librdkafka refuses it when segd run starts (exit 2): --print-config checks
# it the same way rather than print a configuration run refuses (issue 30 #3)
[ $rc = 2 ] || fail "an unknown kafka property: --print-config exited $rc, want 2 as segd run"
grep -q '^segd run: .*kafka\.x' "$tmp/err" || fail "--print-config -X x=y: $(cat "$tmp/err")"
rc=0
SEGD_LOG_LEVEL=loud "$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" \
  --print-config > /dev/null 2> "$tmp/err" || rc=$?
[ $rc = 2 ] && grep -q "log.level: 'loud'" "$tmp/err" || fail "bad log.level: $rc $(cat "$tmp/err")"
echo "config_doc: $(wc -l < "$tmp/code") keys and $(wc -l < "$tmp/cache.code") cache options documented"
