#!/usr/bin/env bash
# The Redis-protocol front (segd cache --resp) with real Redis clients:
# a store built by `segd run` from the dev broker, a snapshot of it, more
# events after the snapshot (deltas the cache tails), then `segd cache
# --resp` answers each user's ZRANGEBYSCORE as `segd get --json` of the
# store at the same clock; the same live entries loaded into a real
# redis-server (ZADD user expires_at segment) give byte-identical replies
# to ~650 pipelined reads (raw socket), to redis-cli and to hiredis
# (tests/support/resp_hiredis.c); writes are refused; /metrics counts commands.
# usage: resp_cli.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
. "$src/tests/support/lib.bash"
lib_init resp
check() { /usr/bin/python3 "$src/tests/support/resp_check.py" "$@"; }
hiredis=$(dirname "$segd")/resp_hiredis
for tool in redis-server redis-cli; do
  command -v $tool > /dev/null || fail "no $tool: scripts/install-deps.sh installs redis-server and redis-tools"
done
[ -x "$hiredis" ] || fail "no $hiredis: install libhiredis-dev (scripts/install-deps.sh) and re-run cmake"
now=$(date +%s)
users=60
horizon=$((40 * 86400)) # the seed workload's late events: see cache_cli.sh
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }

start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now \
  > /dev/null 2> "$tmp/produce.log" || fail "produce"
SEGD_STORE_HORIZON_S=$horizon "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" \
  --db "$tmp/db" -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
last=$(printf 'u%010d' $((users - 1)))
# the last user's live segments; empty when segd get fails (no default count)
segs() { "$segd" get --db "$tmp/db" --now $now --json "$last" 2> "$tmp/get.err" |
  /usr/bin/python3 -c "import json,sys;print(len(json.load(sys.stdin)['segments']))"; }
n=""
for _ in $(seq 300); do n=$(segs 2>/dev/null) && [ "$n" -ge 50 ] && break; sleep 0.2; done
[ -n "$n" ] && [ "$n" -ge 50 ] || fail "the store never held 50 segments of $last: '$n' $(cat "$tmp/get.err")"
sleep 1 # let the publisher acknowledge the last batches
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" --now $now \
  --horizon-s $horizon > "$tmp/export.log" 2>&1 || fail "export"
before=$(segs) || fail "segd get $last: $(cat "$tmp/get.err")"
# deltas after the snapshot: the cache must tail them
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now --seed 2 \
  > /dev/null 2>> "$tmp/produce.log" || fail "second produce"
for _ in $(seq 300); do [ "$(segs)" -gt "$before" ] && break; sleep 0.2; done
[ "$(segs)" -gt "$before" ] || fail "the second produce never reached the store"

port=$(free_port)
hport=$(free_port)
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$hport --resp 127.0.0.1:$port --resp-threads 2 --now $now \
  --horizon-s $horizon 2> "$tmp/cache.log" &
pids+=($!)
for _ in $(seq 150); do
  [ "$(redis-cli -p $port ZCARD "$last" 2>/dev/null)" -gt 0 ] 2>/dev/null && break
  sleep 0.1
done
grep -q "listening for Redis clients.*resp=127.0.0.1:$port threads=2" "$tmp/cache.log" ||
  fail "no resp listener at 127.0.0.1:$port: $(grep "Redis clients" "$tmp/cache.log")"
check store-equal "$segd" "$tmp/db" $now $users $port || fail "cache --resp != store"
curl -sf "http://127.0.0.1:$hport/healthz" | grep -q '"changes_applied":[1-9]' ||
  fail "the cache joined no delta"

# the same live entries in a real redis-server
rport=$(free_port)
redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  > "$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=($redis_pid)
for _ in $(seq 50); do redis-cli -p $rport PING > /dev/null 2>&1 && break; sleep 0.1; done
check zadds "$segd" "$tmp/db" $now $users | redis-cli -p $rport --pipe > "$tmp/pipe.log" 2>&1 ||
  fail "redis-cli --pipe: $(cat "$tmp/pipe.log")"
grep -q "errors: 0," "$tmp/pipe.log" || fail "ZADD errors: $(cat "$tmp/pipe.log")"
check queries "$segd" "$tmp/db" $now $users > "$tmp/queries.txt"
n=$(wc -l < "$tmp/queries.txt")
check raw $port < "$tmp/queries.txt" > "$tmp/segd.raw"
check raw $rport < "$tmp/queries.txt" > "$tmp/redis.raw"
[ -s "$tmp/segd.raw" ] || fail "no answer"
cmp "$tmp/segd.raw" "$tmp/redis.raw" ||
  fail "raw replies differ: $(cmp "$tmp/segd.raw" "$tmp/redis.raw" 2>&1 | head -1); $(diff <(tr '\r' ' ' < "$tmp/segd.raw") <(tr '\r' ' ' < "$tmp/redis.raw") | head -6)"
# redis-cli: one command per invocation, and its pipe of inline commands
for q in "ZRANGEBYSCORE $last $now +inf WITHSCORES" "ZRANGE $last +inf -inf BYSCORE REV LIMIT 1 4 WITHSCORES" \
    "ZCOUNT $last $now +inf" "ZCARD $last" "EXISTS $last nobody" "ZSCORE $last 12345678"; do
  a=$(redis-cli -p $port $q) && b=$(redis-cli -p $rport $q) || fail "redis-cli $q"
  [ "$a" = "$b" ] || fail "redis-cli $q: segd '$a' redis '$b'"
done
[ "$(redis-cli -p $port ZRANGEBYSCORE $last $now +inf | wc -l)" -gt 1 ] || fail "no segments for $last"
check raw $port inline < "$tmp/queries.txt" > "$tmp/segd.inline"
check raw $rport inline < "$tmp/queries.txt" > "$tmp/redis.inline"
cmp -s "$tmp/segd.inline" "$tmp/redis.inline" || fail "inline commands: the replies differ"
# hiredis, pipelined
"$hiredis" 127.0.0.1 $port < "$tmp/queries.txt" > "$tmp/hiredis.segd" || fail "hiredis on segd"
"$hiredis" 127.0.0.1 $rport < "$tmp/queries.txt" > "$tmp/hiredis.redis" || fail "hiredis on redis"
[ "$(wc -l < "$tmp/hiredis.segd")" = "$n" ] || fail "hiredis: $(wc -l < "$tmp/hiredis.segd") replies of $n"
diff "$tmp/hiredis.segd" "$tmp/hiredis.redis" > /dev/null || fail "hiredis replies differ"

# segd only: writes refused, HELLO, the limits, /metrics
[ "$(redis-cli -p $port ZADD "$last" 1 2)" = "ERR read-only replica" ] || fail "ZADD accepted"
[ "$(redis-cli -p $port DEL "$last")" = "ERR read-only replica" ] || fail "DEL accepted"
redis-cli -p $port HELLO 2 | tr '\n' ' ' | grep -q "^server segd version .* proto 2 id [0-9]* mode standalone" ||
  fail "HELLO 2: $(redis-cli -p $port HELLO 2)"
redis-cli -p $port HELLO 3 | grep -q NOPROTO || fail "HELLO 3"
out=$(/usr/bin/python3 -c "
import socket
s = socket.create_connection(('127.0.0.1', $port))
s.sendall(b'*2\r\n\$4\r\nECHO\r\n\$1073741824\r\n' + b'x' * 65536)
print(s.recv(200).decode().strip())
s.shutdown(socket.SHUT_WR)
print(s.recv(200) == b'')")
[ "$out" = $'-ERR Protocol error: invalid bulk length\nTrue' ] || fail "1 GiB bulk: $out"
redis-cli -p $port PING | grep -qx PONG || fail "the server did not survive"
curl -sf "http://127.0.0.1:$hport/metrics" > "$tmp/metrics.txt" || fail "no /metrics"
for want in 'segd_resp_commands_total{command="zrangebyscore",result="ok"}' \
    'segd_resp_commands_total{command="write",result="error"} 2' \
    'segd_resp_protocol_errors_total 1' 'segd_resp_connections ' \
    'segd_resp_reply_cache_lookups_total{result="miss"}'; do
  grep -qF "$want" "$tmp/metrics.txt" || fail "/metrics lacks '$want': $(grep segd_resp "$tmp/metrics.txt")"
done
kill -TERM $redis_pid
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
echo "resp_cli: $n queries byte-identical to redis-server; ok"
