#!/usr/bin/env bash
# Installs the Debian 12 packages segd builds, tests and demos with, when any
# is missing. Non-interactive; uses sudo when not root.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      librdkafka-dev libavro-dev librocksdb-dev libcurl4-openssl-dev libcmocka-dev
      libjansson-dev libxxhash-dev libzstd-dev liblz4-dev libssl-dev zlib1g-dev libmicrohttpd-dev
      nginx-light kcat python3-avro python3-confluent-kafka python3-zstandard)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
