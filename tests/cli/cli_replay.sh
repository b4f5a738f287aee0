#!/usr/bin/env bash
# segd replay and segd offsets against a broker (tests/support/lib.bash): a replayed range
# equals what `segd run` makes of it; a replay into a store that holds the
# range changes neither data nor stored offsets; offset and time ranges pick
# exactly their messages; bad messages go to --dlq-file or the DLQ topic
# (exit 3); `offsets set` makes run re-consume; a store in use is refused.
# usage: cli_replay.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
source "$(dirname "$0")/../support/lib.bash"
lib_init replay
command -v kcat >/dev/null || fail "kcat is not installed"
export SEGD_STORE_MIN_FREE_MB=${SEGD_STORE_MIN_FREE_MB:-8}
# the seed workload spans 30 days: with the 1-day default horizon, a segd run
# that stays caught up for 10 s starts its GC watermark and a later replay of
# the whole topic would refuse the old events as too_late (CI under load, (b))
export SEGD_STORE_HORIZON_S=$((80 * 86400))
now=$(date +%s)
start_broker 3 ev,ev.dlq,segments.changes,reg,reg.dlq
export SEGD_CHANGES_TOPIC="${tp}segments.changes"
b=$brokers

"$segd" replay --help | grep -q "up to but NOT including" || fail "replay --help"
"$segd" offsets --help | grep -q "offsets set --db DIR --topic T" || fail "offsets --help"
set +e
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" 2>/dev/null; [ $? = 2 ] || fail "no --from-*: not exit 2"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-beginning --from-time 5 2>/dev/null
[ $? = 2 ] || fail "two --from-*: not exit 2"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-time 2026-01-01T00:00:00 2>/dev/null
[ $? = 2 ] || fail "a time without zone: not exit 2"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-time 2026-02-31T00:00:00Z 2>/dev/null
[ $? = 2 ] || fail "February 31: not exit 2"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-time 1795435200 --from-beginning 2> "$tmp/secs.log"
grep -q "warning: --from-time 1795435200 is read as Unix milliseconds (1795435200 looks like seconds)" "$tmp/secs.log" \
  || fail "no seconds warning: $(cat "$tmp/secs.log")"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-offset 0:1,0:2 2>/dev/null
[ $? = 2 ] || fail "a partition twice in --from-offset: not exit 2"
"$segd" replay --brokers x --topic "${tp}ev" --db "$tmp/x" --from-beginning --to-offset 1:5,1:3 2>/dev/null
[ $? = 2 ] || fail "a partition twice in --to-offset: not exit 2"
printf 'topics = %sreg,%sev\n' "$tp" "$tp" > "$tmp/two.conf"
"$segd" replay --brokers x --config "$tmp/two.conf" --db "$tmp/x" --from-beginning 2> "$tmp/notopic.log"
[ $? = 2 ] || fail "no --topic: not exit 2"
grep -q -- "--topic is required" "$tmp/notopic.log" || fail "no --topic: $(cat "$tmp/notopic.log")"
"$segd" offsets show --db "$tmp/none" 2>/dev/null; [ $? = 1 ] || fail "offsets of no store: not exit 1"
[ -e "$tmp/none" ] && fail "offsets show created a store"
set -e

"$segd" produce --brokers "$b" --topic "${tp}ev" --users 40 --events 600 --now "$now" >/dev/null
# every message: partition, offset, timestamp, key
kcat -C -b "$b" -t "${tp}ev" -e -q -f '%p %o %T %k\n' > "$tmp/msgs"
[ "$(wc -l < "$tmp/msgs")" = 600 ] || fail "kcat read $(wc -l < "$tmp/msgs") messages"
awk '{print $4}' "$tmp/msgs" | sort -u > "$tmp/users"
hi() { awk -v p="$1" '$1 == p' "$tmp/msgs" | wc -l; }
hi0=$(hi 0); hi1=$(hi 1); hi2=$(hi 2)
getall() { "$segd" get --db "$1" --now "$now" --json $(cat "$tmp/users"); }
summary() { grep '^replayed ' "$1"; }

# (a) replay == run on the same topic, every user byte for byte
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/a" --from-beginning 2> "$tmp/a.log" || fail "replay exit $?"
summary "$tmp/a.log" | grep -q "^replayed 600 messages (600 events, [0-9]* segments, 0 dead-lettered, 0 misrouted) from 3 partitions in " \
  || fail "summary: $(cat "$tmp/a.log")"
getall "$tmp/a" > "$tmp/a.json"
grep -q '"id":' "$tmp/a.json" || fail "replay wrote nothing"
"$segd" offsets show --db "$tmp/a" --json > "$tmp/a.offs"
[ "$(cat "$tmp/a.offs")" = '{"offsets":[],"changes":[],"gc_watermark_ms":0,"ingest_floor_ms":0}' ] \
  || fail "replay stored offsets: $(cat "$tmp/a.offs")"
# its batches carry outbox entries for the change stream, unless --no-changes
"$segd" stats --db "$tmp/a" --json | grep -q '"outbox_entries":[1-9]' || fail "replay wrote no outbox entries"
grep -A1 '^replayed ' "$tmp/a.log" | grep -q '^outbox: [1-9][0-9]* entries not yet published' \
  || fail "no outbox line: $(cat "$tmp/a.log")"
# changes.max.outbox bounds what replay leaves unpublished: with 1, two
# batches are written (the second sees 1 entry), the third is refused, exit 1
printf 'changes.max.outbox = 1\nbatch.max.messages = 50\n' > "$tmp/ob.conf"
set +e
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/ob" --from-beginning --config "$tmp/ob.conf" 2> "$tmp/ob.log"; rc=$?
set -e
[ $rc = 1 ] || fail "outbox over changes.max.outbox: exit $rc: $(cat "$tmp/ob.log")"
grep -q "the outbox holds 2 entries, over changes.max.outbox 1: run \`segd run\` to publish them, or replay with --no-changes" \
  "$tmp/ob.log" || fail "outbox bound message: $(cat "$tmp/ob.log")"
grep -q '^outbox: 2 entries not yet published' "$tmp/ob.log" || fail "outbox line: $(cat "$tmp/ob.log")"
n=$(summary "$tmp/ob.log" | sed 's/^replayed \([0-9]*\) messages.*/\1/')
[ "$n" -gt 0 ] && [ "$n" -le 100 ] || fail "outbox bound: replayed $n"
"$segd" stats --db "$tmp/ob" --json | grep -q '"outbox_entries":2,' || fail "outbox bound: entries"
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/ob" --from-beginning --config "$tmp/ob.conf" --no-changes 2>/dev/null \
  || fail "--no-changes is not bound by the outbox"
cmp "$tmp/a.json" <(getall "$tmp/ob") || fail "bounded replay + --no-changes differ from the whole"
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/nc" --from-beginning --no-changes 2>/dev/null || fail "--no-changes"
"$segd" stats --db "$tmp/nc" --json | grep -q '"outbox_entries":0,' || fail "--no-changes wrote outbox entries"
cmp "$tmp/a.json" <(getall "$tmp/nc") || fail "--no-changes changed the data"
cat > "$tmp/run.conf" <<CONF
batch.max.ms = 20
kafka.session.timeout.ms = 6000
CONF
"$segd" run --brokers "$b" --topic "${tp}ev" --group "${tp}g1" --db "$tmp/r" --config "$tmp/run.conf" 2> "$tmp/run1.log" &
run=$!; pids+=($run)
for _ in $(seq 150); do
  getall "$tmp/r" > "$tmp/r.json" 2>/dev/null && cmp -s "$tmp/a.json" "$tmp/r.json" && break
  sleep 0.2
done
# (f) a store in use is refused, naming RocksDB's lock
set +e
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/r" --from-beginning 2> "$tmp/lock.log"; rc=$?
set -e
[ $rc = 1 ] || fail "replay into a locked store: exit $rc"
grep -q "LOCK" "$tmp/lock.log" || fail "lock message: $(cat "$tmp/lock.log")"
# only the error: a summary of 0 messages would read as a replay that ran (issue 30)
if grep -q "^replayed " "$tmp/lock.log"; then fail "a summary after the lock error: $(cat "$tmp/lock.log")"; fi
# show only reads (read-only open, issue 23): it works beside segd run
set +e; "$segd" offsets show --db "$tmp/r" > /dev/null 2>&1; rc=$?; set -e
[ $rc = 0 ] || fail "offsets show beside segd run: exit $rc"
set +e; "$segd" offsets set --db "$tmp/r" --topic "${tp}ev" 0:0 > /dev/null 2>&1; rc=$?; set -e
[ $rc = 1 ] || fail "offsets set of a locked store: exit $rc"
kill -TERM $run; wait $run || fail "segd run exited with $?"
grep -q "msg=final consumed=600 events=600 " "$tmp/run1.log" || fail "run summary"
cmp "$tmp/a.json" "$tmp/r.json" || fail "replay and run differ"

# (b) replaying what the store holds changes nothing: data and offsets
"$segd" offsets show --db "$tmp/r" --json > "$tmp/r.offs.before"
"$segd" offsets show --db "$tmp/r" > "$tmp/r.offs.txt"
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/r" --from-beginning --to-end 2> "$tmp/b.log" || fail "replay (b)"
getall "$tmp/r" > "$tmp/r.json.after"
cmp "$tmp/r.json" "$tmp/r.json.after" || fail "replay changed the data"
"$segd" offsets show --db "$tmp/r" --json > "$tmp/r.offs.after"
cmp "$tmp/r.offs.before" "$tmp/r.offs.after" || fail "replay moved the stored offsets"
/usr/bin/python3 - "$tmp/r.offs.before" "$tmp/r.offs.txt" "$hi0" "$hi1" "$hi2" "${tp}ev" <<'PY' || fail "offsets show"
import json, sys
j = json.load(open(sys.argv[1]))
want = {(p, int(sys.argv[3 + p])) for p in range(3)}
got = {(o["partition"], o["next_offset"]) for o in j["offsets"] if o["topic"] == sys.argv[6]}
assert got == want, (got, want)
assert len(j["offsets"]) == 3 and isinstance(j["changes"], list) and j["gc_watermark_ms"] >= 0, j
rows = [l.split() for l in open(sys.argv[2]) if l.startswith("offset ")]
assert {(int(r[2]), int(r[3])) for r in rows if r[1] == sys.argv[6]} == want, rows
PY

# (c) offset ranges: exactly [from, to) of the named partitions ...
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/c" --from-offset 0:10 --to-offset 0:20 2> "$tmp/c.log" || fail "replay (c)"
summary "$tmp/c.log" | grep -q "^replayed 10 messages (10 events, .* from 1 partitions" || fail "range: $(cat "$tmp/c.log")"
awk '$1 == 0 && $2 >= 10 && $2 < 20 {print $4}' "$tmp/msgs" | sort -u > "$tmp/c.keys"
getall "$tmp/c" | grep '"id":' | sed 's/^{"user_id":"\([^"]*\)".*/\1/' | sort -u > "$tmp/c.users"
[ -s "$tmp/c.users" ] || fail "range applied nothing"
comm -23 "$tmp/c.users" "$tmp/c.keys" | grep -q . && fail "users outside the range: $(comm -23 "$tmp/c.users" "$tmp/c.keys")"
# ... and the rest of the topic in further replays makes the whole (no message lost at a bound)
# (an operator's auto.offset.reset cannot change what is read: replay forces `error`)
partial() { # want-messages args...
  local want=$1 rc; shift
  set +e; "$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/c" "$@" 2> "$tmp/cp.log"; rc=$?; set -e
  [ $rc = 0 ] || fail "partial replay $*: exit $rc: $(cat "$tmp/cp.log")"
  summary "$tmp/cp.log" | grep -q "^replayed $want messages ($want events" || fail "partial replay $*: want $want: $(cat "$tmp/cp.log")"
}
partial $((10 + hi1 + hi2)) --from-offset 0:0,1:0,2:0 --to-offset 0:10 -X auto.offset.reset=latest
partial $((hi0 - 20)) --from-offset 0:20 --to-end -X auto.offset.reset=error
partial $((hi2 + 1)) --partitions 1,2 --from-beginning --to-offset 1:1
getall "$tmp/c" > "$tmp/c.json"
cmp "$tmp/a.json" "$tmp/c.json" || fail "pieces of the topic differ from the whole"
# time ranges: [first message at or after from, first at or after to)
read -r tfrom tto expect < <(/usr/bin/python3 - "$tmp/msgs" <<'PY'
import sys
m = [tuple(map(int, l.split()[:3])) for l in open(sys.argv[1])]
ts = sorted({t for _, _, t in m})
tfrom, tto = ts[len(ts) // 4], ts[3 * len(ts) // 4]
print(tfrom, tto, sum(1 for _, _, t in m if tfrom <= t < tto))
PY
)
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t" --from-time "$tfrom" --to-time "$tto" 2> "$tmp/t.log" || fail "replay time"
summary "$tmp/t.log" | grep -q "^replayed $expect messages" || fail "time range: want $expect: $(cat "$tmp/t.log")"
iso=$(date -u -d "@$((tfrom / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((tfrom % 1000)))Z
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t2" --from-time "$iso" --to-time "$tto" 2> "$tmp/t2.log"
summary "$tmp/t2.log" | grep -q "^replayed $expect messages" || fail "ISO time: $(cat "$tmp/t2.log")"
off=$(date -u -d "@$((tfrom / 1000 + 5400))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((tfrom % 1000)))+01:30
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t2" --from-time "$off" --to-time "$tto" 2> "$tmp/t2.log"
summary "$tmp/t2.log" | grep -q "^replayed $expect messages" || fail "ISO time with offset: $(cat "$tmp/t2.log")"
# a start below the log start, an end past the log's end: said, clamped
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t3" --from-offset 0:5 --to-offset 0:999999 2> "$tmp/t3.log"
grep -q "beyond the end of the log $hi0" "$tmp/t3.log" || fail "no clamp note: $(cat "$tmp/t3.log")"
set +e
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t3" --from-offset 7:0 2>/dev/null; rc=$?
set -e
[ $rc = 2 ] || fail "a partition the topic lacks: exit $rc"
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/t3" --from-offset 0:999999 2> "$tmp/t4.log" || fail "start past the end: exit $?"
grep -q "offset 999999 is beyond the end of the log $hi0: nothing to replay" "$tmp/t4.log" || fail "no note: $(cat "$tmp/t4.log")"
summary "$tmp/t4.log" | grep -q "^replayed 0 messages" || fail "start past the end: $(cat "$tmp/t4.log")"

# (d) bad messages: two in partition 1 after the good ones
printf 'garbage-one' | kcat -P -b "$b" -t "${tp}ev" -p 1 -k k1
printf 'garbage-two' | kcat -P -b "$b" -t "${tp}ev" -p 1 -k k2
set +e
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/d" --from-beginning --dlq-file "$tmp/dlq.jsonl" 2> "$tmp/d.log"; rc=$?
set -e
[ $rc = 3 ] || fail "dead letters: exit $rc"
summary "$tmp/d.log" | grep -q "^replayed 602 messages (600 events, .* 2 dead-lettered, 0 misrouted)" || fail "dlq summary: $(cat "$tmp/d.log")"
/usr/bin/python3 - "$tmp/dlq.jsonl" "$hi1" "${tp}ev" <<'PY' || fail "dlq file: $(cat "$tmp/dlq.jsonl")"
import base64, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
hi1 = int(sys.argv[2])
assert len(lines) == 2, lines
for i, (d, k, v) in enumerate(zip(lines, [b"k1", b"k2"], [b"garbage-one", b"garbage-two"])):
    assert d["topic"] == sys.argv[3] and d["partition"] == 1 and d["offset"] == hi1 + i, d
    assert base64.b64decode(d["key_b64"]) == k and base64.b64decode(d["value_b64"]) == v, d
    assert d["reason"] == "decode" and d["error"], d
PY
cmp "$tmp/a.json" <(getall "$tmp/d") || fail "dead letters changed the good data"
set +e
"$segd" replay --brokers "$b" --topic "${tp}ev" --db "$tmp/d" --from-offset 1:$hi1 2> "$tmp/d2.log"; rc=$?
set -e
[ $rc = 3 ] || fail "dead letters to the topic: exit $rc"
kcat -C -b "$b" -t "${tp}ev.dlq" -e -q -f '%k %s %h\n' > "$tmp/dlq.topic"
[ "$(wc -l < "$tmp/dlq.topic")" = 2 ] || fail "DLQ topic: $(cat "$tmp/dlq.topic")"
grep -q "^k1 garbage-one .*segd.source=${tp}ev/1/$hi1" "$tmp/dlq.topic" || fail "DLQ topic: $(cat "$tmp/dlq.topic")"
grep -q "^k2 garbage-two .*segd.source=${tp}ev/1/$((hi1 + 1))" "$tmp/dlq.topic" || fail "DLQ topic: $(cat "$tmp/dlq.topic")"
# the default DLQ topic is segd run's for the same config: its first topic's
set +e
"$segd" replay --brokers "$b" --config "$tmp/two.conf" --topic "${tp}ev" --db "$tmp/d" --from-offset 1:$hi1 2> "$tmp/d3.log"; rc=$?
set -e
[ $rc = 3 ] || fail "dead letters to the config's DLQ topic: exit $rc"
kcat -C -b "$b" -t "${tp}reg.dlq" -e -q -f '%k %s\n' > "$tmp/dlq.reg"
[ "$(wc -l < "$tmp/dlq.reg")" = 2 ] || fail "DLQ of the config's first topic: $(cat "$tmp/dlq.reg")"
[ "$(kcat -C -b "$b" -t "${tp}ev.dlq" -e -q | wc -l)" = 2 ] || fail "dead letters went to ev.dlq"

# offsets set refuses a topic or partition with no stored offset (a typo?)
# unless --force, and a name Kafka would not allow
set +e
"$segd" offsets set --db "$tmp/r" --topic bb 0:5 > "$tmp/force.out" 2> "$tmp/force.log"; rc=$?
set -e
[ $rc = 2 ] || fail "offsets set of a topic never consumed: exit $rc"
grep -q "no stored offset for bb \[0\]: the daemon never consumed it; --force to set it anyway" "$tmp/force.log" \
  || fail "offsets set message: $(cat "$tmp/force.log")"
set +e; "$segd" offsets set --db "$tmp/r" --topic "${tp}ev" 0:5,7:5 >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "offsets set of a partition never consumed: exit $rc"
set +e; "$segd" offsets set --db "$tmp/r" --topic 'e v' 0:5 >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "offsets set of a bad topic name: exit $rc"
set +e; "$segd" offsets set --db "$tmp/r" --topic .. --force 0:5 >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "offsets set of topic '..' (Kafka refuses it): exit $rc"
cmp "$tmp/r.offs.before" <("$segd" offsets show --db "$tmp/r" --json) || fail "a refused offsets set wrote"
"$segd" offsets set --db "$tmp/a" --topic bb --force 0:5 > "$tmp/force.out" || fail "offsets set --force"
grep -qx "bb \[0\]: (none) -> 5" "$tmp/force.out" || fail "offsets set --force said: $(cat "$tmp/force.out")"

# (e) offsets set rewinds segd run: it re-consumes partition 0 (and reads the
# two new messages of partition 1), and the data stays the same
"$segd" offsets set --db "$tmp/r" --topic "${tp}ev" 0:0 > "$tmp/set.out" || fail "offsets set"
grep -qx "${tp}ev \[0\]: $hi0 -> 0" "$tmp/set.out" || fail "offsets set said: $(cat "$tmp/set.out")"
"$segd" offsets show --db "$tmp/r" --json | grep -q "{\"topic\":\"${tp}ev\",\"partition\":0,\"next_offset\":0}" || fail "offset not set"
"$segd" run --brokers "$b" --topic "${tp}ev" --group "${tp}g1" --db "$tmp/r" --config "$tmp/run.conf" 2> "$tmp/run2.log" &
run=$!; pids+=($run)
want="consumed=$((hi0 + 2)) events=$hi0 "
for _ in $(seq 150); do grep -q "$want" "$tmp/run2.log" && break; sleep 0.2; done
kill -TERM $run; wait $run || fail "segd run exited with $?"
grep -q "msg=final $want" "$tmp/run2.log" || fail "run did not re-consume: want $want"
cmp "$tmp/a.json" <(getall "$tmp/r") || fail "re-consuming changed the data"
"$segd" offsets show --db "$tmp/r" --json | grep -q "{\"topic\":\"${tp}ev\",\"partition\":1,\"next_offset\":$((hi1 + 2))}" \
  || fail "offsets after the run: $("$segd" offsets show --db "$tmp/r" --json)"

# (g) an unreachable schema registry is waited on, not dead-lettered; SIGINT
# ends the replay with exit 1 and the summary
printf '\x00\x00\x00\x00\x07\x02' | kcat -P -b "$b" -t "${tp}reg" -p 0 -k u1
cat > "$tmp/reg.conf" <<CONF
input.format = confluent
input.schema.registry.url = http://127.0.0.1:1
retry.max.ms = 200
CONF
"$segd" replay --brokers "$b" --topic "${tp}reg" --db "$tmp/g" --from-beginning --config "$tmp/reg.conf" \
  --dlq-file "$tmp/g.dlq" 2> "$tmp/g.log" &
rp=$!; pids+=($rp)
for _ in $(seq 100); do grep -q "waiting: " "$tmp/g.log" && break; sleep 0.1; done
grep -q "waiting: " "$tmp/g.log" || fail "no registry wait"
kill -INT $rp
set +e; wait $rp; rc=$?; set -e
[ $rc = 1 ] || fail "interrupted replay: exit $rc"
summary "$tmp/g.log" | grep -q "^replayed 0 messages (0 events, 0 segments, 0 dead-lettered, 0 misrouted) from 3 partitions" \
  || fail "interrupted summary: $(cat "$tmp/g.log")"
[ -s "$tmp/g.dlq" ] && fail "a registry outage was dead-lettered"
echo "cli_replay: ok"
