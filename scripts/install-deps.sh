#!/usr/bin/env bash
# Installs the Debian 12 packages segd builds, tests and demos with, when any
# is missing. Non-interactive; uses sudo when not root.
# SEGD_DEPS=build installs what building the segd binary needs and nothing
# else (docker/Dockerfile's build stage).
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      librdkafka-dev libavro-dev librocksdb-dev libcurl4-openssl-dev libcmocka-dev
      libjansson-dev libxxhash-dev libzstd-dev liblz4-dev libssl-dev zlib1g-dev libmicrohttpd-dev)
# tests, demos and benchmarks (wrk: segd bench serve): nginx as WebDAV target,
# kcat, Python clients; python3-yaml,
# systemd (systemd-analyze) and man-db for tests/deploy/deploy_check.py
if [ "${SEGD_DEPS:-all}" != build ]; then
  pkgs+=(nginx-light kcat python3-avro python3-confluent-kafka python3-zstandard
         python3-yaml systemd man-db groff-base prometheus
         redis-server redis-tools libhiredis-dev wrk)
  # the real Apache Kafka cluster of the tests (scripts/kafka.sh) runs from
  # Maven Central's jars: a JRE and Maven, when the machine has none of its own
  command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
  command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
  # the real schema registry of tests/cli/schema_registry.sh (scripts/registry.sh)
  # runs from Maven Central's jars too; curl asks it whether it is up
  pkgs+=(curl)
  # tests/deploy/container.sh: docker/Dockerfile built and run with podman (runc as
  # its runtime: crun cannot use hybrid cgroups), on a base image made with
  # debootstrap where no image registry is reachable
  pkgs+=(podman runc debootstrap)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# s3rver (an S3-compatible server from npm) for the s3:// round trip in
# tests/cli/s3_cli.sh and tests/unit/transport/test_dest.c, which fail without it (fail closed):
# npm comes from Debian when the machine has none, and a failed install of
# s3rver fails this script. Installed after the packages, below.
s3rver_dir=/opt/segd-test-tools
want_s3rver=0
if [ "${SEGD_DEPS:-all}" != build ] && [ ! -x "$s3rver_dir/node_modules/.bin/s3rver" ]; then
  want_s3rver=1
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
install_s3rver() {
  [ "$want_s3rver" = 1 ] || return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo npm install --prefix "$s3rver_dir" --no-audit --no-fund s3rver@3 >/dev/null 2>&1 ||
    { echo "install-deps: s3rver not installed (npm install s3rver@3 failed)" >&2; exit 1; }
}
[ ${#missing[@]} -eq 0 ] && { install_s3rver; exit 0; }
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_s3rver
