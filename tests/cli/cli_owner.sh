#!/usr/bin/env bash
# Reads in a fleet (DESIGN §7): `segd owner` names the partition a real
# librdkafka producer (kcat) puts each key in with the same partitioner
# (murmur2_random, segd's default, and consistent_random through
# input.partitioner), and says owner=unknown where the brokers cannot
# describe the group (the dev broker has no DescribeGroups; a group nobody
# joined), and on a real cluster the member of segd run's group; `segd get`
# notes a user of a partition the store holds no offset for, and not one of
# its own partitions, and answers both (exit 0).
# usage: cli_owner.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
src=$2
source "$(dirname "$0")/../support/lib.bash"
lib_init owner
command -v kcat >/dev/null || fail "kcat is not installed"

start_broker 4 ev,ev.dlq,keys,keys2
bootstrap=$brokers

# (d) the partition of 40 keys as kcat's partitioner puts them, against segd owner
users=$(seq -f 'user-%g' 0 39 | tr '\n' ' ')
check_partitioner() { # topic, librdkafka partitioner, segd config file or ""
  for u in $users; do echo "$u:x"; done |
    kcat -P -b "$bootstrap" -t "$tp$1" -K: -X partitioner="$2" || fail "kcat produce"
  kcat -C -b "$bootstrap" -t "$tp$1" -e -q -f '%k partition=%p\n' | sort > "$tmp/kcat.$1"
  [ "$(wc -l < "$tmp/kcat.$1")" = 40 ] || fail "kcat read back $(wc -l < "$tmp/kcat.$1") keys"
  # shellcheck disable=SC2086
  "$segd" owner --brokers "$bootstrap" --topic "$tp$1" ${3:+--config "$3"} $users \
    2> "$tmp/owner.err" | sort > "$tmp/owner.$1" || fail "segd owner: $(cat "$tmp/owner.err")"
  diff "$tmp/kcat.$1" "$tmp/owner.$1" || fail "segd owner disagrees with kcat's $2"
  [ "$(cut -d' ' -f2 "$tmp/owner.$1" | sort -u | wc -l)" = 4 ] || fail "keys not spread"
}
check_partitioner keys murmur2_random ""
echo "input.partitioner = consistent_random" > "$tmp/crc.conf"
check_partitioner keys2 consistent_random "$tmp/crc.conf"

# the group's owner: the dev broker cannot describe groups, and says so (a
# real cluster lists no group g: no member ever joined it)
"$segd" owner --brokers "$bootstrap" --topic "${tp}keys" --group "${tp}g" user-0 > "$tmp/own.out" \
  2> "$tmp/own.err" || fail "segd owner --group: $(cat "$tmp/own.err")"
grep -q "^user-0 partition=[0-3] owner=unknown$" "$tmp/own.out" || fail "owner: $(cat "$tmp/own.out")"
grep -q "owner=unknown: cannot describe the group" "$tmp/own.err" || fail "no reason: $(cat "$tmp/own.err")"
"$segd" owner --brokers "$bootstrap" user-0 2> /dev/null && fail "owner without --topic accepted"

# (e) a store fed two users holds offsets for their partitions only
# shellcheck disable=SC2086
"$segd" owner --brokers "$bootstrap" --topic "${tp}ev" $users > "$tmp/parts" || fail "segd owner"
part() { sed -n "s/^$1 partition=//p" "$tmp/parts"; }
mine1=user-0
p1=$(part $mine1)
mine2=""; other=""
for u in $users; do
  p=$(part "$u")
  if [ -z "$mine2" ] && [ "$p" != "$p1" ]; then mine2=$u; p2=$p; fi
done
for u in $users; do
  p=$(part "$u")
  if [ "$p" != "$p1" ] && [ "$p" != "$p2" ]; then other=$u; break; fi
done
[ -n "$mine2" ] && [ -n "$other" ] || fail "no users in three partitions"

/usr/bin/python3 - "$src/schemas/segment_event.avsc" "$tmp" "$mine1" "$mine2" <<'PY'
import io, sys, avro.schema, avro.io
schema = avro.schema.parse(open(sys.argv[1]).read())
for i, user in enumerate(sys.argv[3:5]):
    ev = {"user_id": user, "ts_ms": 1799990000000 + i, "op": "UPSERT",
          "segments": [{"segment_id": 100 + i, "ttl_s": 86400, "flags": 0, "partner_id": 0}],
          "source": "owner"}
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(ev, avro.io.BinaryEncoder(buf))
    open("%s/msg%d.avro" % (sys.argv[2], i), "wb").write(buf.getvalue())
PY
kcat -P -b "$bootstrap" -t "${tp}ev" -X partitioner=murmur2_random -k "$mine1" "$tmp/msg0.avro"
kcat -P -b "$bootstrap" -t "${tp}ev" -X partitioner=murmur2_random -k "$mine2" "$tmp/msg1.avro"

cat > "$tmp/segd.conf" <<CONF
input.format = raw
input.partitioner = murmur2_random
changes.enable = 0
batch.max.ms = 20
kafka.session.timeout.ms = 6000
limits.max.clock.skew.ms = 3000000000000
CONF
"$segd" run --brokers "$bootstrap" --topic "${tp}ev" --group "${tp}own" --db "$tmp/db" --config "$tmp/segd.conf" 2> "$tmp/run.log" &
run_pid=$!
pids+=($run_pid)
for _ in $(seq 300); do
  [ "$("$segd" get --db "$tmp/db" --now 1800000000 "$mine1" "$mine2" 2>/dev/null | grep -c '1 live')" = 2 ] && break
  sleep 0.2
done
# a real cluster names the member that holds the user's partition (the only
# one: segd run above)
if kafka_real; then
  "$segd" owner --brokers "$bootstrap" --topic "${tp}ev" --group "${tp}own" "$mine1" > "$tmp/own.out" \
    2> "$tmp/own.err" || fail "segd owner --group own: $(cat "$tmp/own.err")"
  grep -q "^$mine1 partition=$p1 owner=[^ ]*[a-z0-9] host=" "$tmp/own.out" || fail "owner of $mine1: $(cat "$tmp/own.out")"
  grep -q "owner=none\|owner=unknown" "$tmp/own.out" && fail "owner of $mine1: $(cat "$tmp/own.out")"
fi
kill -TERM $run_pid; wait $run_pid || fail "segd run exit $?"
grep -q "misrouted=0" "$tmp/run.log" || fail "run log: no misrouted=0"

"$segd" get --db "$tmp/db" --now 1800000000 --config "$tmp/segd.conf" "$mine1" "$mine2" \
  > "$tmp/get.out" 2> "$tmp/get.err" || fail "get of owned users"
[ ! -s "$tmp/get.err" ] || fail "note for owned users: $(cat "$tmp/get.err")"
grep -q "^$mine1: 1 live segment$" "$tmp/get.out" || fail "get: $(cat "$tmp/get.out")"
"$segd" get --db "$tmp/db" --now 1800000000 --config "$tmp/segd.conf" "$other" \
  > "$tmp/get.out" 2> "$tmp/get.err" || fail "get of a user of another instance: exit $?"
po=$(part "$other")
grep -qx "user $other is in partition $po, owned by another instance: this store may be stale" \
  "$tmp/get.err" || fail "no stale note: $(cat "$tmp/get.err")"
grep -q "^$other: unknown (no record in this store), 0 live segments" "$tmp/get.out" || fail "not answered: $(cat "$tmp/get.out")"
"$segd" stats --db "$tmp/db" | grep -q "^misrouted events       0$" || fail "stats: no misrouted line"
echo "ok"
