#!/usr/bin/env bash
# Chaos trials (tests/chaos.py): SIGKILLs of segd run during ingest, publish
# and snapshot export, and rebalances while back-pressure is on; the store, a
# snapshot + tail cache and the whole change topic must equal an independent
# model. Under ctest: one quick trial of each kind. Long runs:
#   bash tests/chaos.sh SEGD_BIN SOURCE_DIR --trials 100 --kind kill
# It starts `segd dev-broker` (librdkafka: label kafka, no TSan run).
# usage: chaos.sh SEGD_BIN SOURCE_DIR [chaos.py options]
set -euo pipefail
segd=$1
src=$2
shift 2
[ $# -eq 0 ] && set -- --trials 1 --kills 2 --users 100 --events 2000  # the quick setting
exec /usr/bin/python3 "$src/tests/chaos.py" "$segd" "$@"
