#!/usr/bin/python3
"""Chaos trials for segd (issue 9): a deterministic workload of UPSERTs,
REMOVEs and ERASE_USERs with colliding segment ids and equal timestamps goes
through real `segd run` processes while faults are injected, and at the end
three readers must equal an independent model of docs/design.md §3:

  * the store (`segd get --json` for every user),
  * an edge cache loaded from segd run's latest periodic snapshot (its units)
    and tailing the change topic from the units' minimum positions,
  * an edge cache joining the whole change topic from its beginning.

Trial kinds:
  kill       SIGKILL `segd run` at random moments (ingest, publish, snapshot
             export and flushes all run concurrently), restart, repeat.
  rebalance  two `segd run` instances in one group with changes.max.outbox = 1
             (back-pressure on almost every batch) while the second one
             joins, leaves (SIGTERM or SIGKILL) and rejoins: rebalances during
             back-pressure. Both publish to one change topic; the caches must
             equal the model (each store holds only what it consumed).

usage: chaos.py SEGD_BIN --trials N [--kind kill|rebalance|both] [--users U]
                [--events E] [--seed S] [--kills K]
Prints one line per trial and a summary; exit 0 iff every trial was exact.
"""
import argparse, json, os, random, shutil, signal, subprocess, sys, tempfile, time

from chaoslib import Trial, model, wait_store, workload


def trial_kill(t, events, want, rnd, kills):
    db = os.path.join(t.dir, "db")
    for _ in range(kills):
        p = t.run(db, "a")
        time.sleep(rnd.uniform(0.3, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        t.fault("sigkill")
    p = t.run(db, "a")
    ok = wait_store(t, db, want, time.time() + 120)
    time.sleep(1.5)  # one more periodic snapshot after the last batch
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    store_diff = [] if ok else sorted(u for u, s in (t.get_all(db, want) or {}).items()
                                      if want.get(u) != s) or ["(store unreadable)"]
    return store_diff, os.path.join(t.dir, "snap-a")


def trial_rebalance(t, events, want, rnd, kills):
    dba, dbb = os.path.join(t.dir, "dba"), os.path.join(t.dir, "dbb")
    bp = {"SEGD_CHANGES_MAX_OUTBOX": "1"}
    a = t.run(dba, "a", bp)
    time.sleep(rnd.uniform(0.5, 1.5))
    for _ in range(kills):
        b = t.run(dbb, "b", bp)
        t.fault("rebalance: join")
        time.sleep(rnd.uniform(0.8, 3.0))
        if rnd.random() < 0.5:
            b.send_signal(signal.SIGKILL)
            t.fault("rebalance: SIGKILL")
        else:
            b.send_signal(signal.SIGTERM)
            t.fault("rebalance: leave")
        b.wait(timeout=60)
        time.sleep(rnd.uniform(0.2, 1.0))
    # let a consume everything that is left, then stop it cleanly
    deadline = time.time() + 120
    while time.time() < deadline:
        lag = subprocess.run([t.segd, "stats", "--db", dba, "--json"], capture_output=True,
                             text=True)
        time.sleep(2)
        again = subprocess.run([t.segd, "stats", "--db", dba, "--json"], capture_output=True,
                               text=True)
        if lag.stdout == again.stdout and '"outbox_entries":0' in again.stdout:
            break
    a.send_signal(signal.SIGTERM)
    a.wait(timeout=60)
    # each store holds only what its instance consumed, and one instance's
    # snapshot positions do not cover the other's deltas (partition-aligned
    # change streams are issue 11): here the whole change topic is the proof
    return [], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("segd")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--kind", default="both")
    ap.add_argument("--users", type=int, default=150)
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep trial directories")
    args = ap.parse_args()
    kinds = ["kill", "rebalance"] if args.kind == "both" else [args.kind]
    work = tempfile.mkdtemp(prefix="segd-chaos-")
    totals, exact, runs = {}, 0, 0
    for i in range(args.trials):
        for kind in kinds:
            seed = args.seed * 1000 + i
            rnd = random.Random(seed)
            events = workload(seed, args.users, args.events)
            want = model(events)
            t = Trial(args.segd, work, args, kind)
            t0 = time.time()
            try:
                t.broker()
                t.produce(events)
                fn = trial_kill if kind == "kill" else trial_rebalance
                store_diff, snap = fn(t, events, want, rnd, args.kills)
                caches = t.check_caches(want, snap)
                dlq = t.dlq_count()
            finally:
                t.stop_all()
            ok = not store_diff and not any(caches.values()) and dlq == 0
            runs += 1
            exact += ok
            for k, v in t.faults.items():
                totals[k] = totals.get(k, 0) + v
            print("trial %d %s seed=%d: %s in %.0f s (faults %s; store diff %d users, "
                  "snapshot+tail diff %d, whole-topic diff %d, dlq %d)%s" %
                  (i, kind, seed, "EXACT" if ok else "NOT EXACT", time.time() - t0,
                   json.dumps(t.faults), len(store_diff), len(caches["snapshot+tail"]),
                   len(caches["whole topic"]), dlq,
                   "" if ok else " dir=" + t.dir + " e.g. " +
                   str((store_diff or caches["snapshot+tail"] or caches["whole topic"])[:3])),
                  flush=True)
            if ok and not args.keep:
                shutil.rmtree(t.dir, ignore_errors=True)
    print("chaos: %d of %d trials exact; faults injected: %s" % (exact, runs, json.dumps(totals)))
    if exact == runs and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if exact == runs else 1)


if __name__ == "__main__":
    main()
