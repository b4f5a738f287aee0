#!/usr/bin/env bash
# The binary needs no schema files at run time (the Docker image has none):
# a copy of segd in an empty directory, with the source tree's schemas/
# hidden behind an empty tmpfs (a private mount namespace), still runs
# `produce`, `run` and an Avro `backfill`.
# usage: cli_no_schema_dir.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
# the events are stamped around 2027-01-15 (--now 1800000000) while segd run
# keeps the wall clock: allow them past the from_future bound
export SEGD_LIMITS_MAX_CLOCK_SKEW_MS=3000000000000
segd=$1
src=$(cd "$2" && pwd)
source "$(dirname "$0")/../support/lib.bash"
lib_init noschema
unshare -rm true 2> "$tmp/unshare.err" ||
  fail "no unprivileged mount namespace here (unshare -rm): $(cat "$tmp/unshare.err")"
cp "$segd" "$tmp/segd"
# the broker outside the namespace (on the mock, the built binary's dev
# broker: a broker is not what this test is about)
start_broker 2 events,events.dlq,segments.changes
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
/usr/bin/python3 - "$src/schemas/segment_event.avsc" "$tmp/events.avro" <<'PY'
import avro.schema, avro.datafile, avro.io, sys
schema = avro.schema.parse(open(sys.argv[1]).read())
w = avro.datafile.DataFileWriter(open(sys.argv[2], "wb"), avro.io.DatumWriter(), schema)
for i in range(10):
    w.append({"user_id": "u%d" % i, "ts_ms": 1799990000000, "op": "UPSERT",
              "segments": [{"segment_id": 7, "ttl_s": 86400, "flags": 0, "partner_id": 0}],
              "source": None})
w.close()
PY
# everything below runs in a namespace where $src/schemas is an empty directory
unshare -rm bash -s "$tmp" "$src" "$brokers" "$tp" <<'SH'
set -euo pipefail
tmp=$1 src=$2 brokers=$3 tp=$4
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -5 "$f" >&2; done; exit 1; }
mount -t tmpfs none "$src/schemas"
[ -z "$(ls -A "$src/schemas")" ] || fail "schemas still visible"
cd "$tmp"
now=1800000000
./segd backfill --db db1 --now $now events.avro > backfill.log 2>&1 || fail "avro backfill exit $?"
grep -q "applied 10 events (10 segments), skipped 0" backfill.log || fail "backfill: $(cat backfill.log)"
./segd produce --brokers "$brokers" --topic "${tp}events" --users 20 --now $now > produce.log 2>&1 ||
  fail "produce exit $?"
./segd run --brokers "$brokers" --topic "${tp}events" --group "${tp}g" --db db2 \
  -X session.timeout.ms=6000 2> run.log &
run=$!
ok=0
for _ in $(seq 200); do
  if ./segd get --db db2 --now $now --json u0000000019 2>/dev/null | grep -q '"id"'; then ok=1; break; fi
  kill -0 $run 2>/dev/null || break
  sleep 0.2
done
kill -TERM $run 2>/dev/null || true
wait $run || fail "segd run exit $?"
[ $ok = 1 ] || fail "segd run applied nothing"
SH
echo "cli_no_schema_dir: ok"
