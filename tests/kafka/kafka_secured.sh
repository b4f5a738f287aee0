#!/usr/bin/env bash
# Every Kafka client segd opens, through a secured broker (SASL_SSL, as
# managed Kafka requires: scripts/kafka_secured.sh, SASL/PLAIN over TLS with
# a CA made at start), configured by a segd config file with
# kafka.security.protocol, kafka.sasl.* and kafka.ssl.ca.location:
#   segd produce --config (its producer), a malformed event beside it;
#   segd run: the group consumer, the dead-letter producer (the malformed
#   event dead-lettered) and the change publisher (deltas on the change
#   topic), its /metrics page;
#   segd owner, segd replay (its consumer), segd identity produce,
#   segd erase --brokers (the marker producer), segd cache's tail;
# then the refusals: a wrong password and a CA that did not sign the
# broker's certificate each stop segd run (exit non-zero) within 60 s with
# one error naming the cause, with no offset in its store and none
# committed. Last, the password appears in no output of any of them (stderr
# and stdout of every command, --print-config, the metrics page, the dead
# letters' headers and payload).
# Starts its own secured broker (one node, about a minute) unless
# KAFKA_SECURED_DIR names a running one; needs Java 17+, Maven (or the jar
# cache of scripts/kafka.sh), openssl and python3-confluent-kafka.
# usage: kafka_secured.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
# shellcheck source=tests/support/lib.bash
source "$(dirname "$0")/../support/lib.bash"
lib_init kafka_secured
py=/usr/bin/python3
t0=$(date +%s)

if [ -n "${KAFKA_SECURED_DIR:-}" ] && [ -f "$KAFKA_SECURED_DIR/bootstrap" ]; then
  ks=$KAFKA_SECURED_DIR
else
  ks=$tmp/kafka-secured
  trap 'lib_cleanup_secured' EXIT
  lib_cleanup_secured() {
    KAFKA_SECURED_DIR=$ks bash "$lib_root/scripts/kafka_secured.sh" stop >/dev/null 2>&1 || true
    lib_cleanup
  }
  KAFKA_SECURED_DIR=$ks bash "$lib_root/scripts/kafka_secured.sh" start > "$tmp/kafka.out" 2>&1 ||
    fail "cannot start the secured broker: $(tail -5 "$tmp/kafka.out")"
fi
brokers=$(cat "$ks/bootstrap")
admin=$(cat "$ks/admin")
password=$(cat "$ks/password")
[ ${#password} -ge 12 ] || fail "no password in $ks"
tp="kafka_secured-$$-$RANDOM."
for t in events:2 events.dlq:1 segments.changes:2 segments.links:2; do
  KAFKA_SECURED_DIR=$ks bash "$lib_root/scripts/kafka_secured.sh" topic "$tp${t%%:*}" "${t##*:}" \
    > "$tmp/topic.out" 2>&1 || fail "cannot create $tp${t%%:*}: $(cat "$tmp/topic.out")"
done
echo "secured broker at $brokers ($(( $(date +%s) - t0 )) s)"

# $1: the file, $2: the password, $3: the CA, $4: the group
write_conf() {
  cat > "$1" <<CONF
brokers = $brokers
topics = ${tp}events
group = ${tp}$4
changes.topic = ${tp}segments.changes
identity.links.topic = ${tp}segments.links
kafka.security.protocol = SASL_SSL
kafka.sasl.mechanism = $(cat "$ks/mechanism")
kafka.sasl.username = $(cat "$ks/user")
kafka.sasl.password = $2
kafka.ssl.ca.location = $3
kafka.session.timeout.ms = 6000
CONF
}
write_conf "$tmp/segd.conf" "$password" "$ks/ca.pem" g
free_port() { "$py" -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
now=$(date +%s)

# --- segd produce, and one event no decoder takes (produced on the admin port)
"$segd" produce --config "$tmp/segd.conf" --topic "${tp}events" --users 20 --events 60 \
  --now "$now" > "$tmp/produce.out" 2> "$tmp/produce.log" || fail "produce: $(cat "$tmp/produce.log")"
grep -q "delivered 60 of 60" "$tmp/produce.out" || fail "produce: $(cat "$tmp/produce.out")"
"$py" - "$admin" "${tp}events" <<'EOF' || fail "cannot produce the malformed event"
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1]})
p.produce(sys.argv[2], key=b"u-bad", value=b"\x00not an avro event at all", partition=0)
sys.exit(1 if p.flush(30) else 0)
EOF
echo "produce: 60 events through SASL_SSL, 1 malformed"

# --- segd run: consumer, dead-letter producer, change publisher, /metrics
"$segd" run --config "$tmp/segd.conf" --db "$tmp/db" --print-config > "$tmp/print-config.out" \
  2> "$tmp/print-config.log" || fail "--print-config: $(cat "$tmp/print-config.log")"
grep -q "sasl.password" "$tmp/print-config.out" || fail "--print-config lacks kafka.sasl.password"
mport=$(free_port)
SEGD_METRICS_LISTEN=127.0.0.1:$mport "$segd" run --config "$tmp/segd.conf" --db "$tmp/db" \
  > "$tmp/run.out" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
consumed() {
  "$segd" offsets show --db "$1" --json 2>/dev/null | "$py" -c "
import json, sys
print(sum(r['next_offset'] for r in json.load(sys.stdin)['offsets']
          if r['topic'] == '${tp}events'))" 2>/dev/null || echo 0
}
for _ in $(seq 600); do
  [ "$(consumed "$tmp/db")" -ge 61 ] && break
  kill -0 $run_pid 2>/dev/null || fail "segd run exited: $(tail -5 "$tmp/run.log")"
  sleep 0.2
done
[ "$(consumed "$tmp/db")" -ge 61 ] || fail "segd run did not consume the 61 events: $("$segd" offsets show --db "$tmp/db" 2>&1)"
curl -sf "http://127.0.0.1:$mport/metrics" > "$tmp/metrics.out" || fail "no /metrics"
# the dead letter and the deltas, read back on the admin port
"$py" - "$admin" "${tp}events.dlq" "${tp}segments.changes" "$tmp/dlq.out" <<'EOF' > "$tmp/topics.out" 2>&1 ||
import sys, time
from confluent_kafka import Consumer, TopicPartition
def read(topic, parts, want, timeout=60):
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "check", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    got, end = [], time.time() + timeout
    while len(got) < want and time.time() < end:
        m = c.poll(1)
        if m is not None and not m.error():
            got.append(m)
    c.close()
    return got
dl = read(sys.argv[2], 1, 1)
with open(sys.argv[4], "wb") as f:
    for m in dl:
        for k, v in m.headers() or []:
            f.write(k.encode() + b"=" + (v or b"") + b"\n")
        f.write(m.value() or b"")
ch = read(sys.argv[3], 2, 1)
print("dead letters: %d, change events: %d" % (len(dl), len(ch)))
sys.exit(0 if dl and ch else 1)
EOF
  fail "dead letter or change events missing: $(cat "$tmp/topics.out")"
grep -q "segd.error" "$tmp/dlq.out" || fail "the dead letter has no segd.error header: $(cat "$tmp/dlq.out")"
echo "run: consumed 61, $(cat "$tmp/topics.out")"

# --- segd owner (metadata and the group's description)
"$segd" owner --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" u0000000001 \
  > "$tmp/owner.out" 2> "$tmp/owner.log" || fail "owner: $(cat "$tmp/owner.log")"
grep -q "partition=" "$tmp/owner.out" || fail "owner: $(cat "$tmp/owner.out")"
grep -q "owner=unknown" "$tmp/owner.out" && fail "owner could not describe the group: $(cat "$tmp/owner.out" "$tmp/owner.log")"
echo "owner: $(head -1 "$tmp/owner.out")"

# --- segd replay (its own consumer) into a store of its own
rc=0
"$segd" replay --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --db "$tmp/db.replay" --from-beginning --to-end --no-changes --dlq-file "$tmp/replay.dlq" \
  > "$tmp/replay.out" 2> "$tmp/replay.log" || rc=$?
# exit 3: partial, the malformed event dead-lettered (to --dlq-file)
[ "${rc:-0}" = 3 ] || fail "replay: exit ${rc:-0}, not 3: $(tail -5 "$tmp/replay.log")"
grep -q "1 dead-lettered" "$tmp/replay.log" || fail "replay: $(tail -5 "$tmp/replay.log")"
grep -q "^replayed 61 messages (60 events" "$tmp/replay.log" || fail "replay: $(head -3 "$tmp/replay.log")"
echo "replay: $(grep -m1 "^replayed" "$tmp/replay.log")"

# --- segd identity produce (the links producer)
printf '{"id_a":"u0000000001","id_b":"u0000000002","op":"LINK","ts_ms":%d}\n' "$((now * 1000))" \
  > "$tmp/links.jsonl"
"$segd" identity produce --config "$tmp/segd.conf" "$tmp/links.jsonl" > "$tmp/identity.out" \
  2> "$tmp/identity.log" || fail "identity produce: $(cat "$tmp/identity.log")"
echo "identity produce: exit 0 $(cat "$tmp/identity.out" "$tmp/identity.log" | tail -1)"

# --- segd erase --brokers (the erasure marker producer), read by segd run
rc=0
"$segd" erase --config "$tmp/segd.conf" --brokers "$brokers" --topic "${tp}events" \
  --framing single-object u0000000003 > "$tmp/erase.out" 2> "$tmp/erase.log" || rc=$?
# exit 6: sent, its effect not waited for (no --db)
[ "${rc:-0}" = 6 ] && grep -q "produced 1 ERASE_USER" "$tmp/erase.out" ||
  fail "erase --brokers: exit ${rc:-0}: $(cat "$tmp/erase.log" "$tmp/erase.out")"
echo "erase: $(tail -1 "$tmp/erase.out")"

# --- segd cache: its tail of the change topic
"$segd" snapshot export --db "$tmp/db" --changes-topic "${tp}segments.changes" --to "$tmp/snap" \
  --now "$now" > "$tmp/export.out" 2> "$tmp/export.log" || fail "export: $(cat "$tmp/export.log")"
cport=$(free_port)
"$segd" cache --config "$tmp/segd.conf" --snapshot "$tmp/snap" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$cport --now "$now" > "$tmp/cache.out" 2> "$tmp/cache.log" &
pids+=($!)
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$cport/healthz" > "$tmp/cache-health.out" 2>/dev/null && break
  sleep 0.2
done
grep -q '"status":"ok"' "$tmp/cache-health.out" 2>/dev/null ||
  fail "cache tail never caught up: $(cat "$tmp/cache-health.out" 2>/dev/null; tail -5 "$tmp/cache.log")"
curl -sf "http://127.0.0.1:$cport/metrics" > "$tmp/cache-metrics.out" || fail "cache /metrics"
echo "cache: tail caught up through SASL_SSL"
kill $run_pid; wait $run_pid 2>/dev/null || true

# --- refusals: each stops segd run, names its cause, consumes nothing
refused() {  # NAME WHY CONF
  local name=$1 why=$2 rc=0 start
  start=$(date +%s)
  SEGD_METRICS_LISTEN=off timeout 90 "$segd" run --config "$3" --db "$tmp/db.$name" \
    > "$tmp/$name.out" 2> "$tmp/$name.log" || rc=$?
  [ "$rc" != 0 ] || fail "$name: segd run exited 0"
  [ "$rc" != 124 ] || fail "$name: segd run still running after 90 s: $(tail -3 "$tmp/$name.log")"
  grep -qF -- "$why" "$tmp/$name.log" || fail "$name: no error saying '$why': $(tail -5 "$tmp/$name.log")"
  if [ -d "$tmp/db.$name" ]; then
    "$segd" offsets show --db "$tmp/db.$name" > "$tmp/$name.offsets" 2>&1 ||
      fail "$name: offsets show: $(cat "$tmp/$name.offsets")"
    ! grep -q "${tp}events" "$tmp/$name.offsets" || fail "$name: the store holds offsets: $(cat "$tmp/$name.offsets")"
  fi
  "$py" - "$admin" "${tp}$name" "${tp}events" <<'EOF' > "$tmp/$name.committed" 2>&1 ||
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2]})
got = c.committed([TopicPartition(sys.argv[3], p) for p in range(2)], timeout=10)
c.close()
sys.exit(1 if len(got) != 2 or any(t.error is not None or t.offset >= 0 for t in got) else 0)
EOF
    fail "$name: offsets committed for the group: $(cat "$tmp/$name.committed")"
  echo "$name: exit $rc after $(( $(date +%s) - start )) s: $(grep -m1 -oF -- "$why" "$tmp/$name.log")"
}
write_conf "$tmp/wrong-password.conf" "not-$password" "$ks/ca.pem" wrong-password
refused wrong-password "SASL authentication failed" "$tmp/wrong-password.conf"
write_conf "$tmp/untrusted.conf" "$password" "$ks/other-ca.pem" untrusted
refused untrusted "certificate verify failed" "$tmp/untrusted.conf"

# --- the password in no output: every file this test wrote but the configs
leaks=$(grep -rlF --include='*.out' --include='*.log' --include='*.offsets' \
  --include='*.committed' --include='*.dlq' -e "$password" "$tmp" 2>/dev/null || true)
[ -z "$leaks" ] || fail "the password is shown in: $leaks"
scanned=$(find "$tmp" -maxdepth 1 \( -name '*.out' -o -name '*.log' -o -name '*.dlq' \) | wc -l)
[ "$scanned" -ge 20 ] || fail "only $scanned outputs to scan"
echo "password in none of $scanned outputs"
echo "kafka_secured: ok ($(( $(date +%s) - t0 )) s)"
