#!/usr/bin/env bash
# A secured Apache Kafka for the tests: the same broker as scripts/kafka.sh
# (its jar cache, its log4j config), one KRaft node whose client listener
# is SASL_SSL, as managed Kafka offers it. The CA and the broker's
# certificate (for 127.0.0.1 and localhost) are made at start with openssl.
# The listener takes SASL/PLAIN (the user in its JAAS line) and
# SCRAM-SHA-512 (the same user written by kafka-storage format --add-scram,
# so it exists before the broker answers). The tests use PLAIN: librdkafka
# before 2.6.1, segd's 2.0.2 among them, fails SCRAM against Kafka 4.x
# brokers with "invalid credentials" whatever the password (kcat issue 462,
# checked here: the stored SCRAM key matches the password). Inter-broker and
# controller traffic, and the admin requests of the tests, use PLAINTEXT
# listeners on other loopback ports: what segd is tested against is the
# client listener.
#
#   scripts/kafka_secured.sh start     certificates, format, start, wait; prints
#                                      bootstrap=HOST:PORT (SASL_SSL) and admin=HOST:PORT
#   scripts/kafka_secured.sh stop      stop the node by pid (TERM, then KILL after 30 s)
#   scripts/kafka_secured.sh topic NAME PARTITIONS [key=value ...]   through the admin port
#
# KAFKA_SECURED_DIR (default /tmp/segd-kafka-secured) holds the node's
# config, logs, data, pid and these files for the tests:
#   bootstrap          the SASL_SSL listener
#   admin              the PLAINTEXT listener (topics, checks)
#   ca.pem             the CA that signed the broker's certificate
#   other-ca.pem       a CA that signed nothing the broker shows (a test of trust)
#   user, password     the user segd connects as (PLAIN or SCRAM-SHA-512)
#   mechanism          the SASL mechanism the tests use (PLAIN)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${KAFKA_SECURED_DIR:-/tmp/segd-kafka-secured}
KAFKA_VERSION=$(sed -n 's/^KAFKA_VERSION=\([^ ]*\).*/\1/p' "$here/kafka.sh")
cache=${KAFKA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/segd-kafka}/$KAFKA_VERSION
py=/usr/bin/python3
die() { echo "kafka_secured.sh: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

# A CA, a second CA that signs nothing, the broker's key and certificate
# (SAN 127.0.0.1 and localhost: librdkafka checks the name by default) in a
# PKCS12 keystore, the format Kafka reads without a JKS conversion.
make_certs() {
  local d=$dir/tls storepass=$1
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=segd test CA" \
    -keyout "$d/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=segd untrusted CA" \
    -keyout "$d/other-ca.key" -out "$dir/other-ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$d/broker.key" -out "$d/broker.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$d/ext"
  openssl x509 -req -in "$d/broker.csr" -CA "$dir/ca.pem" -CAkey "$d/ca.key" \
    -CAcreateserial -days 2 -extfile "$d/ext" -out "$d/broker.pem" 2>/dev/null
  openssl pkcs12 -export -in "$d/broker.pem" -inkey "$d/broker.key" -certfile "$dir/ca.pem" \
    -name broker -passout "pass:$storepass" -out "$d/broker.p12"
}

start_once() {
  bash "$here/kafka.sh" fetch
  command -v openssl >/dev/null || die "needs openssl"
  if alive; then
    die "a broker already runs in $dir (scripts/kafka_secured.sh stop first)"
  fi
  rm -rf "$dir" && mkdir -p "$dir/data"
  local sasl plain ctl storepass user=segd password cluster_id
  { read -r sasl; read -r plain; read -r ctl; } < <(free_ports 3)
  storepass=$("$py" -c 'import secrets; print(secrets.token_hex(12))')
  # a password no log line or file of a test would hold by chance
  password="pw-$("$py" -c 'import secrets; print(secrets.token_hex(10))')"
  make_certs "$storepass"
  cat > "$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
listeners=SASL_SSL://127.0.0.1:$sasl,PLAINTEXT://127.0.0.1:$plain,CONTROLLER://127.0.0.1:$ctl
advertised.listeners=SASL_SSL://127.0.0.1:$sasl,PLAINTEXT://127.0.0.1:$plain
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$user="$password";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$dir/tls/broker.p12
ssl.keystore.password=$storepass
ssl.key.password=$storepass
ssl.client.auth=none
log.dirs=$dir/data
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=2
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=2000
num.network.threads=2
num.io.threads=2
background.threads=2
log.segment.bytes=67108864
delete.topic.enable=true
EOF
  cluster_id=$("$py" -c 'import base64,os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if s[0] != "-":
        print(s)
        break')
  # the SCRAM credential is a record of the cluster's metadata log: written
  # at format, it is there before the first client connects
  java -cp "$cache/lib/*" -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
    -Dsegd.kafka.log="$dir/format.log" kafka.tools.StorageTool format \
    -t "$cluster_id" -c "$dir/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=$user,password=$password]" > "$dir/format.out" 2>&1 ||
    die "cannot format: $(tail -3 "$dir/format.out")"
  echo "127.0.0.1:$sasl" > "$dir/bootstrap"
  echo "127.0.0.1:$plain" > "$dir/admin"
  echo "$user" > "$dir/user"
  echo PLAIN > "$dir/mechanism"
  echo "$password" > "$dir/password"
  chmod 600 "$dir/password" "$dir/server.properties"
  kafka_java "$dir/server.properties" "$dir/server.log" "$dir/stdout.log" "$dir/pid"
  if ! "$py" "$here/kafka/admin.py" "127.0.0.1:$plain" wait 1 "${KAFKA_START_TIMEOUT_S:-90}"; then
    tail -n 8 "$dir/stdout.log" "$dir/server.log" >&2 || true
    stop
    return 1
  fi
  echo "bootstrap=127.0.0.1:$sasl"
  echo "admin=127.0.0.1:$plain"
}

# Its three ports are free when chosen but only bound by the JVM seconds
# later: a test starting its own cluster meanwhile can take one (seen once
# under ctest -j3, session 14). A start that does not come up is tried once
# more on new ports.
start() {
  local attempt
  for attempt in 1 2; do
    start_once && return 0
    echo "kafka_secured.sh: the secured broker did not come up (attempt $attempt of 2)" >&2
  done
  die "the secured broker did not come up"
}

alive() {
  local p; p=$(cat "$dir/pid" 2>/dev/null || true)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null &&
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir/server.properties"
}

stop() {
  alive || return 0
  local p; p=$(cat "$dir/pid")
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 300); do alive || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
}

cmd=${1:-}
shift || true
case "$cmd" in
  start) start ;;
  stop) stop ;;
  topic) [ $# -ge 2 ] || die "usage: topic NAME PARTITIONS [key=value ...]"
         name=$1 parts=$2; shift 2
         "$py" "$here/kafka/admin.py" "$(cat "$dir/admin")" create "$name" "$parts" 1 "$@" ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
