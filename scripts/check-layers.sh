#!/usr/bin/env bash
# Derives the include graph between top-level folders from every
# `#include "folder/file.h"` and fails on an edge that scripts/layers.txt
# does not allow (upward or sideways includes). Prints the graph with -v.
set -euo pipefail
cd "$(dirname "$0")/.."
rules=scripts/layers.txt
declare -A allowed known
while read -r folder deps; do
    folder=${folder%:}
    known[$folder]=1
    for d in $deps; do allowed["$folder>$d"]=1; done
done < <(grep -v '^\s*#' "$rules" | grep -v '^\s*$')

bad=0
declare -A seen
include_re='#include "([a-z_]*)/[^"]*"'
for folder in "${!known[@]}"; do
    [ -d "$folder" ] || continue
    while IFS=: read -r file _ inc; do
        # a bash match, not a sed per line: hundreds of forks made this a
        # 10 s step of every CI run (it runs before the build and as a test)
        target=""
        [[ $inc =~ $include_re ]] && target=${BASH_REMATCH[1]}
        [ -n "$target" ] && [ "$target" != "$folder" ] || continue
        seen["$folder -> $target"]=1
        if [ -z "${allowed["$folder>$target"]:-}" ]; then
            echo "layers: $file includes $target/ (not allowed for $folder/ in $rules):$inc" >&2
            bad=1
        fi
    done < <(grep -rn '#include "' "$folder" --include='*.c' --include='*.h' || true)
done
# a folder with code that the rules do not name is a layer nobody placed
for dir in */; do
    dir=${dir%/}
    case $dir in build*|tests|fuzz|docs|schemas|scripts|docker|segd-demo) continue ;; esac
    if [ -z "${known[$dir]:-}" ] && ls "$dir"/*.[ch] >/dev/null 2>&1; then
        echo "layers: $dir/ holds C code but has no line in $rules" >&2
        bad=1
    fi
done
# A folder's private header (folder/name_int.h) is for that folder's own
# modules and for the tests; everything else goes through the public header.
int_re='#include "([a-z_]*)/[a-z_]*_int\.h"'
while IFS=: read -r file _ inc; do
    [[ $inc =~ $int_re ]] || continue
    owner=${BASH_REMATCH[1]}
    case ${file#./} in "$owner"/* | tests/*) continue ;; esac
    echo "layers: ${file#./} includes $owner/'s private header (only $owner/ and tests/ may):$inc" >&2
    bad=1
done < <(grep -rn '#include "[a-z_]*/[a-z_]*_int\.h"' . --include='*.c' --include='*.h' \
             --exclude-dir='build*' --exclude-dir=.git || true)
# store/store_impl.h is the store handle's layout, private to the modules
# that implement store.h. Everything else uses store.h, sst.h or store_int.h.
while IFS= read -r file; do
    echo "layers: $file includes store/store_impl.h, which is private to store/" >&2
    bad=1
done < <(grep -rl --include='*.c' --include='*.h' --exclude-dir='.git' \
             --exclude-dir='build*' '#include "store/store_impl.h"' . |
             grep -v '^\./store/' || true)
if [ "${1:-}" = -v ]; then printf '%s\n' "${!seen[@]}" | sort; fi
[ $bad -eq 0 ] && echo "layers: ${#seen[@]} folder edges, all allowed by $rules"
exit $bad
