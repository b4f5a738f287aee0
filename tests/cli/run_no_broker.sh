#!/usr/bin/env bash
# segd run with no broker answering (issue 30): within seconds its log names
# the brokers and librdkafka's cause ("no broker answers at 127.0.0.1:P
# (Connection refused)"), /readyz is 503 with reason "brokers" and that text,
# and the process keeps running and retrying. Once a broker answers at that
# address (a TCP relay to the test's broker is started there) it says so in
# the log and /readyz no longer gives the brokers as the reason.
# usage: run_no_broker.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init nobroker
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
ready() { curl -s -m 2 -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$mport/readyz" || true; }

start_broker 2 events,events.dlq,segments.changes
bport=$(free_port)   # nothing listens here until the relay starts
mport=$(free_port)
SEGD_METRICS_LISTEN=127.0.0.1:$mport SEGD_CHANGES_TOPIC="${tp}segments.changes" \
  "$segd" run --brokers 127.0.0.1:$bport --topic "${tp}events" --group "${tp}g" \
  --db "$tmp/db" > "$tmp/run.out" 2> "$tmp/run.log" &
run=$!
pids+=($run)

# within 10 s: the log says which brokers and why, /readyz says it too
t0=$(date +%s)
code=""
for _ in $(seq 100); do
  code=$(ready)
  [ "$code" = 503 ] && grep -q '"reason":"brokers"' "$tmp/ready.json" && break
  sleep 0.1
done
[ "$code" = 503 ] || fail "/readyz answered '$code' within 10 s of a start with no broker"
grep -q "\"reason\":\"brokers\"" "$tmp/ready.json" || fail "/readyz's reason is not the brokers: $(cat "$tmp/ready.json")"
grep -q "no broker answers at 127.0.0.1:$bport (Connection refused)" "$tmp/ready.json" ||
  fail "/readyz does not name the brokers and the cause: $(cat "$tmp/ready.json")"
grep -q "no broker answers at 127.0.0.1:$bport (Connection refused); retrying" "$tmp/run.log" ||
  fail "the log does not name the brokers and the cause"
[ $(( $(date +%s) - t0 )) -le 10 ] || fail "said after more than 10 s"
# not the group's explanation: no group is being waited for
if grep -q "waiting for the group's assignment" "$tmp/run.log"; then
  fail "the log explains a group assignment while no broker answers"
fi
sleep 3
kill -0 $run 2>/dev/null || fail "segd run stopped while no broker answers"
[ "$(ready)" = 503 ] || fail "/readyz not 503 while no broker answers"

# a broker at that address: a relay to the test's broker (its metadata names
# the broker's own address, which the clients use from then on)
target=${brokers%%,*}
/usr/bin/python3 - "$bport" "${target%:*}" "${target##*:}" > "$tmp/relay.log" 2>&1 <<'PY' &
import socket, sys, threading
port, host, tport = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(16)
while True:
    c, _ = srv.accept()
    u = socket.create_connection((host, tport))
    for a, b in ((c, u), (u, c)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
PY
pids+=($!)
for _ in $(seq 300); do
  grep -q "brokers answer again" "$tmp/run.log" && break
  sleep 0.1
done
grep -q "brokers answer again" "$tmp/run.log" || fail "no 'brokers answer again' within 30 s of a broker answering"
code=$(ready)
if grep -q '"reason":"brokers"' "$tmp/ready.json"; then
  fail "/readyz still gives the brokers as the reason: $(cat "$tmp/ready.json")"
fi
kill -0 $run 2>/dev/null || fail "segd run stopped"
echo "run_no_broker: ok (said within $(( $(date +%s) - t0 )) s; /readyz after: $code)"
