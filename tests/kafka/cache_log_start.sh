#!/usr/bin/env bash
# The change topic's log start moved past an edge cache's position, on a
# real 3-node Kafka cluster of its own (issue 21 #4): a `segd cache` stopped
# (SIGSTOP) while delete-records moves the log start past it exits 1 naming
# the gap when continued, never skipping it; one started on that old
# snapshot refuses the same way; one on a newer snapshot equals the store
# and follows it (tests/trials/kafka_faults.py logstart).
# usage: cache_log_start.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$(dirname "$0")/../support/kafka_own.bash"
own_cluster logstart
run_faults logstart
