#!/usr/bin/env bash
# Leader failover on a real 3-node Kafka cluster of its own (issue 21 #4):
# input and change topics with replication factor 3 and
# min.insync.replicas 2; while events are produced and `segd run` publishes
# to a tailing `segd cache`, the leader of input partition 0 is SIGKILLed
# and restarted once fenced. The store, that cache and the whole change topic
# replayed must equal tests/trials/chaoslib.py's model, with nothing dead-lettered;
# the pause in segd's progress is printed (tests/trials/kafka_faults.py failover).
# usage: kafka_failover.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$(dirname "$0")/../support/kafka_own.bash"
own_cluster failover
run_faults failover
