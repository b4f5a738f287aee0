#!/usr/bin/env bash
# Topics segd run needs, on brokers that do not create topics (Apache Kafka
# with auto.create.topics.enable=false, as scripts/kafka.sh runs it, and as
# production runs it): each missing topic stops `segd run` at start with an
# error naming it, a non-zero exit, nothing consumed (no offset in the
# store, no offset committed for the group, the group never joined). The
# input topic, the dead-letter topic (dlq.topic) and the change topic
# (changes.topic) are each missing in turn; then a change topic with fewer
# partitions than the input (change partition p carries input partition
# p's deltas, DESIGN §5) is refused with exit 2, naming both counts.
# Needs real Kafka: without KAFKA_CLUSTER_DIR it starts a cluster of its own
# (lib.bash require_kafka).
# usage: kafka_topics.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
# shellcheck source=tests/support/lib.bash
source "$(dirname "$0")/../support/lib.bash"
lib_init kafka_topics
require_kafka
# the topics that exist: input "${tp}events" (4 partitions), its DLQ, a
# change topic of 4 and one of 2; the missing ones are never created
start_broker 4 events,events.dlq,changes4
bash "$lib_root/scripts/kafka.sh" topic "${tp}changes2" 2 3 > "$tmp/topic.out" 2>&1 ||
  fail "cannot create ${tp}changes2: $(cat "$tmp/topic.out")"
lib_topics+=("${tp}changes2")
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users 10 --events 40 \
  > /dev/null 2> "$tmp/produce.log" || fail "produce: $(cat "$tmp/produce.log")"

# runs segd run with $1 as its name and the rest as flags; must exit
# non-zero (or with $expect_rc), within a bound, saying $why
refused() {
  local name=$1 why=$2 rc=0; shift 2
  SEGD_METRICS_LISTEN=off timeout 60 "$segd" run --brokers "$brokers" --group "${tp}g-$name" \
    --db "$tmp/db.$name" -X session.timeout.ms=6000 "$@" 2> "$tmp/$name.log" || rc=$?
  [ "$rc" != 0 ] || fail "$name: segd run started"
  [ "$rc" != 124 ] || fail "$name: segd run still running after 60 s"
  [ -z "${expect_rc:-}" ] || [ "$rc" = "$expect_rc" ] || fail "$name: exit $rc, not $expect_rc"
  grep -qF -- "$why" "$tmp/$name.log" || fail "$name: no error saying: $why"
  # nothing consumed: no input offset in the store, none committed
  if [ -d "$tmp/db.$name" ]; then
    "$segd" offsets show --db "$tmp/db.$name" > "$tmp/$name.offsets" 2>&1 ||
      fail "$name: offsets show of the store it left: $(cat "$tmp/$name.offsets")"
    if grep -q "${tp}events" "$tmp/$name.offsets"; then
      fail "$name: the store holds offsets: $(cat "$tmp/$name.offsets")"
    fi
  fi
  grep -q 'msg="partitions assigned"' "$tmp/$name.log" && fail "$name: joined the group and got partitions"
  # (a read that fails, whole or for a partition, fails too: not "none committed")
  /usr/bin/python3 - "$brokers" "${tp}g-$name" "${tp}events" <<'EOF' > "$tmp/$name.committed" 2>&1 ||
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2]})
got = c.committed([TopicPartition(sys.argv[3], p) for p in range(4)], timeout=10)
c.close()
print(" ".join("%d:%d%s" % (tp.partition, tp.offset, "" if tp.error is None else ":" + str(tp.error))
               for tp in got))
sys.exit(1 if len(got) != 4 or any(tp.error is not None or tp.offset >= 0 for tp in got) else 0)
EOF
    fail "$name: offsets committed for the group, or not read: $(cat "$tmp/$name.committed")"
  echo "$name: refused (exit $rc): $(grep -m1 -oF -- "$why" "$tmp/$name.log")"
}

cat > "$tmp/input.conf" <<CONF
changes.topic = ${tp}changes4
CONF
refused input "input topic ${tp}nosuch does not exist" --topic "${tp}nosuch" --config "$tmp/input.conf"
cat > "$tmp/dlq.conf" <<CONF
changes.topic = ${tp}changes4
dlq.topic = ${tp}nosuch.dlq
CONF
refused dlq "dead-letter topic ${tp}nosuch.dlq (dlq.topic) does not exist" \
  --topic "${tp}events" --config "$tmp/dlq.conf"
cat > "$tmp/changes.conf" <<CONF
changes.topic = ${tp}nosuch.changes
CONF
refused changes "change topic ${tp}nosuch.changes does not exist" \
  --topic "${tp}events" --config "$tmp/changes.conf"
cat > "$tmp/fewer.conf" <<CONF
changes.topic = ${tp}changes2
CONF
expect_rc=2 refused fewer "change topic ${tp}changes2 has 2 partitions, fewer than the 4 of input topic ${tp}events" \
  --topic "${tp}events" --config "$tmp/fewer.conf"

# and with every topic there, the same command runs and consumes
cat > "$tmp/ok.conf" <<CONF
changes.topic = ${tp}changes4
batch.max.ms = 50
CONF
SEGD_METRICS_LISTEN=off "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g-ok" \
  --db "$tmp/db.ok" --config "$tmp/ok.conf" -X session.timeout.ms=6000 2> "$tmp/ok.log" &
ok_pid=$!
pids+=($ok_pid)
for _ in $(seq 600); do # its 10 s progress line
  kill -0 $ok_pid 2>/dev/null || fail "segd run with every topic present exited"
  grep -q 'msg=progress consumed=40 ' "$tmp/ok.log" && break
  sleep 0.2
done
kill -TERM $ok_pid
wait $ok_pid || fail "segd run exit $?"
"$segd" offsets show --db "$tmp/db.ok" | grep -q "^offset .*${tp}events " || fail "segd run consumed nothing"
echo ok
