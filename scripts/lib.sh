# Shared by the scripts that start the tests' peers (kafka.sh,
# kafka_secured.sh, registry.sh): sourced, never run. Each caller sets
# `here` (its own folder) before sourcing, and `cache`, `py` where it uses
# the functions that read them.

# Installs the Debian packages named, quietly, when the list is not empty;
# the caller decides what is missing (a command, a Python module).
#   apt_install_missing CALLER PACKAGE...
apt_install_missing() {
  local who=$1; shift
  [ $# -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "$who: installing $*" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# N free loopback ports, distinct, printed one per line. All N sockets are
# held until the last is bound, so no port is handed out twice.
free_ports() {
  /usr/bin/python3 - "$1" <<'PYEOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PYEOF
}

# One Kafka node (KRaft) in the background from the jars scripts/kafka.sh
# fetched into $cache/lib, its pid written to PIDFILE.
#   kafka_java PROPERTIES LOG STDOUT PIDFILE
kafka_java() {
  # heap capped: three nodes share a 2-core test machine with the suite.
  # SerialGC: the brokers here are small and mostly idle; G1's threads
  # would compete with segd for the cores.
  nohup java -Xms128m -Xmx512m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
    -Dsegd.kafka.log="$2" \
    -cp "$cache/lib/*" kafka.Kafka "$1" \
    > "$3" 2>&1 < /dev/null &
  echo $! > "$4"
}
