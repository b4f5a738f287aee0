# Shared by the shell tests that run segd against the dev broker: source it
# after `set -euo pipefail` with segd=$1 set. lib_init NAME makes $tmp
# (kept with KEEP=1), a pids array whose processes are stopped on exit, and
# fail (prints the tail of every log in $tmp); start_broker PARTITIONS
# TOPICS starts `segd dev-broker` on loopback and sets $brokers.
lib_init() {
  tmp=$(mktemp -d "/tmp/segd-$1-XXXXXX")
  pids=()
  trap lib_cleanup EXIT
}
lib_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -12 "$f" >&2; done
  exit 1
}
start_broker() {
  "$segd" dev-broker --partitions "$1" --topics "$2" > "$tmp/broker.out" 2> "$tmp/broker.log" &
  pids+=($!)
  for _ in $(seq 50); do grep -q bootstrap= "$tmp/broker.out" 2>/dev/null && break; sleep 0.1; done
  brokers=$(sed -n 's/^bootstrap=//p' "$tmp/broker.out")
  [ -n "$brokers" ] || fail "no broker"
}
