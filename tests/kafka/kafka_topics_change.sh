#!/usr/bin/env bash
# `segd run` restarted on the same store and group with other input topics
# consumes the new ones (DESIGN §7.2 "A restart with other input topics"). On Apache Kafka
# a static member that rejoins a Stable group gets its previous assignment
# back without a rebalance (the coordinator stores its new subscription but
# does not assign again), and librdkafka takes that assignment as it is: a
# member that subscribed to topic a and restarts subscribing to b would
# hold a's partitions and never read b.
# Two cases, each on a store that consumed topic a first (stopped by
# SIGTERM): restarted with topics a,b, then with b alone. After each
# restart, within a bound (a timeout is a failure): /readyz is 200, the
# member holds the partitions of exactly its new topics (listed by /readyz,
# counted by /metrics; `segd owner` names it, by its client id, for every
# partition of b), b's events are applied
# (`segd get` shows users only b carries, the store's offsets reach b's
# ends), and the store's offsets of a are kept.
# Needs real Kafka: without KAFKA_CLUSTER_DIR it starts a cluster of its own
# (lib.bash require_kafka). usage: kafka_topics_change.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
# shellcheck source=tests/support/lib.bash
source "$(dirname "$0")/../support/lib.bash"
lib_init kafka_topics_change
require_kafka
start_broker 4 a,b,events.dlq
now=$(date +%s)
# a carries users u0..u39, b users u0..u79: u40..u79 are b's alone
"$segd" produce --brokers "$brokers" --topic "${tp}a" --users 40 --now "$now" \
  > /dev/null 2> "$tmp/produce-a.log" || fail "produce to a"
"$segd" produce --brokers "$brokers" --topic "${tp}b" --users 80 --now "$now" --seed 2 \
  > /dev/null 2> "$tmp/produce-b.log" || fail "produce to b"
port=$(/usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
# the seed workload's events are up to 30 days old: a 40-day horizon applies them all;
# a 20 s session (not 45) bounds the wait for a member that left no goodbye
cat > "$tmp/segd.conf" <<CONF
changes.enable = 0
batch.max.ms = 50
dlq.topic = ${tp}events.dlq
store.horizon.s = $((40 * 86400))
kafka.session.timeout.ms = 20000
CONF
BOUND_S=150 # a 20 s session timeout and a loaded machine; the defect waits forever
run_pid=""
start_run() { # TOPICS DB LOG
  SEGD_METRICS_LISTEN=127.0.0.1:$port "$segd" run --brokers "$brokers" --topic "$1" \
    --group "${tp}g" --db "$2" --config "$tmp/segd.conf" 2>> "$3" &
  run_pid=$!
  pids+=("$run_pid")
}
stop_run() { # LOG
  kill -TERM "$run_pid"
  wait "$run_pid" 2>/dev/null || true
  grep -q 'msg=final' "$1" || fail "segd run did not stop cleanly on SIGTERM"
}
metric() { # NAME: its value (unlabelled), empty when not answering
  curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null | sed -n "s/^$1 \([0-9]*\).*/\1/p"
}
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null)" = 200 ]; }
ends() { # TOPIC: "partition end" lines, from the brokers
  /usr/bin/python3 - "$brokers" "$1" <<'EOF'
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "kafka-topics-change-ends"})
for p in range(4):
    lo, hi = c.get_watermark_offsets(TopicPartition(sys.argv[2], p), timeout=10)
    print(p, hi)
c.close()
EOF
}
stored() { # DB TOPIC: "partition next-offset" lines of the store, sorted
  "$segd" offsets show --db "$1" 2>/dev/null | awk -v t="$2" '$2 == t {print $3, $4}' | sort -n
}
# sets seg to "KNOWN N" for USER in DB: whether the store has a record of
# the user (JSON "known") and how many live segments `segd get` shows. Run in
# this shell, not in $(...): a failed read or an answer that is not the
# user's JSON fails the test (no default count)
segments() { # DB USER
  local out
  out=$("$segd" get --db "$1" --now "$now" --json "$2" 2> "$tmp/get.err") ||
    fail "segd get --db $1 $2: $(tail -3 "$tmp/get.err")"
  seg=$(/usr/bin/python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["user_id"] == sys.argv[1] and isinstance(j["known"], bool), j
print("known" if j["known"] else "unknown", len(j["segments"]))' "$2" <<< "$out") ||
    fail "segd get --db $1 $2: not the JSON of one user: $out"
}
ends "${tp}a" > "$tmp/a.ends" || fail "watermarks of a"
ends "${tp}b" > "$tmp/b.ends" || fail "watermarks of b"
[ "$(awk '{s+=$2} END {print s}' "$tmp/b.ends")" -gt 0 ] || fail "nothing produced to b"

# waits until segd run consumed all of TOPIC into DB (its offsets at the ends)
caught_up() { # DB TOPIC ENDS
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt $BOUND_S ]; do
    kill -0 "$run_pid" 2>/dev/null || return 1
    [ "$(stored "$1" "$2")" = "$(cat "$3")" ] && return 0
    sleep 0.5
  done
  return 1
}

# true when /readyz lists as assigned every partition of TOPICS (comma-separated) and no other
assigned_topics() { # TOPICS
  curl -s "http://127.0.0.1:$port/readyz" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
got = {(p["topic"], p["partition"]) for p in json.load(sys.stdin)["partitions"]}
sys.exit(got != {(t, p) for t in sys.argv[1].split(",") for p in range(4)})' "$1" 2>/dev/null
}

# the partitions `segd owner`'s answer in FILE gives to CLIENT
owned() { # FILE CLIENT
  sed 's/^[^ ]* //' "$1" | sort -u | grep -c " owner=$2 host=" || true
}

one_case() { # NAME NEW_TOPICS ASSIGNED
  local name=$1 topics=$2 want=$3 db="$tmp/db.$1" log="$tmp/$1.log" i ok=""
  # the first run consumes a, and is stopped
  start_run "${tp}a" "$db" "$log"
  caught_up "$db" "${tp}a" "$tmp/a.ends" || fail "$name: the first run never consumed all of a"
  for i in $(seq 600); do ready && [ "$(metric segd_assigned_partitions)" = 4 ] && break; sleep 0.1; done
  ready && [ "$(metric segd_assigned_partitions)" = 4 ] || fail "$name: the first run not ready on a's 4 partitions"
  grep -q 'msg="group member".*group_instance_id=segd-' "$log" ||
    fail "$name: not a static member on Apache Kafka"
  segments "$db" u0000000079
  [ "$seg" = "unknown 0" ] || fail "$name: u79 (b's alone) is in the store before b: $seg"
  segments "$db" u0000000039 # the same read knows a's users
  [ "${seg%% *}" = known ] || fail "$name: u39 (a's) is not in the store after a: $seg"
  stop_run "$log"
  echo "--- restart with topics $topics" >> "$log"
  # restarted on the same store and group with the new topics
  local t0=$SECONDS
  start_run "$topics" "$db" "$log"
  while [ $((SECONDS - t0)) -lt $BOUND_S ]; do
    kill -0 "$run_pid" 2>/dev/null || fail "$name: segd run exited after its restart"
    segments "$db" u0000000079
    if ready && [ "$(metric segd_assigned_partitions)" = "$want" ] && assigned_topics "$topics" &&
       [ "${seg%% *}" = known ] && [ "${seg#* }" -gt 0 ] &&
       [ "$(stored "$db" "${tp}b")" = "$(cat "$tmp/b.ends")" ]; then
      ok=1
      break
    fi
    sleep 0.2
  done
  if [ -z "$ok" ]; then
    segments "$db" u0000000079
    fail "$name: within $BOUND_S s of the restart with topics $topics: readyz" \
      "$(curl -s "http://127.0.0.1:$port/readyz")," \
      "$(metric segd_assigned_partitions) partitions assigned (want $want)," \
      "u79: $seg segments, stored offsets of b: $(stored "$db" "${tp}b" | tr '\n' ' ')"
  fi
  echo "$name: b consumed $((SECONDS - t0)) s after the restart"
  # the group, asked by `segd owner`, names this member (its client id) for every partition of b
  local users client
  users=$(seq -f 'u%010g' 0 79 | tr '\n' ' ')
  client=$(sed -n 's/.*msg="group member".* client_id=\([^ ]*\) .*/\1/p' "$log" | tail -1)
  [ -n "$client" ] || fail "$name: no client id in the log"
  for i in $(seq 60); do
    # shellcheck disable=SC2086
    "$segd" owner --brokers "$brokers" --topic "${tp}b" --group "${tp}g" $users \
      > "$tmp/owner.$name" 2> "$tmp/owner.err" && [ "$(owned "$tmp/owner.$name" "$client")" = 4 ] && break
    sleep 0.5
  done
  [ "$(owned "$tmp/owner.$name" "$client")" = 4 ] ||
    fail "$name: segd owner does not name this member for b's 4 partitions: $(sort -u "$tmp/owner.$name")"
  # a's offsets are kept (a,b: and still at a's ends)
  [ "$(stored "$db" "${tp}a")" = "$(cat "$tmp/a.ends")" ] || fail "$name: a's stored offsets changed"
  stop_run "$log"
}
one_case ab "${tp}a,${tp}b" 8
one_case b "${tp}b" 4
echo ok
