#!/usr/bin/env bash
# One option layer for every command (issue 30 item 3): each command and
# subcommand that `segd help` and the parents' --help list takes only its
# own flags. For each: --help exits 0; --no-such-flag, and every real flag
# of another command (named in some help page) that its own help page does
# not name, exit 2 with one line on stderr naming the flag under the prefix
# "segd CMD:" ("segd CMD SUB:"), and never the bare usage. A subcommand that
# shares its parent's help page (identity, segments, offsets, snapshot) is
# also given its siblings' flags that its own synopsis entry does not name
# (identity check --framing, segments list-retired --wait-s). Nothing is
# run: every call is refused before it touches a store or a broker, and a
# call that is not refused within its timeout fails the test.
# CLI_OPTIONS_KEEP=1 keeps the pages in /tmp.
# usage: cli_options.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d /tmp/segd-cliopts-XXXXXX)
trap '[ -n "${CLI_OPTIONS_KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(compgen -e | grep '^SEGD_' || true); do unset "$v"; done
cd "$tmp" # a flag taken by mistake writes nothing elsewhere

longopts() { grep -o -- '--[a-z][a-z0-9-]*' | grep -vx -- '--help' | sort -u || true; }
# The synopsis entries of a page, one a line: each "segd ..." of the usage
# lines with its continuation lines joined to it.
entries() {
  awk '/^usage:/ {on = 1} on && (/^  [^ ]/ || /^$/) {exit}
       on { sub(/^usage:/, ""); if ($0 ~ /^ *segd /) { if (e != "") print e; e = $0 }
            else e = e " " $0 }
       END { if (e != "") print e }' "$1" | sed 's/^ *//'
}

"$segd" help > "$tmp/top"
sed -n 's/^  \([a-z][a-z-]*\)  *[^ ].*/\1/p' "$tmp/top" > "$tmp/cmds"
[ "$(wc -l < "$tmp/cmds")" -ge 15 ] || fail "segd help lists too few commands: $(cat "$tmp/top")"

# page NAME ARGS...: segd ARGS --help exits 0 with a usage; left in $tmp/NAME.
page() {
  local name=$1; shift
  local rc=0
  timeout 20 "$segd" "$@" --help > "$tmp/$name" 2> "$tmp/$name.err" || rc=$?
  [ "$rc" = 0 ] || fail "segd $* --help exited $rc: $(cat "$tmp/$name.err")"
  head -1 "$tmp/$name" | grep -q '^usage: segd' || fail "segd $* --help printed no usage"
}

# Every (sub)command as "CMD" or "CMD SUB", with its help page.
: > "$tmp/all"
while read -r cmd; do
  page "$cmd" "$cmd"
  entries "$tmp/$cmd" > "$tmp/$cmd.entries"
  { grep -o "^segd $cmd [a-z][a-z-]*" "$tmp/$cmd.entries" | sed "s/^segd $cmd //" || true
    if head -1 "$tmp/$cmd" | grep -q "segd $cmd WHAT"; then
      sed -n '/^$/,$s/^  \([a-z][a-z-]*\)  *[^ ].*/\1/p' "$tmp/$cmd"
    fi; } | sort -u > "$tmp/$cmd.subs"
  if [ -s "$tmp/$cmd.subs" ]; then
    while read -r sub; do
      page "$cmd.$sub" "$cmd" "$sub"
      echo "$cmd $sub" >> "$tmp/all"
    done < "$tmp/$cmd.subs"
  else
    echo "$cmd" >> "$tmp/all"
  fi
done < "$tmp/cmds"
[ "$(wc -l < "$tmp/all")" -ge 35 ] || fail "only $(wc -l < "$tmp/all") (sub)commands found: $(tr '\n' ',' < "$tmp/all")"
grep -qx 'identity check' "$tmp/all" || fail "identity check not found among $(tr '\n' ',' < "$tmp/all")"

# Every flag some page names: the pool of real flags of other commands.
cat "$tmp"/* 2>/dev/null | longopts > "$tmp/pool"
[ "$(wc -l < "$tmp/pool")" -ge 80 ] || fail "too few flags in the help pages: $(wc -l < "$tmp/pool")"

# refused NAME FLAG...: segd NAME FLAG... exits 2 naming FLAG[0] after
# "segd NAME: ", in one line and no usage.
calls=0
refused() {
  local name=$1; shift
  local flag=${1%%=*} rc=0
  # shellcheck disable=SC2086 # NAME is "CMD" or "CMD SUB"
  timeout 10 "$segd" $name "$@" < /dev/null > "$tmp/out" 2> "$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "segd $name $*: exit $rc, want 2 (a flag it does not take): $(head -3 "$tmp/err")"
  grep -q "^segd $name: .*${flag}\b" "$tmp/err" ||
    fail "segd $name $*: stderr does not name $flag after 'segd $name: ': $(head -3 "$tmp/err")"
  [ "$(wc -l < "$tmp/err")" = 1 ] || fail "segd $name $*: more than one line on stderr: $(cat "$tmp/err")"
  ! grep -q '^usage:' "$tmp/err" "$tmp/out" || fail "segd $name $*: printed the usage"
  calls=$((calls + 1))
}

nth=0
while read -r name; do
  cmd=${name%% *}; sub=${name#"$cmd"}; sub=${sub# }
  pg=$cmd; [ -z "$sub" ] || pg=$cmd.$sub
  refused "$name" --no-such-flag
  refused "$name" --no-such-flag=1
  # other commands' flags its page never names: a tenth of them, a
  # different tenth for each (sub)command, so the run stays short and every
  # flag of the pool is tried on a few
  longopts < "$tmp/$pg" > "$tmp/own"
  i=0
  for flag in $(comm -23 "$tmp/pool" "$tmp/own"); do
    [ $(((i++ + nth) % 10)) = 0 ] && refused "$name" "$flag" x
  done
  nth=$((nth + 1))
  # a sibling's flag its own synopsis entry does not name (--config, which
  # the shared page gives to every subcommand in prose, aside)
  if [ -n "$sub" ] && cmp -s "$tmp/$cmd" "$tmp/$pg"; then
    { grep "^segd $cmd $sub\b" "$tmp/$cmd.entries" || true; } | longopts > "$tmp/mine"
    { grep -v "^segd $cmd $sub\b" "$tmp/$cmd.entries" || true; } | longopts > "$tmp/siblings"
    [ -s "$tmp/mine" ] || [ -s "$tmp/siblings" ] || continue
    for flag in $(comm -23 "$tmp/siblings" "$tmp/mine" | grep -vx -- '--config'); do
      refused "$name" "$flag" x
    done
  fi
done < "$tmp/all"

# the audit's cases, by name
refused "identity check" --framing raw --min-weight 0.1
refused "identity members" --max-links 5
refused "segments list-retired" --wait-s 5
refused "segments list-retired" --partner
refused "offsets show" --brokers x
# a flag spelled short of its name is another flag: refused, not completed
refused run --brok x
[ "$calls" -ge 250 ] || fail "only $calls refusals checked"

# run -X validates -X whether it runs or prints its configuration
rc=0
"$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" -X bogus.prop=1 \
  --print-config > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "run -X bogus.prop=1 --print-config exited $rc, want 2 as run does"
grep -q '^segd run: .*bogus\.prop' "$tmp/err" || fail "run --print-config: $(cat "$tmp/err")"
[ ! -s "$tmp/out" ] || fail "run --print-config printed a configuration it refuses"
rc=0
"$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" -X bogus.prop=1 \
  > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "run -X bogus.prop=1 exited $rc, want 2"
[ ! -e "$tmp/db" ] || fail "run -X bogus.prop=1 opened the store before refusing it"

echo "cli_options: $(wc -l < "$tmp/all") (sub)commands, $calls refused flags"
