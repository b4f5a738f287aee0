#!/usr/bin/env bash
# A real third-party client against segd's broker: kcat produces raw Avro
# SegmentEvents (encoded by python3-avro, an independent encoder) to the
# test's broker (tests/support/lib.bash: the real cluster or `segd dev-broker`);
# `segd run` ingests them; `segd get` reads them back.
# usage: kcat_ingest.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
source "$(dirname "$0")/../support/lib.bash"
lib_init kcat
command -v kcat >/dev/null || fail "kcat is not installed"

start_broker 2 ev,ev.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
bootstrap=$brokers
case "$bootstrap" in 127.0.0.1:*|localhost:*) ;; *) fail "broker not on loopback: $bootstrap";; esac

/usr/bin/python3 - "$src/schemas/segment_event.avsc" "$tmp" <<'PY'
import io, sys, avro.schema, avro.io
schema = avro.schema.parse(open(sys.argv[1]).read())
out = sys.argv[2]
for i in range(20):
    ev = {"user_id": "kc%d" % (i % 5), "ts_ms": 1799990000000 + i, "op": "UPSERT",
          "segments": [{"segment_id": 100 + i, "ttl_s": 86400, "flags": 0, "partner_id": i}],
          "source": "kcat"}
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(ev, avro.io.BinaryEncoder(buf))
    open("%s/msg%02d.avro" % (out, i), "wb").write(buf.getvalue())
PY
for i in $(seq -w 0 19); do
  kcat -P -b "$bootstrap" -t "${tp}ev" -k "kc$((10#$i % 5))" "$tmp/msg$i.avro" || fail "kcat produce"
done

cat > "$tmp/segd.conf" <<CONF
# input produced by kcat: raw Avro against the local schema
input.format = raw
batch.max.ms = 20
kafka.session.timeout.ms = 6000
# the events are stamped 2027-01: not from the future for this test
limits.max.clock.skew.ms = 3000000000000
CONF
"$segd" run --brokers "$bootstrap" --topic "${tp}ev" --group "${tp}kc" --db "$tmp/db" --config "$tmp/segd.conf" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
# wait until every user's last segment is readable (all 20 messages applied)
for _ in $(seq 300); do
  out=$("$segd" get --db "$tmp/db" --now 1800000000 --json kc0 kc1 kc2 kc3 kc4 2>/dev/null || true)
  n=0
  for id in 115 116 117 118 119; do echo "$out" | grep -q "\"id\":$id," && n=$((n + 1)); done
  [ $n = 5 ] && break
  sleep 0.2
done
[ $n = 5 ] || fail "only $n of the 5 users' last segments readable: $out"
kill -TERM $run_pid
wait $run_pid || fail "segd run exited with $?"
grep -q "msg=final consumed=20 events=20 segments=20 dlq=0" "$tmp/run.log" || fail "run summary"
out=$("$segd" get --db "$tmp/db" --now 1800000000 --json kc4)
want='{"user_id":"kc4","known":true,"segments":[{"id":104,"expires_at":1800079200,"ts_ms":1799990000004,"flags":0,"partner_id":4},{"id":109,"expires_at":1800079200,"ts_ms":1799990000009,"flags":0,"partner_id":9},{"id":114,"expires_at":1800079200,"ts_ms":1799990000014,"flags":0,"partner_id":14},{"id":119,"expires_at":1800079200,"ts_ms":1799990000019,"flags":0,"partner_id":19}]}'
[ "$out" = "$want" ] || fail "get kc4: $out"
echo "kcat_ingest: ok"
