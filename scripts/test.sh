#!/usr/bin/env bash
# The test command: installs dependencies if missing, builds (warnings are
# errors), runs the suite under ctest (but the slow ones of twice_slow), then the
# whole suite under ASan+UBSan (but the chaos and fleet trials: processes killed at
# random, already run above; and container, whose segd is the image's, built
# from source in it, not the sanitized one), then the threaded tests under
# ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check-layers.sh   # before building: an upward include fails fast
jobs=$(nproc)
# ctest runs one test more than there are cores: many of them wait on a
# broker's group join, a retry backoff or a child process, not on a core
# (ASan on 2 loaded cores: -j4 508 s and 643 s of CPU, -j2 532 s and 553 s).
# Not twice the cores: the gain was small and a fleet trial started beside
# chaos, disk_full and corrupt_cli at -j4 once missed its end offsets.
# Not the TSan run: its tests compute (TSan ~5x), and there -j4 made the
# TSan snapshot_cli, its tail, 129 s against 83 s at -j2 (run 129 s vs 97 s).
test_jobs=${SEGD_TEST_JOBS:-$((jobs + 1))}
# stores in tests are small: do not let a nearly full CI disk stall every write
# behind the 256 MiB production reserve (tests/cli/disk_full.sh sets its own)
export SEGD_STORE_MIN_FREE_MB=8
# tests/cli/schema_registry.sh's registry (scripts/registry.sh) is built from
# Maven Central's jars on first use (about 5 minutes on a fresh machine, most
# of it download): in the background while segd builds and the plain stage
# runs, so that no test's time pays it. Only the ASan stage runs that test.
mkdir -p build
bash scripts/registry.sh fetch > build/registry-fetch.log 2>&1 &
registry_fetch=$!
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEGD_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
# One real Apache Kafka cluster (scripts/kafka.sh: 3 KRaft nodes on loopback,
# auto topic creation off) for the plain and sanitizer stages: every test that
# goes through tests/support/lib.bash's start_broker creates its own topics there
# (docs/testing.md says which tests stay on the mock and why). Stopped by pid
# when this script exits, however it exits.
export KAFKA_CLUSTER_DIR="$PWD/build/kafka"
trap 'bash scripts/kafka.sh stop' EXIT
bash scripts/kafka.sh start 3 >/dev/null
# The slowest tests run under ASan+UBSan below (same assertions, sanitized):
# running them twice would spend two minutes of CI on nothing new (the
# broker-fault tests each start a Kafka cluster of their own as well).
twice_slow='^(test_ingest|test_ingest_faults|test_publish|test_converge|snapshot_cli|restore_cli|cli_replay|sweep_cli|run_logs|demo_cli|metrics_prom|resp_cli|kafka_failover|kafka_outage|cache_log_start|schema_registry|kafka_topics_change)$'
(cd build && ctest --output-on-failure -j"$test_jobs" -E "$twice_slow")
wait "$registry_fetch" || { cat build/registry-fetch.log >&2; echo "test.sh: the schema registry did not build" >&2; exit 1; }
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSEGD_SANITIZE=ON -DSEGD_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
# allocator_may_return_null: fuzzed Avro claims huge lengths; avro-c must see NULL, not an abort
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
   LSAN_OPTIONS=suppressions="$PWD/../tests/support/lsan.supp" \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j"$test_jobs" -E '^(chaos|fleet|container)$')
# ThreadSanitizer: the unit tests (edge cache shards, RocksDB's threads in the
# merge operator and filter, the publisher thread, the HTTP and RESP servers,
# the restorer, the change tail) and snapshot_cli (the exporter's lanes).
# librdkafka's C11 threads run under TSan through base/tsan_threads.c. Left
# out for now: test_ingest_faults and test_ingest, whose main threads write a
# member's stop flag and read its segd_pipeline_get_stats while the member's
# thread runs the pipeline (races in the tests: segd run does both on the
# pipeline's thread), which TSan reports;
# suppressions cover only races inside uninstrumented RocksDB/librdkafka.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSEGD_TSAN=ON -DSEGD_WERROR=ON >/dev/null
# UNDER_TSAN=1: snapshot_cli exports fewer users there and leaves its Python
# format readers to the runs above (TSan runs segd ~10x slower; 101 s before).
# Not a SEGD_ name: segd run (test_converge) refuses unknown SEGD_ variables.
# Only what those tests run is built (segd and their test programs): the
# fuzz replays would be compiled for nothing.
tsan_tests='^test_|^snapshot_cli$'
tsan_skip='^(test_ingest|test_ingest_faults)$'
tsan_targets=$(cd build-tsan && ctest -N -R "$tsan_tests" -E "$tsan_skip" |
               sed -n 's/^ *Test *#[0-9]*: \(test_[a-z0-9_]*\)$/\1/p')
cmake --build build-tsan -j"$jobs" --target segd $tsan_targets
(cd build-tsan && UNDER_TSAN=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/support/tsan.supp" \
   ctest --output-on-failure -j"$jobs" -R "$tsan_tests" -E "$tsan_skip")
