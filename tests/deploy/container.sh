#!/usr/bin/env bash
# The deployment, built and run: the image of docker/Dockerfile built with
# podman (the base a Debian 12 imported from Debian's packages, once: no image
# registry is reachable here), then `segd run` in a container against the
# suite's Apache Kafka cluster (host network, loopback) ingesting what the
# host's `segd produce` wrote, its store a volume; `segd snapshot export` from
# the image writes units into that volume, and `segd cache` in a container
# loads them and follows the change stream: for a sample of users, `curl` on
# the cache's GET /v1/users/{id} equals `segd get --json` on the store, after
# load and again after more events (the cache tailed them). The image's
# HEALTHCHECK command answers for the running `segd run`.
# Where podman cannot build or run, this fails (it is part of the suite).
# Needs podman, runc and debootstrap (scripts/install-deps.sh installs them;
# this test installs them when missing and it may). Cold (no base image, no
# layers): about 22 s of debootstrap plus the image build, which compiles
# segd; warm: podman's layer cache, ccache for a source change.
# SEGD_CONTAINER_KEEP_IMAGE=1 keeps the image tag it built (localhost/segd:test-PID).
# usage: container.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
source "$(dirname "$0")/../support/lib.bash"
lib_init container
t0=$(date +%s)
base=localhost/debian:12
image=localhost/segd:test-$$
names=()            # containers this test started, removed at exit
own_kafka=0
ct_cleanup() {
  local n
  for n in "${names[@]}"; do
    podman logs "$n" > "$tmp/$n.log" 2>&1 || true
    podman rm -f -t 5 "$n" >/dev/null 2>&1 || true
  done
  # The tag goes, the image stays: `podman rmi` would delete the runtime
  # stage's cached layers with it (its parents), and the next build would
  # install the runtime packages again. `podman image prune` frees them.
  [ -n "${SEGD_CONTAINER_KEEP_IMAGE:-}" ] || podman untag "$image" "$image" >/dev/null 2>&1 || true
  lib_cleanup
  [ $own_kafka = 0 ] || bash "$lib_root/scripts/kafka.sh" stop >/dev/null 2>&1 || true
}
trap ct_cleanup EXIT
trap 'exit 143' TERM INT HUP
# fail after saving the containers' logs into $tmp, which fail prints
cfail() {
  local n
  for n in "${names[@]}"; do podman logs "$n" > "$tmp/$n.log" 2>&1 || true; done
  fail "$@"
}
step() { echo "container: $* ($(( $(date +%s) - t0 )) s)"; }

# --- podman, runc, debootstrap ----------------------------------------------
missing=()
for c in podman runc debootstrap; do command -v $c >/dev/null 2>&1 || missing+=($c); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "container: installing ${missing[*]} (scripts/install-deps.sh installs them too)"
  { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"; } > "$tmp/apt.log" 2>&1 ||
    fail "podman, runc and debootstrap are needed and could not be installed: $(tail -5 "$tmp/apt.log")"
fi
# These machines refuse raising RLIMIT_NOFILE/NPROC (no CAP_SYS_RESOURCE) and
# crun cannot use their hybrid cgroups: runc, no default ulimits.
printf '[containers]\ndefault_ulimits = []\n' > "$tmp/containers.conf"
export CONTAINERS_CONF="$tmp/containers.conf"
pm() { podman --runtime runc "$@"; }
pm info > "$tmp/podman-info.log" 2>&1 || fail "podman does not work: $(tail -5 "$tmp/podman-info.log")"

# --- the base image, once per machine ---------------------------------------
# Tests of other checkouts may import it at the same time: one at a time.
exec 9> /var/tmp/segd-container-base.lock
flock -w 600 9 || fail "waited 10 min for another import of $base"
if pm image exists "$base"; then
  step "$base is there"
else
  debootstrap --variant=minbase bookworm "$tmp/rootfs" > "$tmp/debootstrap.log" 2>&1 ||
    fail "debootstrap: $(tail -5 "$tmp/debootstrap.log")"
  tar -C "$tmp/rootfs" -c . | pm import - "$base" > "$tmp/import.log" 2>&1 ||
    fail "podman import: $(tail -5 "$tmp/import.log")"
  rm -rf "$tmp/rootfs"
  step "imported $base (debootstrap)"
fi
exec 9>&-

# --- the image ---------------------------------------------------------------
b0=$(date +%s)
pm build --format docker --network host -f "$src/docker/Dockerfile" -t "$image" "$src" > "$tmp/build.out" 2>&1 ||
  { tail -40 "$tmp/build.out" >&2; fail "podman build of docker/Dockerfile failed"; }
step "built $image in $(( $(date +%s) - b0 )) s"
# the image's user and entrypoint: `segd help` as segd (uid 10001), not root
[ "$(pm image inspect --format '{{.Config.User}}' "$image")" = segd ] || fail "image user is not segd"
pm run --rm --network host "$image" help > "$tmp/help.out" 2>&1 || fail "segd help in the image: $(tail -5 "$tmp/help.out")"
grep -q 'segd run' "$tmp/help.out" || fail "segd help in the image: $(head -5 "$tmp/help.out")"

# --- Kafka --------------------------------------------------------------------
if [ -z "${KAFKA_CLUSTER_DIR:-}" ]; then
  export KAFKA_CLUSTER_DIR="$tmp/kafka"
  own_kafka=1
  echo "container: no KAFKA_CLUSTER_DIR: starting a Kafka cluster of its own"
  bash "$lib_root/scripts/kafka.sh" start 3 > "$tmp/kafka.out" 2>&1 ||
    fail "cannot start a Kafka cluster: $(tail -5 "$tmp/kafka.out")"
fi
require_kafka_cluster
start_broker 4 events,events.dlq,segments.changes
changes="${tp}segments.changes"
now=$(date +%s)
users=200
horizon=$((40 * 86400))   # the seed workload is up to 30 days old (tests/cli/cache_cli.sh)
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }

"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now \
  > "$tmp/produce1.out" 2> "$tmp/produce.log" || fail "produce"

# --- segd run in a container, its store a volume ------------------------------
# the image runs as segd (uid 10001): the volume is that user's
vol="$tmp/vol"
mkdir -p "$vol"
chown 10001:10001 "$vol" 2>/dev/null || chmod 0777 "$vol"
mport=$(free_port)
run_name="segd-container-run-$$"
names+=("$run_name")
pm run -d --name "$run_name" --health-interval disable --network host -v "$vol:/var/lib/segd" \
  -e SEGD_METRICS_LISTEN=127.0.0.1:$mport -e SEGD_CHANGES_TOPIC="$changes" \
  -e SEGD_STORE_HORIZON_S=$horizon -e SEGD_STORE_MIN_FREE_MB=8 \
  "$image" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" \
  --db /var/lib/segd/db -X session.timeout.ms=6000 > "$tmp/run-id.out" 2>&1 ||
  cfail "podman run segd run: $(cat "$tmp/run-id.out")"
step "segd run started in a container"
db="$vol/db"
wait_consumed() { # until the store's offsets cover $1 events
  local consumed=0
  for _ in $(seq 450); do
    [ "$(pm inspect --format '{{.State.Running}}' "$run_name" 2>/dev/null)" = true ] ||
      cfail "segd run's container stopped"
    consumed=$("$segd" offsets show --db "$db" --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys
print(sum(o['next_offset'] for o in json.load(sys.stdin)['offsets'] if o['topic'] == '${tp}events'))" \
      2>/dev/null || echo 0)
    [ "$consumed" -ge "$1" ] && return 0
    sleep 0.2
  done
  cfail "the containerised segd run consumed $consumed of $1 events"
}
produced_in() { sed -n 's/^produced \([0-9]*\) events.*/\1/p' "$@" | awk '{n += $1} END {print n + 0}'; }
p1=$(produced_in "$tmp/produce1.out")
[ "$p1" -gt 0 ] || fail "produce count: $(cat "$tmp/produce1.out")"
wait_consumed "$p1"
step "store consumed $p1 events"
# the image's HEALTHCHECK command, as the image states it, inside the container
# (docker format: OCI images have no HEALTHCHECK, podman build drops it)
pm image inspect "$image" > "$tmp/image.json"
grep -q 'curl -fsS .*/healthz' "$tmp/image.json" || cfail "the image has no /healthz HEALTHCHECK"
pm healthcheck run "$run_name" > "$tmp/healthcheck.out" 2>&1 ||
  cfail "HEALTHCHECK of segd run: $(cat "$tmp/healthcheck.out")"
curl -sf "http://127.0.0.1:$mport/healthz" > /dev/null || cfail "segd run /healthz on :$mport"
sleep 1 # let the publisher acknowledge the last batches

# --- units from the image's segd snapshot export, into the volume --------------
export_name="segd-container-export-$$"
names+=("$export_name")
pm run --name "$export_name" --no-healthcheck --network host -v "$vol:/var/lib/segd" -e SEGD_METRICS_LISTEN=off \
  "$image" snapshot export --db /var/lib/segd/db --changes-topic "$changes" \
  --to /var/lib/segd/snap --now $now --horizon-s $horizon --format native > "$tmp/export.log" 2>&1 ||
  cfail "snapshot export in the image: $(tail -5 "$tmp/export.log")"
grep -q "snapshot: 4 units of ${tp}events (4 partitions" "$tmp/export.log" ||
  cfail "a unit per input partition: $(cat "$tmp/export.log")"

# --- segd cache in a container -------------------------------------------------
port=$(free_port)
cache_name="segd-container-cache-$$"
names+=("$cache_name")
pm run -d --name "$cache_name" --no-healthcheck --network host -v "$vol:/var/lib/segd:ro" -e SEGD_METRICS_LISTEN=off \
  "$image" cache --snapshot /var/lib/segd/snap --brokers "$brokers" --changes "$changes" \
  --listen 127.0.0.1:$port --now $now --horizon-s $horizon > "$tmp/cache-id.out" 2>&1 ||
  cfail "podman run segd cache: $(cat "$tmp/cache-id.out")"
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$port/healthz" > "$tmp/health.json" 2>/dev/null && break
  sleep 0.2
done
grep -q '"status":"ok"' "$tmp/health.json" 2>/dev/null || cfail "cache /healthz: $(cat "$tmp/health.json" 2>/dev/null)"
grep -q "\"users\":$users" "$tmp/health.json" || cfail "cache /healthz users: $(cat "$tmp/health.json")"
step "segd cache loaded the units in a container"

# A sample of users (every 8th, and the last): curl on the cache equals
# `segd get --json` on the store at the same clock, once both caught up.
sample=()
for i in $(seq 0 8 $((users - 1))) $((users - 1)); do sample+=("$(printf 'u%010d' "$i")"); done
compare() {
  local deadline=$(( $(date +%s) + 60 ))
  while :; do
    "$segd" get --db "$db" --now $now --json "${sample[@]}" > "$tmp/want.jsonl" 2> "$tmp/get.log" ||
      cfail "segd get on the store: $(cat "$tmp/get.log")"
    : > "$tmp/got.jsonl"
    for u in "${sample[@]}"; do
      curl -sf "http://127.0.0.1:$port/v1/users/$u" >> "$tmp/got.jsonl" || echo '{"curl": "failed"}' >> "$tmp/got.jsonl"
      echo >> "$tmp/got.jsonl"
    done
    if /usr/bin/python3 - "$tmp/want.jsonl" "$tmp/got.jsonl" ${#sample[@]} > "$tmp/compare.out" 2>&1 <<'PY'
import json, sys
want = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
n = int(sys.argv[3])
assert len(want) == n and len(got) == n, (len(want), len(got), n)
assert sum(len(w["segments"]) for w in want) > 0, "no segments in the store"
bad = [w["user_id"] for w, g in zip(want, got) if g.get("known") is not True or g != w]
assert not bad, "%d users differ, e.g. %s" % (len(bad), bad[:3])
print("%d users equal, %d segments" % (n, sum(len(w["segments"]) for w in want)))
PY
    then return 0; fi
    [ "$(date +%s)" -lt $deadline ] || cfail "cache != store ($1): $(cat "$tmp/compare.out")"
    sleep 0.5
  done
}
compare "after load"
step "after load: $(cat "$tmp/compare.out")"

# more events: the containerised cache follows the change stream
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now --seed 2 \
  > "$tmp/produce2.out" 2>> "$tmp/produce.log" || fail "second produce"
wait_consumed $(( p1 + $(produced_in "$tmp/produce2.out") ))
compare "after tailing"
step "after tailing: $(cat "$tmp/compare.out")"
curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"changes_applied":[1-9]' ||
  cfail "the cache's /healthz shows no applied changes"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/users/nobody")
[ "$code" = 404 ] || cfail "unknown user: HTTP $code"

# segd run stops cleanly on SIGTERM (podman stop), exit 0
pm stop -t 30 "$run_name" > /dev/null 2>&1 || cfail "podman stop segd run"
rc=$(pm inspect --format '{{.State.ExitCode}}' "$run_name")
[ "$rc" = 0 ] || cfail "containerised segd run exited $rc"
step "ok"
echo "container: ok"
