#!/usr/bin/env bash
# The schema registry over HTTPS with credentials, as operators run it: the
# Apicurio registry of tests/cli/schema_registry.sh (scripts/registry.sh) behind
# nginx terminating TLS (a CA made here with openssl, trusted by segd through
# input.schema.registry.ca) and asking for basic auth (auth_basic, an
# htpasswd of openssl passwd). An independent producer registers
# SegmentEvent through the proxy and writes Confluent-framed events;
# `segd run` fetches the writer schema by id and registers ChangeEvent, both
# through the proxy with input.schema.registry.auth, and applies every
# event. A wrong password is refused (401) and segd's log says so in words;
# no CA means no trust (the log names the certificate); the password is in
# no log and not in --print-config's output.
# usage: registry_tls.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
. "$src/tests/support/lib.bash"
lib_init registry_tls
export REGISTRY_DIR="$tmp/registry"
nginx_pid=
stop_all() {
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  bash "$src/scripts/registry.sh" stop >/dev/null 2>&1 || true
  lib_cleanup
}
trap stop_all EXIT
py=/usr/bin/python3
free_port() { $py -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
start_broker 2 events,events.dlq,segments.changes

bash "$src/scripts/registry.sh" start > "$tmp/registry.out" 2> "$tmp/registry-start.log" ||
  fail "registry did not start: $(tail -5 "$tmp/registry-start.log")"
backend=$(sed -n 's/^url=//p' "$tmp/registry.out")
case "$backend" in http://127.0.0.1:*/apis/ccompat/v7) ;; *) fail "registry url: $backend";; esac
bport=${backend#http://127.0.0.1:}
bport=${bport%%/*}

# a CA of this test only, and the proxy's certificate for 127.0.0.1
mkdir -p "$tmp/pki" "$tmp/nginx"
(cd "$tmp/pki" &&
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
    -subj "/CN=segd test CA $$" &&
  openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=127.0.0.1" &&
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > ext &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 \
    -extfile ext) > "$tmp/pki.out" 2>&1 || fail "openssl: $(cat "$tmp/pki.out")"
regpw="reg-$RANDOM-$RANDOM-secret"
printf 'segd:%s\n' "$(openssl passwd -apr1 "$regpw")" > "$tmp/nginx/htpasswd"
nport=$(free_port)
cat > "$tmp/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
user root;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
events {}
http {
  log_format who '\$remote_user "\$request" \$status';
  access_log $tmp/nginx/access.log who;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  server {
    listen 127.0.0.1:$nport ssl;
    ssl_certificate $tmp/pki/srv.pem;
    ssl_certificate_key $tmp/pki/srv.key;
    auth_basic "schema registry";
    auth_basic_user_file $tmp/nginx/htpasswd;
    location / { proxy_pass http://127.0.0.1:$bport; }
  }
}
EOF
/usr/sbin/nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2> "$tmp/nginx-start.log" &
nginx_pid=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$nport) 2>/dev/null && break; sleep 0.1; done
url="https://127.0.0.1:$nport/apis/ccompat/v7"
# the proxy itself: TLS with our CA, and basic auth
curl -sf --cacert "$tmp/pki/ca.pem" -u "segd:$regpw" "$url/subjects" > /dev/null ||
  fail "the proxy does not answer with the password"
[ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/pki/ca.pem" -u "segd:x" "$url/subjects")" = 401 ] ||
  fail "the proxy takes a wrong password"

# the producer: registers SegmentEvent through the proxy, writes framed events
cat > "$tmp/client.py" <<'PY'
import base64, io, json, ssl, struct, sys, urllib.request
import avro.io, avro.schema
from confluent_kafka import Producer
url, ca, cred, brokers, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
ctx = ssl.create_default_context(cafile=ca)
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json",
                                          "Authorization": "Basic " + base64.b64encode(cred.encode()).decode()})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        return json.load(r)
if cmd == "register":
    print(call("POST", "/subjects/%s/versions" % args[0], {"schema": open(args[1]).read()})["id"])
elif cmd == "latest":
    print(call("GET", "/subjects/%s/versions/latest" % args[0])["id"])
elif cmd == "produce":
    topic, sid, schema, now = args[0], int(args[1]), avro.schema.parse(open(args[2]).read()), int(args[3])
    p = Producer({"bootstrap.servers": brokers, "partitioner": "murmur2_random"})
    for i in range(6):
        ev = {"user_id": "t%d" % i, "ts_ms": now - 60000, "op": "UPSERT", "source": "tls",
              "segments": [{"segment_id": 200 + i, "ttl_s": 86400, "partner_id": 1, "flags": 0}]}
        buf = io.BytesIO()
        buf.write(b"\0" + struct.pack(">i", sid))
        avro.io.DatumWriter(schema).write(ev, avro.io.BinaryEncoder(buf))
        p.produce(topic, key=ev["user_id"].encode(), value=buf.getvalue())
    if p.flush(30):
        sys.exit("produce: messages not delivered")
PY
client() { "$py" "$tmp/client.py" "$url" "$tmp/pki/ca.pem" "segd:$regpw" "$brokers" "$@"; }
sid=$(client register "${tp}events-value" "$src/schemas/segment_event.avsc") ||
  fail "register SegmentEvent through the proxy"
[[ "$sid" =~ ^[0-9]+$ ]] || fail "register: $sid"
client produce "${tp}events" "$sid" "$src/schemas/segment_event.avsc" "$(date +%s)000" || fail "produce"

conf() { # FILE AUTH [CA]
  cat > "$1" <<CONF
input.format = confluent
input.schema.registry.url = $url
input.schema.registry.auth = $2
changes.topic = ${tp}segments.changes
changes.format = confluent
batch.max.ms = 20
CONF
  [ -z "${3:-}" ] || echo "input.schema.registry.ca = $3" >> "$1"
}
conf "$tmp/ok.conf" "segd:$regpw" "$tmp/pki/ca.pem"
"$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db "$tmp/db" \
  --config "$tmp/ok.conf" --print-config > "$tmp/print.out" 2>&1 || fail "--print-config: $(cat "$tmp/print.out")"
grep -qx 'input.schema.registry.auth = \*\*\*' "$tmp/print.out" || fail "auth not masked: $(grep registry "$tmp/print.out")"
grep -qx "input.schema.registry.ca = $tmp/pki/ca.pem" "$tmp/print.out" || fail "ca: $(grep registry "$tmp/print.out")"

run() { # NAME CONF: segd run in the background, its log $tmp/NAME.log
  "$segd" run --brokers "$brokers" --topic "${tp}events" --group "${tp}$1" --db "$tmp/db-$1" \
    --config "$2" -X session.timeout.ms=6000 2> "$tmp/$1.log" &
  run_pid=$!
  pids+=($run_pid)
}
wait_log() { # NAME PATTERN
  for _ in $(seq 300); do
    grep -q -- "$2" "$tmp/$1.log" 2>/dev/null && return 0
    kill -0 $run_pid 2>/dev/null || fail "segd run ($1) exited"
    sleep 0.2
  done
  fail "segd run ($1): no '$2' in its log"
}

# a wrong password: the proxy refuses, segd waits and says why; nothing applied
conf "$tmp/wrong.conf" "segd:$regpw-wrong" "$tmp/pki/ca.pem"
run wrong "$tmp/wrong.conf"
wait_log wrong "waiting: schema registry: HTTP 401 Unauthorized for id $sid (not authorized: check input.schema.registry.auth)"
"$segd" get --db "$tmp/db-wrong" --json t0 2>/dev/null | grep -q '"id":200' && fail "applied with a wrong password"
kill -TERM $run_pid; wait $run_pid || true

# no CA given: the proxy's certificate is not trusted
conf "$tmp/noca.conf" "segd:$regpw"
run noca "$tmp/noca.conf"
wait_log noca "waiting: schema registry https://127.0.0.1:$nport/.*certificate"
kill -TERM $run_pid; wait $run_pid || true

# the right password and CA: fetched, applied, ChangeEvent registered
run ok "$tmp/ok.conf"
for _ in $(seq 300); do
  "$segd" get --db "$tmp/db-ok" --json t5 2>/dev/null | grep -q '"id":205' && break
  kill -0 $run_pid 2>/dev/null || fail "segd run exited"
  sleep 0.2
done
for i in 0 1 2 3 4 5; do
  "$segd" get --db "$tmp/db-ok" --json t$i | grep -q "\"id\":$((200 + i))," || fail "t$i not applied"
done
for _ in $(seq 150); do cid=$(client latest "${tp}segments.changes-value" 2>/dev/null) && break; sleep 0.2; done
[[ "${cid:-}" =~ ^[0-9]+$ ]] || fail "ChangeEvent not registered through the proxy"
kill -TERM $run_pid
wait $run_pid || fail "segd run exit $?"
grep -q "^segd \"GET /apis/ccompat/v7/schemas/ids/$sid HTTP/1.1\" 200" "$tmp/nginx/access.log" ||
  fail "no authenticated schema fetch through the proxy: $(cat "$tmp/nginx/access.log")"
grep -q "^segd \"POST /apis/ccompat/v7/subjects/${tp}segments.changes-value/versions HTTP/1.1\" 200" \
  "$tmp/nginx/access.log" || fail "no authenticated registration through the proxy: $(cat "$tmp/nginx/access.log")"
grep -q "\"GET /apis/ccompat/v7/schemas/ids/$sid HTTP/1.1\" 401" "$tmp/nginx/access.log" ||
  fail "the wrong password never reached the proxy"

for f in "$tmp"/*.log "$tmp"/*.out; do
  grep -qF -- "$regpw" "$f" && fail "the registry password is in $f"
done
echo "registry_tls: ok"
