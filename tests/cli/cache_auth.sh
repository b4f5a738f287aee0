#!/usr/bin/env bash
# Access control of segd cache's fronts (docs/serving.md "Authentication"):
# - RESP (--resp-password-file): redis-cli, hiredis and raw bytes. Before
#   AUTH every command but AUTH/HELLO/QUIT is -NOAUTH, a wrong password
#   -WRONGPASS; AUTH pw, AUTH default pw and HELLO 2 AUTH default pw let a
#   connection in; the raw replies of an auth sequence are byte-identical
#   to a redis-server started with --requirepass.
# - HTTP (--http-token-file): 401 + WWW-Authenticate: Bearer without or with
#   a wrong token on the data routes and /metrics (a POST's body too);
#   /healthz and /readyz stay open for load balancers; 200 with the token.
# - SEGD_CACHE_RESP_PASSWORD in place of the file; a front beyond loopback
#   without auth is warned about at start, one with auth is not; neither
#   secret appears in a log.
# usage: cache_auth.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
. "$src/tests/support/lib.bash"
lib_init cache_auth
check() { /usr/bin/python3 "$src/tests/support/resp_check.py" "$@"; }
hiredis=$(dirname "$segd")/resp_hiredis
for tool in redis-server redis-cli curl; do
  command -v $tool > /dev/null || fail "no $tool (scripts/install-deps.sh)"
done
[ -x "$hiredis" ] || fail "no $hiredis: install libhiredis-dev and re-run cmake"
free_port() { /usr/bin/python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
now=$(date +%s)
users=20
last=$(printf 'u%010d' $((users - 1)))

start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
"$segd" produce --brokers "$brokers" --topic "${tp}events" --users $users --now $now \
  > /dev/null 2> "$tmp/produce.log" || fail "produce"
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
  -X session.timeout.ms=6000 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 300); do
  "$segd" get --db "$tmp/db" --now $now --json "$last" 2>/dev/null | grep -q '"id":' && break
  sleep 0.2
done
sleep 1 # the publisher's last acknowledgements
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
"$segd" snapshot export --db "$tmp/db" --changes-topic "$SEGD_CHANGES_TOPIC" --to "$tmp/snap" \
  --now $now > "$tmp/export.log" 2>&1 || fail "export"

pw="resp-$RANDOM-$RANDOM-pw"
token="tok-$RANDOM$RANDOM-$RANDOM"
printf '%s\n' "$pw" > "$tmp/resp.pw"
printf '%s\n' "$token" > "$tmp/http.token"
chmod 600 "$tmp/resp.pw" "$tmp/http.token"
port=$(free_port)
hport=$(free_port)
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes "${tp}segments.changes" \
  --listen 127.0.0.1:$hport --resp 127.0.0.1:$port --resp-threads 1 --now $now \
  --resp-password-file "$tmp/resp.pw" --http-token-file "$tmp/http.token" 2> "$tmp/cache.log" &
pids+=($!)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$hport/healthz" > /dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$hport/healthz" > /dev/null || fail "the cache never served (/healthz open)"
grep -q "listening for Redis clients.* auth=password" "$tmp/cache.log" || fail "no auth=password logged"

# ---- RESP: redis-cli ---------------------------------------------------
out=$(redis-cli -p $port PING 2>&1)
[ "$out" = "NOAUTH Authentication required." ] || fail "PING before AUTH: '$out'"
out=$(redis-cli -p $port ZCARD "$last" 2>&1)
[ "$out" = "NOAUTH Authentication required." ] || fail "ZCARD before AUTH: '$out'"
n=$(redis-cli -p $port -a "$pw" --no-auth-warning ZCARD "$last")
[ "$n" -gt 0 ] 2>/dev/null || fail "redis-cli -a: ZCARD '$n'"
n2=$(redis-cli -p $port --user default --pass "$pw" --no-auth-warning ZCARD "$last")
[ "$n2" = "$n" ] || fail "redis-cli --user default: ZCARD '$n2'"
out=$(redis-cli -p $port -a "$pw-wrong" --no-auth-warning ZCARD "$last" 2>&1)
case "$out" in *"WRONGPASS invalid username-password pair or user is disabled."*"NOAUTH Authentication required."*) ;;
  *) fail "redis-cli with a wrong password: '$out'";; esac
out=$(redis-cli -p $port --user alice --pass "$pw" --no-auth-warning ZCARD "$last" 2>&1)
case "$out" in *WRONGPASS*NOAUTH*) ;; *) fail "redis-cli as another user: '$out'";; esac

# ---- RESP: hiredis, pipelined -------------------------------------------
printf 'ZCARD %s\nAUTH wrong\nHELLO 3 AUTH default %s\nZCARD %s\nHELLO 2 AUTH default %s\nZCARD %s\n' \
  "$last" "$pw" "$last" "$pw" "$last" | "$hiredis" 127.0.0.1 $port > "$tmp/hiredis.out" ||
  fail "hiredis: $(cat "$tmp/hiredis.out")"
sed -n '1p;2p;3p;4p;6p' "$tmp/hiredis.out" > "$tmp/hiredis.got"
printf '%s\n' "-NOAUTH Authentication required." \
  "-WRONGPASS invalid username-password pair or user is disabled." \
  "-NOPROTO unsupported protocol version" "-NOAUTH Authentication required." ":$n" > "$tmp/hiredis.want"
diff "$tmp/hiredis.want" "$tmp/hiredis.got" > /dev/null ||
  fail "hiredis: $(diff "$tmp/hiredis.want" "$tmp/hiredis.got")"
sed -n 5p "$tmp/hiredis.out" | grep -q '^\["server","segd",.*"proto",:2,' ||
  fail "HELLO 2 AUTH: $(sed -n 5p "$tmp/hiredis.out")"

# ---- RESP: the same bytes as redis-server --requirepass ------------------
rport=$(free_port)
redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  --requirepass "$pw" > "$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p $rport PING 2>/dev/null | grep -q NOAUTH && break; sleep 0.1; done
cat > "$tmp/queries.txt" <<Q
PING
ZCARD nobody
ZADD nobody 1 2
INFO
FOO bar
HELLO 2
HELLO 2 AUTH default wrong
HELLO 2 AUTH alice $pw
AUTH
AUTH a b c
AUTH wrong
AUTH default wrong
AUTH alice $pw
ZCARD nobody
AUTH $pw
ZCARD nobody
AUTH wrong
EXISTS nobody
AUTH default $pw
ZSCORE nobody 1
Q
check raw $port < "$tmp/queries.txt" > "$tmp/segd.raw"
check raw $rport < "$tmp/queries.txt" > "$tmp/redis.raw"
[ -s "$tmp/segd.raw" ] || fail "no raw answer"
cmp -s "$tmp/segd.raw" "$tmp/redis.raw" ||
  fail "auth replies differ from redis-server: $(diff <(tr '\r' ' ' < "$tmp/segd.raw") <(tr '\r' ' ' < "$tmp/redis.raw") | head -8)"
grep -c WRONGPASS "$tmp/segd.raw" | grep -qx 6 || fail "WRONGPASS count: $(tr '\r' ' ' < "$tmp/segd.raw")"
# before AUTH a request is held to Redis's unauthenticated limits (10
# arguments, 16384 bytes each: what anyone who can connect may make a
# connection hold), after it to the usual ones; the same bytes as
# redis-server. Each request is sent whole or stops at the length a server
# refuses, so neither closes on unread input (a reset would lose the reply).
x16384=$(head -c 16384 /dev/zero | tr '\0' x)
limit_req() {
  case $1 in
    args) printf '*11\r\n' ;;
    bulk) printf '*2\r\n$4\r\nAUTH\r\n$16385\r\n' ;;
    bulk-max) printf '*2\r\n$4\r\nAUTH\r\n$16384\r\n%s\r\n*1\r\n$4\r\nQUIT\r\n' "$x16384" ;;
    authed) printf '*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*11\r\n$6\r\nEXISTS\r\n' "${#pw}" "$pw"
            for k in a b c d e f g h i j; do printf '$1\r\n%s\r\n' $k; done
            printf '*1\r\n$4\r\nQUIT\r\n' ;;
  esac
}
n_limits=0
for q in args bulk bulk-max authed; do
  limit_req $q | check rawbytes $port > "$tmp/segd.raw"
  limit_req $q | check rawbytes $rport > "$tmp/redis.raw"
  [ -s "$tmp/segd.raw" ] || fail "no answer to the $q request"
  cmp -s "$tmp/segd.raw" "$tmp/redis.raw" ||
    fail "the $q request is answered unlike redis-server: $(tr '\r' ' ' < "$tmp/segd.raw") vs $(tr '\r' ' ' < "$tmp/redis.raw")"
  grep -q "unauthenticated" "$tmp/segd.raw" && n_limits=$((n_limits + 1))
done
[ "$n_limits" = 2 ] || fail "unauthenticated limits hit $n_limits times, not 2"

# ---- HTTP: bearer token ------------------------------------------------
status() { curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' "$@"; }
url=http://127.0.0.1:$hport
[ "$(status "$url/v1/users/$last")" = 401 ] || fail "no token: $(cat "$tmp/body")"
grep -qi '^WWW-Authenticate: Bearer realm="segd"' "$tmp/headers" || fail "no challenge: $(cat "$tmp/headers")"
grep -q '"error":"bearer token required"' "$tmp/body" || fail "401 body: $(cat "$tmp/body")"
[ "$(status -H "Authorization: Bearer $token-x" "$url/v1/users/$last")" = 401 ] || fail "wrong token accepted"
grep -qi 'WWW-Authenticate: Bearer realm="segd", error="invalid_token"' "$tmp/headers" ||
  fail "wrong token challenge: $(cat "$tmp/headers")"
[ "$(status -H "Authorization: Basic $(printf 'x:%s' "$token" | base64)" "$url/v1/users/$last")" = 401 ] ||
  fail "basic auth accepted"
[ "$(status -H "Authorization: Bearer $token" "$url/v1/users/$last")" = 200 ] ||
  fail "the token refused: $(cat "$tmp/body")"
grep -q "\"user_id\":\"$last\",\"known\":true" "$tmp/body" || fail "user: $(cat "$tmp/body")"
[ "$(status -H "authorization: bearer $token" "$url/v1/users/$last")" = 200 ] ||
  fail "the scheme's name is case-insensitive (RFC 7235)"
body="{\"users\":[\"$last\"]}"
[ "$(status -X POST -d "$body" "$url/v1/users:batch")" = 401 ] || fail "batch without token"
[ "$(status -X POST -d "$body" -H "Authorization: Bearer $token" "$url/v1/users:batch")" = 200 ] ||
  fail "batch with token: $(cat "$tmp/body")"
[ "$(status "$url/metrics")" = 401 ] || fail "/metrics without token"
[ "$(status -H "Authorization: Bearer $token" "$url/metrics")" = 200 ] || fail "/metrics with token"
grep -q 'segd_cache_http_requests_total{route="unauthorized",code="401"} [5-9]' "$tmp/body" ||
  fail "401s not counted: $(grep unauthorized "$tmp/body")"
# open: answered without a token (readyz may still be 503 while the tail
# measures its lag; the point is that it is not 401)
[ "$(status "$url/healthz")" = 200 ] || fail "/healthz is not open: $(cat "$tmp/body")"
code=$(status "$url/readyz")
case "$code" in 200|503) grep -q '"ready":' "$tmp/body" || fail "/readyz: $(cat "$tmp/body")" ;;
  *) fail "/readyz is not open: $code $(cat "$tmp/body")" ;; esac

# ---- warnings, the env var, no secret in a log ----------------------------
grep -q "beyond loopback" "$tmp/cache.log" && fail "warned on loopback: $(grep loopback "$tmp/cache.log")"
port2=$(free_port)
hport2=$(free_port)
SEGD_CACHE_RESP_PASSWORD="$pw-env" "$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" \
  --changes "${tp}segments.changes" --listen 0.0.0.0:$hport2 --resp 0.0.0.0:$port2 \
  --resp-threads 1 --now $now 2> "$tmp/cache2.log" &
pids+=($!)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$hport2/healthz" > /dev/null && break; sleep 0.1; done
grep -q 'level=warn .*msg="listening beyond loopback without authentication" front=--listen listen=0.0.0.0:' \
  "$tmp/cache2.log" || fail "no warning for an open HTTP front: $(grep cache "$tmp/cache2.log" | head -5)"
[ "$(grep -c "beyond loopback" "$tmp/cache2.log")" = 1 ] ||
  fail "the RESP front has a password: $(grep loopback "$tmp/cache2.log")"
[ "$(status "http://127.0.0.1:$hport2/v1/users/$last")" = 200 ] || fail "no token needed there"
[ "$(redis-cli -p $port2 -a "$pw-env" --no-auth-warning ZCARD "$last")" = "$n" ] ||
  fail "SEGD_CACHE_RESP_PASSWORD not used"
redis-cli -p $port2 -a "$pw" --no-auth-warning ZCARD "$last" 2>&1 | grep -q NOAUTH ||
  fail "the file's password works where the env var's is set"
# an unreadable secret file fails the start (exit 2), naming the file only
"$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" --changes x --resp 127.0.0.1:0 \
  --resp-password-file "$tmp/nope" --listen 127.0.0.1:0 2> "$tmp/bad.log" && fail "a missing password file was accepted"
grep -q -- "--resp-password-file $tmp/nope: No such file" "$tmp/bad.log" || fail "bad file: $(cat "$tmp/bad.log")"
# a variable set but empty is no secret given by mistake, not "no password"
for var in SEGD_CACHE_RESP_PASSWORD SEGD_CACHE_HTTP_TOKEN; do
  rc=0
  # the start is otherwise the one above that serves: only the secret fails it
  # (a cache that starts is stopped by timeout: exit 124)
  env "$var=" timeout 30 "$segd" cache --snapshot "$tmp/snap" --brokers "$brokers" \
    --changes "${tp}segments.changes" --resp 127.0.0.1:0 --listen 127.0.0.1:0 \
    --resp-threads 1 --now $now 2> "$tmp/empty.log" || rc=$?
  [ "$rc" = 2 ] || fail "an empty $var was accepted (exit $rc): $(tail -3 "$tmp/empty.log")"
  grep -q "$var" "$tmp/empty.log" || fail "an empty $var not named: $(cat "$tmp/empty.log")"
done
for f in "$tmp"/*.log; do
  grep -qF -- "$pw" "$f" && fail "the RESP password is in $f"
  grep -qF -- "$token" "$f" && fail "the HTTP token is in $f"
done
ps -eo args | grep -F -- "$pw" | grep -v grep && fail "the password is on a command line"
echo "cache_auth: ok"
