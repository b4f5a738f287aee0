#!/usr/bin/env bash
# Every command's help against the code and docs/cli.md (issue 23: `segd
# --help` and each command's help match what they do). For `segd --help`, for
# every command it lists and for every subcommand: --help and -h exit 0 and
# print the same usage on stdout, nothing on stderr. Then per help page: each
# long option of its synopsis (the usage lines) is in docs/cli.md for that
# command, each long option docs/cli.md gives for that command is in the page,
# and no page names an option docs/cli.md never mentions. The commands of
# `segd --help` are the commands of docs/cli.md's table, and the subcommands
# each parent's help names are the ones listed below. Every option of a
# parser's getopt table (cli/cmd_*.c, bench/bench_*.c) is in its help. `segd
# run --help` names only keys `segd run --print-config` knows, and every key
# family. CLI_HELP_KEEP=1 keeps the pages and option lists in /tmp.
# usage: cli_help.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
doc=$2/docs/cli.md
tmp=$(mktemp -d /tmp/segd-clihelp-XXXXXX)
trap '[ -n "${CLI_HELP_KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(compgen -e | grep '^SEGD_' || true); do unset "$v"; done

# The subcommands; a parent's help naming another (or fewer) fails below.
declare -A subs=(
  [offsets]="set show"
  [segments]="list-retired retire"
  [snapshot]="export verify"
  [bench]="backfill cache identity ingest queue resp restore serve snapshot store"
  [identity]="backfill check components members produce rebuild stats"
)

longopts() { grep -o -- '--[a-z][a-z0-9-]*' | grep -vx -- '--help' | sort -u || true; }
# The usage lines of a help page: from "usage:" to the first description
# line (two spaces, then text) or blank line.
synopsis() { awk '/^usage:/ {on = 1} on && (/^  [^ ]/ || /^$/) {exit} on' "$1"; }
# docs/cli.md's code spans that start with "segd WORDS" (then a space or the end).
spans() { grep -o '`segd [^`]*`' "$doc" | tr -d '`' | grep -E "^segd $1( |$)" || true; }

# help_page NAME ARGS...: --help and -h both exit 0, print the same usage on
# stdout and nothing on stderr; the page is left in $tmp/NAME.
help_page() {
  local name=$1; shift
  local rc=0
  "$segd" "$@" --help > "$tmp/$name" 2> "$tmp/$name.err" || rc=$?
  [ "$rc" = 0 ] || fail "segd $* --help exited $rc: $(cat "$tmp/$name.err")"
  [ ! -s "$tmp/$name.err" ] || fail "segd $* --help wrote to stderr: $(cat "$tmp/$name.err")"
  head -1 "$tmp/$name" | grep -q '^usage: segd' || fail "segd $* --help printed no usage: $(head -3 "$tmp/$name")"
  rc=0
  "$segd" "$@" -h > "$tmp/$name.h" 2> "$tmp/$name.err" || rc=$?
  [ "$rc" = 0 ] || fail "segd $* -h exited $rc: $(cat "$tmp/$name.err")"
  cmp -s "$tmp/$name" "$tmp/$name.h" || fail "segd $* -h and --help differ"
}

# check_page PAGE KEY CMD...: the page's options against docs/cli.md's spans for KEY.
check_page() {
  local page=$1 key=$2; shift 2
  synopsis "$tmp/$page" | longopts > "$tmp/$page.syn"
  longopts < "$tmp/$page" > "$tmp/$page.all"
  spans "$key" > "$tmp/$page.spans"
  [ -s "$tmp/$page.spans" ] || fail "docs/cli.md has no \`segd $key ...\` for segd $*"
  longopts < "$tmp/$page.spans" > "$tmp/$page.doc"
  local missing extra unknown
  missing=$(comm -23 "$tmp/$page.syn" "$tmp/$page.doc" | tr '\n' ' ')
  [ -z "$missing" ] || fail "segd $* --help has options docs/cli.md does not give for segd $key: $missing"
  extra=$(comm -13 "$tmp/$page.all" "$tmp/$page.doc" | tr '\n' ' ')
  [ -z "$extra" ] || fail "docs/cli.md gives segd $key options segd $* --help does not name: $extra"
  unknown=$(comm -23 "$tmp/$page.all" "$tmp/alldoc" | tr '\n' ' ')
  [ -z "$unknown" ] || fail "segd $* --help names options docs/cli.md never mentions: $unknown"
  checked=$((checked + 1))
}

longopts < "$doc" > "$tmp/alldoc"
[ "$(wc -l < "$tmp/alldoc")" -ge 50 ] || fail "too few options in docs/cli.md"

# segd --help: its commands are docs/cli.md's table's.
help_page top
"$segd" help > "$tmp/top.help"
cmp -s "$tmp/top" "$tmp/top.help" || fail "segd help and segd --help differ"
sed -n 's/^  \([a-z][a-z-]*\)  *[^ ].*/\1/p' "$tmp/top" | sort > "$tmp/cmds"
[ "$(wc -l < "$tmp/cmds")" -ge 15 ] || fail "segd --help lists too few commands: $(cat "$tmp/top")"
sed -n '/^## The commands/,/^## /p' "$doc" | grep '^| `segd' \
  | grep -o '`segd [a-z][a-z-]*' | sed 's/`segd //' | sort -u > "$tmp/doccmds"
missing=$(comm -23 "$tmp/cmds" "$tmp/doccmds" | tr '\n' ' ')
[ -z "$missing" ] || fail "commands of segd --help missing from docs/cli.md's table: $missing"
extra=$(comm -13 "$tmp/cmds" "$tmp/doccmds" | tr '\n' ' ')
[ -z "$extra" ] || fail "commands in docs/cli.md's table segd --help does not list: $extra"

checked=0
while read -r cmd; do
  help_page "$cmd" "$cmd"
  if [ -z "${subs[$cmd]:-}" ]; then
    check_page "$cmd" "$cmd" "$cmd"
    continue
  fi
  # the subcommands the parent's help names: "segd CMD SUB" in its usage, or
  # "  SUB  what" lines under a "segd CMD WHAT" usage (segd bench)
  { grep -o "segd $cmd [a-z][a-z-]*" "$tmp/$cmd" | sed "s/^segd $cmd //" || true
    if head -1 "$tmp/$cmd" | grep -q "segd $cmd WHAT"; then
      sed -n 's/^  \([a-z][a-z-]*\)  *[^ ].*/\1/p' "$tmp/$cmd"
    fi; } | grep -vx 'each' | sort -u | tr '\n' ' ' | sed 's/ $//' > "$tmp/$cmd.subs"
  [ "$(cat "$tmp/$cmd.subs")" = "${subs[$cmd]}" ] \
    || fail "segd $cmd --help names subcommands '$(cat "$tmp/$cmd.subs")', want '${subs[$cmd]}'"
  parent_checked=0
  for sub in ${subs[$cmd]}; do
    help_page "$cmd.$sub" "$cmd" "$sub"
    if cmp -s "$tmp/$cmd" "$tmp/$cmd.$sub"; then
      # the parent's usage, shared by its subcommands: checked once, whole
      [ "$parent_checked" = 1 ] || check_page "$cmd" "$cmd" "$cmd"
      parent_checked=1
    else
      check_page "$cmd.$sub" "$cmd $sub" "$cmd" "$sub"
    fi
  done
done < "$tmp/cmds"
[ "$checked" -ge 25 ] || fail "only $checked help pages checked"

# Each option a command's parser takes (its getopt_long table in
# cli/cmd_CMD.c or bench/bench_WHAT.c) is named by its help.
parsers=0
for src in "$2"/cli/cmd_*.c "$2"/bench/bench_*.c; do
  grep -o '{"[a-z][a-z0-9-]*", *[a-z]*_argument' "$src" | sed 's/{"\([^"]*\)".*/--\1/' \
    | grep -vx -- '--help' | sort -u > "$tmp/src.opts" || true
  [ -s "$tmp/src.opts" ] || continue
  name=$(basename "$src" .c)
  case $name in
    cmd_compact) pages="compact stats" ;; # both commands' parsers live there
    cmd_*) pages=${name#cmd_}; pages=${pages//_/-} ;;
    bench_*) pages=bench.${name#bench_} ;;
  esac
  for page in $pages; do
    [ -f "$tmp/$page" ] || fail "${src#"$2"/}: no help page $page (a command segd --help does not list?)"
    cat "$tmp/$page"
  done | longopts > "$tmp/src.help"
  missing=$(comm -23 "$tmp/src.opts" "$tmp/src.help" | tr '\n' ' ')
  [ -z "$missing" ] || fail "${src#"$2"/} takes options its command's --help does not name: $missing"
  parsers=$((parsers + 1))
done
[ "$parsers" -ge 25 ] || fail "only $parsers option tables found"

# segd run --help: the keys it names exist, and it names every key family.
"$segd" run --brokers b:9092 --topic t --group g --db "$tmp/db" --print-config > "$tmp/print" \
  || fail "--print-config exited $?"
sed -n 's/^\(# \)\{0,1\}\([a-z][a-z0-9._-]*\) = .*/\2/p' "$tmp/print" | grep -v '^kafka\.' \
  | sort > "$tmp/keys"
[ "$(wc -l < "$tmp/keys")" -ge 40 ] || fail "too few keys printed: $(cat "$tmp/print")"
sed 's/[a-z][a-z.]*\.\*//g' "$tmp/run" | grep -o '[a-z][a-z]*\(\.[a-z][a-z]*\)\{1,\}' | grep -v '^kafka\.' \
  | grep -vx 'configuration\.md' | sort -u > "$tmp/run.keys"
[ "$(wc -l < "$tmp/run.keys")" -ge 20 ] || fail "segd run --help names too few keys"
unknown=$(comm -23 "$tmp/run.keys" "$tmp/keys" | tr '\n' ' ')
[ -z "$unknown" ] || fail "segd run --help names keys segd run does not know: $unknown"
grep -q 'docs/configuration\.md' "$tmp/run" || fail "segd run --help does not point at docs/configuration.md"
for family in $(grep -o '[a-z][a-z.]*\.\*' "$tmp/run" | sed 's/\.\*$//' | sort -u); do
  [ "$family" = kafka ] || grep -q "^$family\." "$tmp/keys" \
    || fail "segd run --help names keys $family.* but segd run has none"
done
# (brokers, topics, group and db, the keys without a dot, are its flags)
for family in $(grep '\.' "$tmp/keys" | sed 's/\..*//' | sort -u); do
  grep -qF "$family.*" "$tmp/run" || grep -q "^$family\." "$tmp/run.keys" \
    || fail "segd run --help says nothing of the $family.* keys"
done

# segd version and segd --version (issue 30 item 4): segd's version, then one
# "NAME VERSION" line per library it links; a library missing fails.
"$segd" version > "$tmp/version" 2> "$tmp/version.err" || fail "segd version exited $?"
"$segd" --version > "$tmp/version2" || fail "segd --version exited $?"
cmp -s "$tmp/version" "$tmp/version2" || fail "segd version and segd --version differ"
[ ! -s "$tmp/version.err" ] || fail "segd version wrote to stderr: $(cat "$tmp/version.err")"
ver='[0-9]+\.[0-9]+(\.[0-9]+)?'
head -1 "$tmp/version" | grep -Eq "^segd $ver( \(git [^ )]+\))?$" ||
  fail "segd version's first line: $(head -1 "$tmp/version")"
for lib in librdkafka rocksdb avro-c libcurl jansson zstd zlib openssl libmicrohttpd xxhash; do
  grep -Eq "^$lib $ver( \(built against\))?$" "$tmp/version" ||
    fail "segd version gives no version of $lib: $(cat "$tmp/version")"
done
[ "$(wc -l < "$tmp/version")" -eq 11 ] || fail "segd version printed other lines: $(cat "$tmp/version")"

echo "cli_help: $checked help pages of $(wc -l < "$tmp/cmds") commands match docs/cli.md and $parsers option tables"
