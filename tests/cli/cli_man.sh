#!/usr/bin/env bash
# The manual matches the commands (issue 30 item 5): every long option of
# each command's and subcommand's --help synopsis (its usage lines) is in
# docs/segd.1, in that command's part of it: the SYNOPSIS entries that start
# ".B segd CMD" and the COMMANDS paragraph (.TP) whose tag names CMD. The
# page's escapes (\-, \fB...) are undone before comparing. The benchmarks
# (`segd bench WHAT`) are left to their own --help, which the page points at.
# usage: cli_man.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
man=$2/docs/segd.1
tmp=$(mktemp -d /tmp/segd-climan-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(compgen -e | grep '^SEGD_' || true); do unset "$v"; done

longopts() { grep -o -- '--[a-z][a-z0-9-]*' | grep -vx -- '--help' | sort -u || true; }
synopsis() { awk '/^usage:/ {on = 1} on && (/^  [^ ]/ || /^$/) {exit} on' "$1"; }
# The page as text: \- is -, font changes go.
sed 's/\\-/-/g; s/\\f[BIRP]//g; s/\\(..//g' "$man" > "$tmp/man"

# man_part CMD: the SYNOPSIS entries of segd CMD and CMD's COMMANDS paragraph.
man_part() {
  awk -v cmd="$1" '
    /^\.SH/ { sec = $2 }
    sec == "SYNOPSIS" && /^\.B segd / { on = ($3 == cmd) }
    sec == "SYNOPSIS" && /^\.br/ { on = 0 }
    sec == "COMMANDS" && /^\.TP/ { tag = 1; on = 0; next }
    sec == "COMMANDS" && tag { tag = 0; n = split($0, w, /[ ,]+/)
      for (i = 1; i <= n; i++) if (w[i] == cmd) on = 1 }
    sec != "SYNOPSIS" && sec != "COMMANDS" { on = 0 }
    on' "$tmp/man"
}

"$segd" help > "$tmp/top"
sed -n 's/^  \([a-z][a-z-]*\)  *[^ ].*/\1/p' "$tmp/top" | grep -vx bench > "$tmp/cmds"
[ "$(wc -l < "$tmp/cmds")" -ge 15 ] || fail "segd help lists too few commands"
checked=0 missing_all=""
while read -r cmd; do
  "$segd" "$cmd" --help > "$tmp/$cmd" || fail "segd $cmd --help exited $?"
  man_part "$cmd" > "$tmp/$cmd.man"
  [ -s "$tmp/$cmd.man" ] || fail "docs/segd.1 has no part for segd $cmd"
  # the subcommands the usage names, each with its own page
  pages="$cmd"
  for sub in $(synopsis "$tmp/$cmd" | grep -o "segd $cmd [a-z][a-z-]*" | sed "s/^segd $cmd //" | sort -u); do
    "$segd" "$cmd" "$sub" --help > "$tmp/$cmd.$sub" || fail "segd $cmd $sub --help exited $?"
    pages="$pages $cmd.$sub"
  done
  for p in $pages; do
    synopsis "$tmp/$p" | longopts > "$tmp/$p.opts"
    longopts < "$tmp/$cmd.man" > "$tmp/$p.manopts"
    missing=$(comm -23 "$tmp/$p.opts" "$tmp/$p.manopts" | tr '\n' ' ')
    [ -z "$missing" ] || missing_all="$missing_all
  segd ${p/./ }: $missing"
    checked=$((checked + 1))
  done
done < "$tmp/cmds"
[ -z "$missing_all" ] || fail "docs/segd.1 lacks flags of these commands' --help:$missing_all"
[ "$checked" -ge 25 ] || fail "only $checked help pages checked"
echo "cli_man: the flags of $checked help pages are in docs/segd.1"
