#!/usr/bin/env bash
# The fleet proof of issue 11 (tests/trials/fleet.py): three `segd run` instances in
# one group on a 12-partition dev broker, SIGKILLed and restarted with their
# stores (with a segment retirement), replaced by instances on empty stores
# that restore from the per-partition snapshot units, one unit corrupted on
# purpose (refused, the partition replayed); scaled 1 -> 3 -> 1 (the last
# member alone must catch up, the group's commits included); at the end the
# owners' stores and a cache of the units tailing the change topic equal a
# model. --kafka real --cluster-dir D runs it on scripts/kafka.sh's cluster. Under
# ctest: one quick trial (about a minute). Long runs:
#   bash tests/trials/fleet.sh SEGD_BIN SOURCE_DIR --trials 20 --users 2000 --events 3000
# It starts `segd dev-broker` (label librdkafka, no TSan run).
# usage: fleet.sh SEGD_BIN SOURCE_DIR [fleet.py options]
set -euo pipefail
segd=$1
src=$2
shift 2
[ $# -eq 0 ] && set -- --trials 1 --users 300 --events 300  # the quick setting
exec /usr/bin/python3 "$src/tests/trials/fleet.py" "$segd" "$@"
