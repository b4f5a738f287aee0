#!/usr/bin/env bash
# Whole-cluster outage on a real 3-node Kafka cluster of its own (issue 21
# #4): all three nodes SIGSTOPped for 30 s mid-stream, then SIGCONTed. While
# they are stopped, the store holds exactly the events below the input
# offsets it stored; afterwards the same `segd run` and `segd cache`
# processes carry on by themselves to a store, cache and change topic equal
# to the model, nothing dead-lettered, and the group's offsets in Kafka never
# past the store's (tests/trials/kafka_faults.py outage).
# usage: kafka_outage.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
. "$(dirname "$0")/../support/kafka_own.bash"
own_cluster outage
run_faults outage
