#!/usr/bin/env bash
# `segd replay --from-time/--to-time` on Apache Kafka, where the brokers
# look times up (ListOffsets by timestamp; the dev broker cannot, and
# tests/cli/cli_replay.sh covers it there): three waves of events produced a
# second apart (CreateTime timestamps set by the producer), and the bounds
# taken in the gaps between them. Replaying [gap 1, gap 2) applies exactly
# the second wave, [gap 2, end) the third (the time given in RFC 3339), and
# a time after the last message finds, through the brokers' lookup, no
# message in any partition ("no message at or after T", which only a broker
# that answers time lookups can give) and replays nothing.
# Needs real Kafka: without KAFKA_CLUSTER_DIR it starts a cluster of its own
# (lib.bash require_kafka). usage: kafka_replay_time.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
# shellcheck source=tests/support/lib.bash
source "$(dirname "$0")/../support/lib.bash"
lib_init kafka_replay_time
require_kafka
command -v kcat >/dev/null || fail "kcat is not installed"
start_broker 3 events
now_ms() { date +%s%3N; }
wave() { # SEED
  "$segd" produce --brokers "$brokers" --topic "${tp}events" --users 12 --events 60 \
    --seed "$1" > /dev/null 2> "$tmp/produce.log" || fail "produce: $(cat "$tmp/produce.log")"
}
wave 1
sleep 1; gap1=$(now_ms); sleep 1
wave 2
sleep 1; gap2=$(now_ms); sleep 1
wave 3
kcat -C -b "$brokers" -t "${tp}events" -e -q -f '%p %o %T\n' > "$tmp/msgs"
[ "$(wc -l < "$tmp/msgs")" = 180 ] || fail "kcat read $(wc -l < "$tmp/msgs") messages"
# the waves as the brokers hold them: every partition has messages before
# gap 1 (the lookup, not the start of the log, must place the start)
read -r in2 in3 last parts_before < <(/usr/bin/python3 - "$tmp/msgs" "$gap1" "$gap2" <<'PY'
import sys
m = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
g1, g2 = int(sys.argv[2]), int(sys.argv[3])
print(sum(1 for _, _, t in m if g1 <= t < g2), sum(1 for _, _, t in m if t >= g2),
      max(t for _, _, t in m), len({p for p, _, t in m if t < g1}))
PY
)
[ "$in2" = 60 ] && [ "$in3" = 60 ] || fail "waves not apart in time: $in2 and $in3 messages in the gaps' ranges"
[ "$parts_before" = 3 ] || fail "only $parts_before partitions hold first-wave messages"

summary() { grep '^replayed ' "$1" || true; }
"$segd" replay --brokers "$brokers" --topic "${tp}events" --db "$tmp/w2" \
  --from-time "$gap1" --to-time "$gap2" 2> "$tmp/w2.log" || fail "replay wave 2: $(cat "$tmp/w2.log")"
summary "$tmp/w2.log" | grep -q "^replayed 60 messages (60 events" ||
  fail "wave 2: want 60 messages: $(cat "$tmp/w2.log")"
iso=$(date -u -d "@$((gap2 / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((gap2 % 1000)))Z
"$segd" replay --brokers "$brokers" --topic "${tp}events" --db "$tmp/w3" \
  --from-time "$iso" 2> "$tmp/w3.log" || fail "replay wave 3: $(cat "$tmp/w3.log")"
summary "$tmp/w3.log" | grep -q "^replayed 60 messages (60 events" ||
  fail "wave 3 (from $iso): want 60 messages: $(cat "$tmp/w3.log")"
after=$((last + 1000))
"$segd" replay --brokers "$brokers" --topic "${tp}events" --db "$tmp/none" \
  --from-time "$after" 2> "$tmp/none.log" || fail "replay after the end: $(cat "$tmp/none.log")"
[ "$(grep -c "no message at or after $after: nothing to replay" "$tmp/none.log")" = 3 ] ||
  fail "the brokers' time lookup did not place the start: $(cat "$tmp/none.log")"
summary "$tmp/none.log" | grep -q "^replayed 0 messages" || fail "after the end: $(cat "$tmp/none.log")"
echo ok
