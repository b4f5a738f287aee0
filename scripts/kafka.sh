#!/usr/bin/env bash
# A real Apache Kafka cluster on loopback for the tests, chaos trials and
# benchmarks: KRaft, every node a combined broker and controller, automatic
# topic creation off as in production.
#
#   scripts/kafka.sh start [NODES]     fetch the broker (once), format, start, wait; prints bootstrap=
#   scripts/kafka.sh stop              stop every node by pid (TERM, then KILL after 30 s)
#   scripts/kafka.sh bootstrap         print the bootstrap list of the running cluster
#   scripts/kafka.sh topic NAME PARTITIONS [RF [key=value ...]]   create a topic, wait for its leaders
#   scripts/kafka.sh delete-topic NAME...
#   scripts/kafka.sh leader TOPIC PARTITION     the node id leading a partition
#   scripts/kafka.sh isr TOPIC PARTITION        its in-sync replicas (node ids, comma-separated)
#   scripts/kafka.sh controller        the node id of the active KRaft controller (the quorum leader)
#   scripts/kafka.sh kill|term|pause|resume NODE   SIGKILL/SIGTERM/SIGSTOP/SIGCONT one node
#   scripts/kafka.sh restart NODE      start a stopped node again on its own storage
#   scripts/kafka.sh delete-records TOPIC PARTITION OFFSET   move a partition's log start
#   scripts/kafka.sh fetch             only download the jars into the cache
#
# KAFKA_CLUSTER_DIR (default /tmp/segd-kafka) holds one cluster: its nodes'
# configs, logs, data, pids and the bootstrap file. Several clusters can run
# side by side in different folders (a failover test kills nodes of its own).
# KAFKA_START_TIMEOUT_S (default 90) bounds the wait for every node to
# register at start. The jars are cached under KAFKA_CACHE_DIR (default
# ~/.cache/segd-kafka): a second start downloads nothing. Needs Java 17+
# and Maven; installs Debian's default-jre-headless and maven when absent.
set -euo pipefail
KAFKA_VERSION=4.1.1   # also in scripts/kafka/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
dir=${KAFKA_CLUSTER_DIR:-/tmp/segd-kafka}
cache=${KAFKA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/segd-kafka}/$KAFKA_VERSION
py=/usr/bin/python3
admin() { "$py" "$here/kafka/admin.py" "$(cat "$dir/bootstrap")" "$@"; }
die() { echo "kafka.sh: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

ensure_tools() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  "$py" -c 'import confluent_kafka' 2>/dev/null || missing+=(python3-confluent-kafka)
  apt_install_missing kafka.sh "${missing[@]}"
}

fetch() {
  [ -f "$cache/lib/.complete" ] && return 0
  ensure_tools
  mkdir -p "$cache"
  rm -rf "$cache/lib.part"
  mvn -q -B -f "$here/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$cache/lib.part" -Dmdep.includeScope=runtime >&2 ||
    die "cannot fetch Apache Kafka $KAFKA_VERSION from Maven Central"
  touch "$cache/lib.part/.complete"
  rm -rf "$cache/lib" && mv "$cache/lib.part" "$cache/lib"
}

java_node() {  # NODE: run one node in the background, record its pid
  local d=$dir/node-$1
  kafka_java "$d/server.properties" "$d/server.log" "$d/stdout.log" "$d/pid"
}

# A port free when chosen can be taken before the JVM binds it (another test
# starting its own cluster): a start that does not come up is tried once more
# on new ports (kafka_outage's cluster, session 15's final CI).
start() {
  local nodes=${1:-3}
  fetch
  if [ -f "$dir/bootstrap" ] && running_any; then
    die "a cluster already runs in $dir (scripts/kafka.sh stop first)"
  fi
  start_once "$nodes" && return 0
  echo "kafka.sh: the cluster did not come up; once more on new ports" >&2
  start_once "$nodes" || die "the cluster did not come up"
}

start_once() {
  local nodes=$1
  rm -rf "$dir" && mkdir -p "$dir"
  mapfile -t ports < <(free_ports $((2 * nodes)))
  local voters="" bootstrap="" n
  for n in $(seq 1 "$nodes"); do
    voters+="${voters:+,}$n@127.0.0.1:${ports[$((2 * n - 1))]}"
    bootstrap+="${bootstrap:+,}127.0.0.1:${ports[$((2 * n - 2))]}"
  done
  local rf=$(( nodes < 3 ? nodes : 3 ))
  local cluster_id
  # not starting with '-': kafka-storage would take such an id for an option
  # ("argument --cluster-id/-t: expected one argument"; 1 start in 64)
  cluster_id=$("$py" -c 'import base64,os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if s[0] != "-":
        print(s)
        break')
  for n in $(seq 1 "$nodes"); do
    mkdir -p "$dir/node-$n/data"
    cat > "$dir/node-$n/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:${ports[$((2 * n - 2))]},CONTROLLER://127.0.0.1:${ports[$((2 * n - 1))]}
advertised.listeners=PLAINTEXT://127.0.0.1:${ports[$((2 * n - 2))]}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/node-$n/data
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=1
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$(( rf < 2 ? 1 : 2 ))
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=2000
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
log.retention.check.interval.ms=5000
log.segment.bytes=67108864
delete.topic.enable=true
EOF
    java -cp "$cache/lib/*" -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
      -Dsegd.kafka.log="$dir/node-$n/format.log" kafka.tools.StorageTool format \
      -t "$cluster_id" -c "$dir/node-$n/server.properties" > "$dir/node-$n/format.out" 2>&1 ||
      die "cannot format node $n: $(tail -3 "$dir/node-$n/format.out")"
  done
  echo "$bootstrap" > "$dir/bootstrap"
  echo "$nodes" > "$dir/nodes"
  for n in $(seq 1 "$nodes"); do java_node "$n"; done
  if ! admin wait "$nodes" "${KAFKA_START_TIMEOUT_S:-90}"; then
    for n in $(seq 1 "$nodes"); do
      echo "--- node $n" >&2; tail -n 5 "$dir/node-$n/stdout.log" "$dir/node-$n/server.log" >&2 || true
    done
    stop
    return 1
  fi
  echo "bootstrap=$bootstrap"
}

node_pid() { cat "$dir/node-$1/pid" 2>/dev/null || true; }
# alive: the pid is a Kafka node of this folder, not a process that reused
# the number after the node exited
alive() {
  local p; p=$(node_pid "$1")
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null &&
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir/node-$1/server.properties"
}
running_any() {
  local n
  for n in $(seq 1 "$(cat "$dir/nodes" 2>/dev/null || echo 0)"); do alive "$n" && return 0; done
  return 1
}

stop() {
  [ -f "$dir/nodes" ] || return 0
  local n p
  for n in $(seq 1 "$(cat "$dir/nodes")"); do
    p=$(node_pid "$n"); [ -n "$p" ] || continue
    kill -CONT "$p" 2>/dev/null || true   # a paused node cannot handle TERM
    kill -TERM "$p" 2>/dev/null || true
  done
  for _ in $(seq 300); do running_any || break; sleep 0.1; done
  for n in $(seq 1 "$(cat "$dir/nodes")"); do
    alive "$n" && kill -KILL "$(node_pid "$n")" 2>/dev/null || true
  done
  for _ in $(seq 50); do running_any || break; sleep 0.1; done
  return 0
}

signal() {  # SIG NODE
  local p; p=$(node_pid "$2")
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null || die "node $2 is not running"
  kill "-$1" "$p"
  if [ "$1" = KILL ] || [ "$1" = TERM ]; then
    for _ in $(seq 300); do alive "$2" || return 0; sleep 0.1; done
    die "node $2 did not exit after SIG$1"
  fi
}

restart() {
  alive "$1" && die "node $1 still runs"
  java_node "$1"
}

controller() {  # the quorum's leader, from Kafka's own metadata-quorum tool
  local out id
  out=$(java -cp "$cache/lib/*" -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
    -Dsegd.kafka.log="$dir/tools.log" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-server "$(cat "$dir/bootstrap")" describe --status 2>&1) ||
    die "metadata-quorum describe --status: $(echo "$out" | tail -2)"
  id=$(echo "$out" | sed -n 's/^LeaderId:[[:space:]]*\([0-9][0-9]*\)$/\1/p')
  [ -n "$id" ] || die "no LeaderId in metadata-quorum's answer: $(echo "$out" | head -3)"
  echo "$id"
}

delete_records() {  # TOPIC PARTITION OFFSET
  local f; f=$(mktemp "$dir/delete-records-XXXXXX.json")  # tests may call it side by side
  printf '{"partitions":[{"topic":"%s","partition":%d,"offset":%d}],"version":1}\n' "$1" "$2" "$3" > "$f"
  java -cp "$cache/lib/*" -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
    -Dsegd.kafka.log="$dir/tools.log" org.apache.kafka.tools.DeleteRecordsCommand \
    --bootstrap-server "$(cat "$dir/bootstrap")" --offset-json-file "$f"
  local rc=$?
  rm -f "$f"
  return $rc
}

cmd=${1:-}
shift || true
case "$cmd" in
  start) start "$@" ;;
  stop) stop ;;
  fetch) fetch ;;
  bootstrap) [ -f "$dir/bootstrap" ] || die "no cluster in $dir"; cat "$dir/bootstrap" ;;
  topic) [ $# -ge 2 ] || die "usage: topic NAME PARTITIONS [RF [key=value ...]]"
         name=$1 parts=$2; shift 2
         rf=${1:-$(( $(cat "$dir/nodes") < 3 ? $(cat "$dir/nodes") : 3 ))}; shift || true
         admin create "$name" "$parts" "$rf" "$@" ;;
  delete-topic) admin delete "$@" ;;
  leader) admin leader "$1" "$2" ;;
  isr) admin isr "$1" "$2" ;;
  controller) controller ;;
  kill) signal KILL "$1" ;;
  term) signal TERM "$1" ;;
  pause) signal STOP "$1" ;;
  resume) signal CONT "$1" ;;
  restart) restart "$1" ;;
  delete-records) delete_records "$@" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
