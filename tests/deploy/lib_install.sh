#!/usr/bin/env bash
# libsegd-cache as a bidder team gets it (docs/serving.md):
# `cmake --install` into a fresh prefix puts the shared (versioned SONAME) and
# static libraries, include/segd/cache.h and segd-cache.pc there; the shared
# object exports only segd_cache_* and needs no RocksDB, librdkafka or libcurl;
# examples/bidder.c compiles from the prefix alone with
# `pkg-config --cflags --libs segd-cache` (and statically from the .a), loads
# a real snapshot (avro and native units) and answers every user, with and
# without a filter, as `segd get` does on the store the snapshot came from; a
# missing or damaged snapshot is refused. libsegd-tail (segd/tail.h,
# segd-tail.pc): the same bidder built with -DBIDDER_TAIL loads the snapshot,
# joins the change topic `segd run` published after it, and equals
# `segd get` on the store that went on; exports only segd_cache_*.
# The same installed with the system prefixes /usr and /usr/local into a
# DESTDIR: the .pc files name the right directories (lib/<multiarch> under
# /usr) and bidder.c builds with pkg-config against each.
# usage: lib_install.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
build=$(dirname "$segd")
source "$src/tests/support/lib.bash"
lib_init lib
now=1800000000
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1 || fail "cmake --install"
pc=$(find "$prefix" -name segd-cache.pc | head -1)
[ -n "$pc" ] || fail "no segd-cache.pc"
libdir=$(dirname "$(dirname "$pc")")
[ -f "$prefix/include/segd/cache.h" ] || fail "no include/segd/cache.h"
[ -f "$libdir/libsegd-cache.a" ] || fail "no static library"
soname=$(readelf -d "$libdir/libsegd-cache.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libsegd-cache.so.1 ] || fail "SONAME '$soname'"
[ -L "$libdir/libsegd-cache.so.1" ] || fail "no libsegd-cache.so.1 link"
exported=$(nm -D --defined-only "$libdir/libsegd-cache.so" | awk '$2 ~ /^[TDBR]$/ {print $3}')
[ -n "$exported" ] || fail "nothing exported"
if grep -v '^segd_cache_' <<<"$exported"; then fail "exports beyond the segd_cache_ API"; fi
grep -qx segd_cache_lookup_linked <<<"$exported" || fail "libsegd-cache lacks segd_cache_lookup_linked"
if readelf -d "$libdir/libsegd-cache.so" | grep NEEDED | grep -E 'rocksdb|rdkafka|curl'; then
  fail "libsegd-cache needs a writer-side library"
fi

[ -f "$prefix/include/segd/tail.h" ] || fail "no include/segd/tail.h"
[ -f "$libdir/libsegd-tail.a" ] || fail "no static libsegd-tail"
tail_exported=$(nm -D --defined-only "$libdir/libsegd-tail.so" | awk '$2 ~ /^[TDBR]$/ {print $3}')
if grep -v '^segd_cache_' <<<"$tail_exported"; then fail "libsegd-tail exports beyond segd_cache_"; fi
grep -qx segd_cache_tail_poll <<<"$tail_exported" || fail "libsegd-tail lacks the tail API"
readelf -d "$libdir/libsegd-tail.so" | grep NEEDED | grep -q rdkafka || fail "libsegd-tail without librdkafka"

# sanitized builds: the bidder must carry the same runtime as the library
cflags=()
grep -q '^SEGD_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && cflags=(-fsanitize=address,undefined)

# The system prefixes (issue 23): configured with -DCMAKE_INSTALL_PREFIX=/usr,
# GNUInstallDirs puts the libraries in lib/<multiarch> on Debian, where the
# .pc files once said includedir /usr/lib/include. Each prefix is installed
# into a DESTDIR (component segd-cache) and bidder.c built with pkg-config
# from it (PKG_CONFIG_SYSROOT_DIR), then run on the DESTDIR's library.
multiarch=$(cc -print-multiarch 2>/dev/null || true)
system_prefix() { # $1 prefix, $2 build tree configured for it, $3 the libdir wanted
  local tag=${1//\//-}
  local dest=$tmp/dest$tag pcdir
  DESTDIR=$dest cmake --install "$2" --prefix "$1" --component segd-cache \
    > "$tmp/install$tag.log" 2>&1 || fail "DESTDIR install to $1"
  pcdir=$(dirname "$(find "$dest" -name segd-cache.pc | head -1)")
  [ "$pcdir" = "$dest$3/pkgconfig" ] || fail "$1: segd-cache.pc in '$pcdir', want $dest$3/pkgconfig"
  local inc lib
  inc=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir segd-cache)
  lib=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir segd-cache)
  [ "$inc" = "$1/include" ] || fail "$1: segd-cache.pc includedir '$inc', want $1/include"
  [ "$lib" = "$3" ] || fail "$1: segd-cache.pc libdir '$lib', want $3"
  [ "$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir segd-tail)" = "$3" ] ||
    fail "$1: segd-tail.pc libdir"
  export PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$pcdir
  [ -f "$(pkg-config --variable=includedir segd-cache)/segd/cache.h" ] || fail "$1: no cache.h"
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror "${cflags[@]}" -o "$tmp/bidder$tag" "$src/examples/bidder.c" \
    $(pkg-config --cflags --libs segd-cache) 2> "$tmp/cc$tag.log" ||
    fail "bidder does not build against $1 in a DESTDIR: $(cat "$tmp/cc$tag.log")"
  unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH
  LD_LIBRARY_PATH=$dest$3 ldd "$tmp/bidder$tag" > "$tmp/ldd$tag.out"
  grep -q "libsegd-cache.so.1 => $dest$3/" "$tmp/ldd$tag.out" ||
    fail "bidder$tag does not load the DESTDIR's library: $(cat "$tmp/ldd$tag.out")"
  if LD_LIBRARY_PATH=$dest$3 "$tmp/bidder$tag" "$tmp/nowhere" $now u1 2> "$tmp/bidder$tag.err"; then
    fail "bidder$tag loaded a missing snapshot"
  fi
  grep -q "not found" "$tmp/bidder$tag.err" || fail "bidder$tag: $(cat "$tmp/bidder$tag.err")"
}
# /usr/local: this build tree's GNUInstallDirs directories (its prefix is the default)
system_prefix /usr/local "$build" \
  "/usr/local/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")"
# /usr: a tree configured for it, only the libraries built
cmake -S "$src" -B "$tmp/build-usr" -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release \
  > "$tmp/configure-usr.log" 2>&1 || fail "configure for /usr: $(tail -5 "$tmp/configure-usr.log")"
nice cmake --build "$tmp/build-usr" -j2 --target segd_cache_shared segd_cache_static \
  segd_tail_shared segd_tail_static > "$tmp/build-usr.log" 2>&1 ||
  fail "build for /usr: $(tail -5 "$tmp/build-usr.log")"
system_prefix /usr "$tmp/build-usr" "/usr/lib${multiarch:+/$multiarch}"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pc_libs=$(pkg-config --libs segd-cache | xargs)
[ "$pc_libs" = "-L$(pkg-config --variable=libdir segd-cache) -lsegd-cache" ] ||
  fail "pkg-config --libs names more than the library: $pc_libs"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "${cflags[@]}" -o "$tmp/bidder" "$src/examples/bidder.c" \
  $(pkg-config --cflags --libs segd-cache) -Wl,-rpath,"$(pkg-config --variable=libdir segd-cache)" \
  2> "$tmp/cc.log" || fail "bidder does not build against the prefix: $(cat "$tmp/cc.log")"
# shellcheck disable=SC2046
cc -std=c11 "${cflags[@]}" -o "$tmp/bidder-static" "$src/examples/bidder.c" \
  $(pkg-config --cflags segd-cache) "$libdir/libsegd-cache.a" \
  $(pkg-config --static --libs-only-l segd-cache | sed 's/-lsegd-cache//') \
  2> "$tmp/cc-static.log" || fail "bidder does not link statically: $(cat "$tmp/cc-static.log")"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "${cflags[@]}" -DBIDDER_TAIL -o "$tmp/bidder-tail" \
  "$src/examples/bidder.c" $(pkg-config --cflags --libs segd-tail) \
  -Wl,-rpath,"$(pkg-config --variable=libdir segd-tail)" 2> "$tmp/cc-tail.log" ||
  fail "bidder does not build against segd-tail: $(cat "$tmp/cc-tail.log")"
# (ldd's output to a file: grep -q ends at the first match, and under
# pipefail an ldd still writing then fails the pipe with SIGPIPE)
ldd "$tmp/bidder" > "$tmp/ldd.txt"
grep -q "libsegd-cache.so.1 => $libdir" "$tmp/ldd.txt" ||
  grep -q "libsegd-cache.so.1 => .*prefix" "$tmp/ldd.txt" || fail "bidder: $(cat "$tmp/ldd.txt")"

# the broker (and so $tp, the topic prefix) before the snapshot, which names
# the input topic segd run consumes below
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" generate --out "$tmp/seed.jsonl" --users 60 --now $now > /dev/null
"$segd" backfill --db "$tmp/db" --now $now "$tmp/seed.jsonl" > /dev/null
for fmt in avro native; do
  "$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap-$fmt" --topic "${tp}events" --buckets 4 \
    --now $now --format $fmt > /dev/null
done
mapfile -t users < <(python3 -c "
import json
print('\n'.join(sorted({json.loads(l)['user_id'] for l in open('$tmp/seed.jsonl')})))")
users+=(never-seen-user)
after=$((now + 7 * 86400))
for fmt in avro native; do
for filter in "" "--expiring-after $after"; do
  # shellcheck disable=SC2086
  for b in bidder bidder-static; do
    "$tmp/$b" "$tmp/snap-$fmt/${tp}events" $now $filter "${users[@]}" > "$tmp/$b.out" 2> "$tmp/$b.log" ||
      fail "$b $fmt $filter"
  done
  cmp -s "$tmp/bidder.out" "$tmp/bidder-static.out" || fail "shared and static bidders differ"
  # shellcheck disable=SC2086
  "$segd" get --db "$tmp/db" --now $now --json $filter "${users[@]}" > "$tmp/get.json" ||
    fail "segd get $filter"
  python3 - "$tmp/get.json" "$tmp/bidder.out" <<'PY' || fail "bidder and segd get differ ($filter)"
import json, sys
want = {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    segs = o.get("segments") or []
    want[o["user_id"]] = " ".join(["1", str(len(segs))] + ["%d:%d" % (s["id"], s["expires_at"]) for s in segs])
got = {}
for line in open(sys.argv[2]):
    user, rest = line.rstrip("\n").split(" ", 1)
    got[user] = rest
want["never-seen-user"] = "0 0"
bad = [u for u in want if got.get(u) != want[u]] + [u for u in got if u not in want]
for u in bad[:5]:
    print("user %s: bidder %.120r, segd get %.120r" % (u, got.get(u), want.get(u)), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
done
done
grep -q "^never-seen-user 0 0$" "$tmp/bidder.out" || fail "an unknown user is not 'known 0'"
[ "$(awk '$3 > 0' "$tmp/bidder.out" | wc -l)" -gt 30 ] || fail "too few users with segments"

# the tail: users the snapshot does not hold and new events of old ones
# reach the store after it, through the outbox `segd run` publishes
"$segd" generate --out "$tmp/later.jsonl" --users 80 --seed 9 --now $now > /dev/null
"$segd" backfill --db "$tmp/db" --now $now "$tmp/later.jsonl" > /dev/null
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}lib" --db "$tmp/db" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 150); do
  "$segd" stats --db "$tmp/db" 2>/dev/null | grep -q "^unpublished outbox *0 entries" && break
  sleep 0.2
done
"$segd" stats --db "$tmp/db" | grep -q "^unpublished outbox *0 entries" || fail "outbox not published"
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
mapfile -t later < <(python3 -c "
import json
print('\n'.join(sorted({json.loads(l)['user_id'] for f in ('$tmp/seed.jsonl', '$tmp/later.jsonl') for l in open(f)})))")
"$tmp/bidder-tail" "$tmp/snap-native/${tp}events" $now --tail "$brokers" "${tp}segments.changes" \
  "${later[@]}" > "$tmp/tail.out" 2> "$tmp/tail.log" || fail "bidder-tail"
"$segd" get --db "$tmp/db" --now $now --json "${later[@]}" > "$tmp/get-later.json" || fail "get"
python3 - "$tmp/get-later.json" "$tmp/tail.out" <<'PY' || fail "bidder-tail and segd get differ"
import json, sys
want = {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    segs = o.get("segments") or []
    want[o["user_id"]] = " ".join(["1", str(len(segs))] + ["%d:%d" % (s["id"], s["expires_at"]) for s in segs])
got = dict(l.rstrip("\n").split(" ", 1) for l in open(sys.argv[2]))
bad = [u for u in want if got.get(u) != want[u]]
for u in bad[:3]:
    print("user %s: bidder-tail %.100r, segd get %.100r" % (u, got.get(u), want[u]), file=sys.stderr)
sys.exit(1 if bad or len(got) != len(want) else 0)
PY
# the snapshot alone lacks the later users: the tail made the difference
"$tmp/bidder" "$tmp/snap-native/${tp}events" $now "${later[@]}" > "$tmp/snap-only.out" 2>/dev/null
cmp -s "$tmp/snap-only.out" "$tmp/tail.out" && fail "the tail added nothing to the snapshot"

if "$tmp/bidder" "$tmp/nowhere" $now u1 2> "$tmp/missing.log"; then fail "a missing snapshot loaded"; fi
grep -q "not found" "$tmp/missing.log" || fail "missing snapshot: $(cat "$tmp/missing.log")"
# a unit file damaged after export is refused (its manifest's SHA-256), not served
unit=$(ls "$tmp/snap-native/${tp}events/p-00001/"p-00001-*.avro)
printf 'X' | dd of="$unit" bs=1 seek=200 conv=notrunc status=none
if "$tmp/bidder" "$tmp/snap-native/${tp}events" $now u1 2> "$tmp/corrupt.log"; then fail "a damaged unit loaded"; fi
grep -q "corrupt" "$tmp/corrupt.log" || fail "damaged unit: $(cat "$tmp/corrupt.log")"
echo "lib_install: ${#users[@]} users equal to segd get, shared and static, exports only segd_cache_*; ${#later[@]} after the change topic through libsegd-tail"
