#!/usr/bin/env bash
# `segd backfill --bulk` is exact (issue 10): for the same random inputs
# (duplicates, UPSERT/REMOVE/ERASE_USER, equal timestamps, TTLs already
# expired, retirements before and after the load, a hot user with ~700 events), a store bulk-loaded into
# SST files answers `segd get --json` exactly as one loaded through the merge
# path, for every user at several clocks; also when the bulk store already
# holds some of the users (they go through the merge path), when a small
# --memory-mb forces spilled sort runs, and with gzip input. The bulk load
# writes the same outbox deltas unless --no-changes.
# usage: backfill_bulk.sh SEGD_BIN SOURCE_DIR
set -euo pipefail
segd=$1
tmp=$(mktemp -d /tmp/segd-bulk-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now=1800000000

for seed in 1 2 3; do
/usr/bin/python3 - "$tmp" $now $seed <<'PY'
import gzip, json, random, sys
tmp, now, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
users = ["u%05d" % i for i in range(400)] + ["ü-%d" % i for i in range(20)] + ["hot"]
lines = []
for _ in range(6000):
    u = rnd.choice(users)
    ts = (now - rnd.randint(0, 40 * 86400)) * 1000 + rnd.choice([0, 0, rnd.randint(0, 999)])
    r = rnd.random()
    if r < 0.03:
        ev = {"user_id": u, "ts_ms": ts, "op": "ERASE_USER", "segments": []}
    else:
        op = "REMOVE" if r < 0.15 else "UPSERT"
        segs = []
        for _ in range(rnd.randint(1, 12)):
            s = {"segment_id": rnd.randint(0, 60), "ttl_s": rnd.choice([60, 3600, 86400, 7 * 86400, 60 * 86400])}
            if rnd.random() < 0.3:
                s["flags"] = rnd.randint(0, 7)
                s["partner_id"] = rnd.randint(0, 3)
            segs.append(s)
        ev = {"user_id": u, "ts_ms": ts, "op": op, "segments": segs}
    lines.append(json.dumps(ev, ensure_ascii=False))
    if rnd.random() < 0.12:  # a hot user: hundreds of events, joined in steps of 64
        hot = dict(ev, user_id="hot", ts_ms=ts + 1)
        if hot["op"] == "ERASE_USER" and rnd.random() < 0.8:
            hot["op"], hot["segments"] = "UPSERT", [{"segment_id": rnd.randint(0, 60), "ttl_s": 86400}]
        lines.append(json.dumps(hot, ensure_ascii=False))
    if rnd.random() < 0.1:  # duplicates, also of the same event far apart
        lines.append(rnd.choice(lines))
rnd.shuffle(lines)
half = len(lines) // 2
open(f"{tmp}/a.json", "w").write("\n".join(lines[:half]) + "\n")
with gzip.open(f"{tmp}/b.json.gz", "wt") as f:
    f.write("\n".join(lines[half:]) + "\n")
open(f"{tmp}/users", "w").write("\n".join(users) + "\n")
PY
rm -rf "$tmp"/merge "$tmp"/bulk "$tmp"/mixed
retire() { # one retirement before the load, one after
  "$segd" segments retire --db "$1" --before-ms $(( (now - 10 * 86400) * 1000 )) 5 > /dev/null
}
retire "$tmp/merge"; retire "$tmp/bulk"; retire "$tmp/mixed"
"$segd" backfill --db "$tmp/merge" --now $now "$tmp/a.json" "$tmp/b.json.gz" > "$tmp/merge.out" ||
  fail "seed $seed: merge path exit $?"
"$segd" backfill --bulk --memory-mb 64 --db "$tmp/bulk" --now $now "$tmp/a.json" "$tmp/b.json.gz" \
  > "$tmp/bulk.out" 2> "$tmp/bulk.err" || fail "seed $seed: bulk exit $?: $(cat "$tmp/bulk.err")"
# the mixed store holds half of the input first: present users take the merge path
"$segd" backfill --db "$tmp/mixed" --now $now "$tmp/a.json" > /dev/null || fail "mixed: first half"
"$segd" backfill --bulk --memory-mb 64 --db "$tmp/mixed" --now $now "$tmp/b.json.gz" \
  > "$tmp/mixed.out" 2> "$tmp/mixed.err" || fail "seed $seed: mixed bulk exit $?: $(cat "$tmp/mixed.err")"
for db in merge bulk mixed; do
  "$segd" segments retire --db "$tmp/$db" --before-ms $(( (now - 3 * 86400) * 1000 )) 17 > /dev/null
done
first=1
for t in $now $((now + 3600)) $((now + 8 * 86400)) $((now + 61 * 86400)); do
  mapfile -t ids < "$tmp/users"
  "$segd" get --db "$tmp/merge" --now $t --json "${ids[@]}" > "$tmp/merge.get"
  for db in bulk mixed; do
    "$segd" get --db "$tmp/$db" --now $t --json "${ids[@]}" > "$tmp/$db.get"
    cmp -s "$tmp/merge.get" "$tmp/$db.get" ||
      fail "seed $seed: $db != merge path at now=$t: $(diff "$tmp/merge.get" "$tmp/$db.get" | head -4)"
  done
  if [ $first = 1 ]; then
    live=$(/usr/bin/python3 -c "import json,sys;print(sum(len(json.loads(l)['segments']) for l in open(sys.argv[1])))" "$tmp/merge.get")
    [ "$live" -gt 1000 ] || fail "seed $seed: only $live live segments: the comparison proves little"
    first=0
  fi
done
outbox() { "$segd" stats --db "$1" | sed -n 's/^unpublished outbox *\([0-9]*\) entries.*/\1/p'; }
[ "$(outbox "$tmp/bulk")" -gt 0 ] || fail "seed $seed: the bulk load wrote no outbox entries"
echo "seed $seed: bulk == mixed == merge path for $(wc -l < "$tmp/users") users at 4 clocks ($live live segments now)"
done
rm -rf "$tmp/nochg"
"$segd" backfill --bulk --no-changes --db "$tmp/nochg" --now $now "$tmp/a.json" > /dev/null || fail "--no-changes"
[ "$(outbox "$tmp/nochg")" = 0 ] || fail "--no-changes wrote outbox entries"
echo "backfill_bulk: ok"
