#!/usr/bin/env bash
# A real Confluent-compatible schema registry on loopback for the tests:
# Apicurio Registry (its /apis/ccompat/v7 API), built from Maven Central's
# jars alone (scripts/registry/README.md says how and why that way), its
# storage an H2 database in the registry's folder, so a restart keeps the
# schemas and their ids.
#
#   scripts/registry.sh start      fetch and build (once), start, wait; prints url=
#   scripts/registry.sh stop       stop by pid (TERM, then KILL after 30 s)
#   scripts/registry.sh restart    stop, then start again on the same port and storage
#   scripts/registry.sh url        print the Confluent-compatible base URL
#   scripts/registry.sh fetch      only download and build into the cache
#
# REGISTRY_DIR (default /tmp/segd-registry) holds one registry: its storage,
# log, pid and port. Several can run side by side in different folders.
# The build is cached under REGISTRY_CACHE_DIR (default
# ~/.cache/segd-registry): a second start downloads and builds nothing.
# Needs Java 17+, Maven and curl; installs Debian's default-jre-headless,
# maven and curl when absent. Start takes 10-40 s (a Quarkus application on a loaded machine).
set -euo pipefail
APICURIO_VERSION=2.4.2.Final   # also in scripts/registry/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
dir=${REGISTRY_DIR:-/tmp/segd-registry}
cache=${REGISTRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/segd-registry}/$APICURIO_VERSION
py=/usr/bin/python3
die() { echo "registry.sh: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

ensure_tools() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  apt_install_missing registry.sh "${missing[@]}"
}

# Builds the wrapper project in a copy under the cache (the source tree stays
# clean) and keeps only the runnable jar and its libraries.
fetch() {
  [ -f "$cache/app/.complete" ] && return 0
  ensure_tools
  mkdir -p "$cache"
  # two first starts at once (tests side by side) build once, not into each
  # other's folder
  exec 9> "$cache/.lock"
  flock 9
  [ -f "$cache/app/.complete" ] && { exec 9>&-; return 0; }
  rm -rf "$cache/build" "$cache/app.part"
  mkdir -p "$cache/build"
  cp -r "$here/registry/pom.xml" "$here/registry/src" "$cache/build/"
  if ! mvn -q -B -s "$here/registry/settings.xml" -f "$cache/build/pom.xml" package \
      > "$cache/build.log" 2>&1; then
    grep -E 'ERROR' "$cache/build.log" | head -5 >&2
    die "cannot build Apicurio Registry $APICURIO_VERSION from Maven Central (log: $cache/build.log)"
  fi
  mkdir -p "$cache/app.part"
  mv "$cache/build/target/segd-registry-1-runner.jar" "$cache/app.part/registry.jar"
  mv "$cache/build/target/lib" "$cache/app.part/lib"
  touch "$cache/app.part/.complete"
  rm -rf "$cache/app" "$cache/build" && mv "$cache/app.part" "$cache/app"
  exec 9>&-
}

free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pid() { cat "$dir/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
url() { echo "http://127.0.0.1:$(cat "$dir/port")/apis/ccompat/v7"; }

# Answers the Confluent API (not only a health probe): what the tests need.
ready() { curl -sf -o /dev/null --max-time 5 "$(url)/subjects"; }

launch() {
  # heap capped and SerialGC: it shares a 2-core test machine with the suite
  # and a Kafka cluster. The H2 file database lives in the folder: a restart
  # finds the schemas and ids it had.
  REGISTRY_DATASOURCE_URL="jdbc:h2:file:$dir/storage/registry;DB_CLOSE_ON_EXIT=FALSE" \
  nohup java -Xms64m -Xmx384m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$(cat "$dir/port")" \
    -Dquarkus.log.console.level=WARN \
    -jar "$cache/app/registry.jar" > "$dir/registry.log" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
  local _
  for _ in $(seq 240); do
    ready && { echo "url=$(url)"; return 0; }
    alive || break
    sleep 0.5
  done
  tail -20 "$dir/registry.log" >&2 || true
  stop
  die "the registry did not come up (log: $dir/registry.log)"
}

start() {
  fetch
  alive && die "a registry already runs in $dir (scripts/registry.sh stop first)"
  rm -rf "$dir" && mkdir -p "$dir/storage"
  free_port > "$dir/port"
  launch
}

stop() {
  local p; p=$(pid)
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 300); do alive || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  for _ in $(seq 50); do alive || return 0; sleep 0.1; done
}

restart() {
  [ -f "$dir/port" ] || die "no registry in $dir"
  stop
  launch
}

cmd=${1:-}
case "$cmd" in
  start) start ;;
  stop) stop ;;
  restart) restart ;;
  url) [ -f "$dir/port" ] || die "no registry in $dir"; url ;;
  fetch) fetch ;;
  *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
