#!/usr/bin/env bash
# Runs of `segd bench ingest` in the order given, each with its own
# variation of the same arguments, on one running Kafka cluster
# (scripts/kafka.sh start), each on freshly made topics: the bench needs its
# seven topics to exist and be empty. Alternating the variations in one
# session is how two of them are compared on a shared machine. Each run's
# report goes to OUTDIR/NN-MODE.md, its stderr beside it; its stores (in
# OUTDIR/NN-MODE.db) are removed after it.
#
#   bench/ingest_runs.sh SEGD OUTDIR MODE... -- BENCH_ARGS...
#   MODE: one or more of these joined by '+':
#     without      BENCH_ARGS as given
#     with         plus --compact-during
#     writer-on    plus --writer on       writer-off  plus --writer off
#     fresh        without --prefill-users: into an empty store
#     queue-100k   plus -X queued.min.messages=100000 -X
#                  queued.max.messages.kbytes=K: the consumer's queue as
#                  --memory-mb (1024 if not given) sized it before session 16
#                  (librdkafka's default length, K from the 12 % share), to
#                  compare with what the budget sizes now
#
# Example (session 12): KAFKA_CLUSTER_DIR=/tmp/kafka-bench bench/ingest_runs.sh \
#   build/segd /tmp/ic with without with -- --users 40000 --partitions 32 \
#   --prefill-users 60000 --producer-process --memory-mb 256
# The topics get the partition count of --partitions and replication 1
# (a one-node cluster); --brokers is added from the cluster's bootstrap.
# INGEST_FRESH_BROKER=1 restarts the cluster (fresh storage, same node count)
# before each run, so that no run inherits the broker's state from the one
# before (session 12: runs slowed down one after the other on one broker,
# and with a fresh broker as well, so that was the machine).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kafka="$here/scripts/kafka.sh"
segd=$1 out=$2
shift 2
modes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do modes+=("$1"); shift; done
[ $# -gt 0 ] || { echo "usage: $0 SEGD OUTDIR MODE... -- BENCH_ARGS..." >&2; exit 2; }
shift
args=("$@")
parts=32 memory_mb=1024
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = --partitions ] && parts=${args[$((i + 1))]}
  [ "${args[$i]}" = --memory-mb ] && memory_mb=${args[$((i + 1))]}
  case "${args[$i]}" in --memory-mb=*) memory_mb=${args[$i]#--memory-mb=} ;; esac
done
# config/memory.c's fetch share before session 16: 12 % of the budget less
# 48 MiB, a quarter of it (1 MB - 50 MiB) for fetch.max.bytes, the rest the
# queue's payload; its length was librdkafka's default
old_share=$(( (memory_mb - 48) * 1048576 / 100 * 12 ))
old_fetch_max=$(( old_share / 4 < 1000000 ? 1000000 : old_share / 4 > 52428800 ? 52428800 : old_share / 4 ))
old_queue_kb=$(( (old_share - old_fetch_max) >> 10 ))
old_queue_kb=$(( old_queue_kb > 2097151 ? 2097151 : old_queue_kb ))
topics=(bench.events bench.events.dlq bench.events.changes bench.events.half
        bench.events.half.dlq bench.events.quarter bench.events.quarter.dlq)
mkdir -p "$out"

# Deletion is asynchronous on Kafka: a topic is recreated once its name is free.
fresh_topics() {
  bash "$kafka" delete-topic "${topics[@]}" >/dev/null 2>&1 || true
  local t deadline
  for t in "${topics[@]}"; do
    deadline=$((SECONDS + 120))
    until bash "$kafka" topic "$t" "$parts" 1 >/dev/null 2>&1; do
      [ $SECONDS -lt $deadline ] || { echo "cannot recreate topic $t" >&2; exit 1; }
      sleep 2
    done
  done
}

n=0
for m in "${modes[@]}"; do
  n=$((n + 1))
  extra=() run_args=("${args[@]}")
  IFS=+ read -r -a parts_of_mode <<<"$m"
  for v in "${parts_of_mode[@]}"; do
    case $v in
      with) extra+=(--compact-during) ;;
      without) ;;
      writer-on) extra+=(--writer on) ;;
      writer-off) extra+=(--writer off) ;;
      queue-100k) extra+=(-X queued.min.messages=100000 -X queued.max.messages.kbytes=$old_queue_kb) ;;
      fresh)
        run_args=()
        for ((i = 0; i < ${#args[@]}; i++)); do
          case ${args[$i]} in
            --prefill-users) i=$((i + 1)) ;;
            --prefill-users=*) ;;
            *) run_args+=("${args[$i]}") ;;
          esac
        done ;;
      *) echo "unknown mode $v in $m (with, without, writer-on, writer-off, fresh, queue-100k)" >&2; exit 2 ;;
    esac
  done
  if [ "${INGEST_FRESH_BROKER:-0}" = 1 ]; then
    nodes=$(cat "${KAFKA_CLUSTER_DIR:-/tmp/segd-kafka}/nodes")
    bash "$kafka" stop >/dev/null 2>&1
    bash "$kafka" start "$nodes" >/dev/null
  fi
  brokers=$(bash "$kafka" bootstrap)
  fresh_topics
  f=$(printf '%s/%02d-%s' "$out" "$n" "$m")
  echo "run $n ($m) -> $f.md ($(date -u +%T))" >&2
  mkdir "$f.db"
  "$segd" bench ingest "${run_args[@]}" "${extra[@]}" --brokers "$brokers" --dir "$f.db" \
    >"$f.md" 2>"$f.err"
  rm -rf "$f.db"  # the bench leaves its stores behind
done
