#!/usr/bin/env bash
# The test command: installs dependencies if missing, builds (warnings are
# errors), runs the suite under ctest (but the slow ones of twice_slow), then the
# whole suite under ASan+UBSan (but the chaos and fleet trials: processes killed at
# random, already run above), then the threaded tests under ThreadSanitizer.
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
# behind the 256 MiB production reserve (tests/disk_full.sh sets its own)
export SEGD_STORE_MIN_FREE_MB=8
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEGD_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
# One real Apache Kafka cluster (scripts/kafka.sh: 3 KRaft nodes on loopback,
# auto topic creation off) for the plain and sanitizer stages: every test that
# goes through tests/lib.bash's start_broker creates its own topics there
# (README "Tests" says which tests stay on the mock and why). Stopped by pid
# when this script exits, however it exits.
export KAFKA_CLUSTER_DIR="$PWD/build/kafka"
trap 'bash scripts/kafka.sh stop' EXIT
bash scripts/kafka.sh start 3 >/dev/null
# The slowest tests run under ASan+UBSan below (same assertions, sanitized):
# running them twice would spend two minutes of CI on nothing new (the
# broker-fault tests each start a Kafka cluster of their own as well).
twice_slow='^(test_ingest|test_ingest_faults|test_publish|test_converge|snapshot_cli|restore_cli|cli_replay|sweep_cli|run_logs|demo_cli|metrics_prom|resp_cli|kafka_failover|kafka_outage|cache_log_start)$'
(cd build && ctest --output-on-failure -j"$test_jobs" -E "$twice_slow")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSEGD_SANITIZE=ON -DSEGD_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
# allocator_may_return_null: fuzzed Avro claims huge lengths; avro-c must see NULL, not an abort
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
   LSAN_OPTIONS=suppressions="$PWD/../tests/lsan.supp" \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j"$test_jobs" -E '^(chaos|fleet)$')
# ThreadSanitizer: the unit tests (edge cache shards, RocksDB's threads in the
# merge operator and filter) and snapshot_cli (the exporter's lanes). Tests
# labelled kafka are left out (CMakeLists.txt: librdkafka's C11 threads are
# invisible to GCC 12's TSan and crash under it), so the publisher thread and
# the HTTP server run under ASan only; suppressions cover only races inside
# uninstrumented RocksDB/librdkafka.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSEGD_TSAN=ON -DSEGD_WERROR=ON >/dev/null
# SEGD_TSAN=1: snapshot_cli exports fewer users there and leaves its Python
# format readers to the runs above (TSan runs segd ~10x slower; 101 s before).
# only what those tests run (segd and their test programs): the fuzz replays,
# and the kafka tests' programs would be compiled for nothing
tsan_tests='^test_|^snapshot_cli$'
tsan_targets=$(cd build-tsan && ctest -N -LE kafka -R "$tsan_tests" |
               sed -n 's/^ *Test *#[0-9]*: \(test_[a-z0-9_]*\)$/\1/p')
cmake --build build-tsan -j"$jobs" --target segd $tsan_targets
(cd build-tsan && SEGD_TSAN=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
   ctest --output-on-failure -j"$jobs" -LE kafka -R "$tsan_tests")
