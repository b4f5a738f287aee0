#!/usr/bin/python3
"""Chaos trials for segd (issues 9 and 21): a deterministic workload of
UPSERTs, REMOVEs and ERASE_USERs with colliding segment ids and equal
timestamps goes through real `segd run` processes while faults are injected,
and at the end three readers must equal an independent model of
docs/design.md §3:

  * the store (`segd get --json` for every user),
  * an edge cache loaded from segd run's latest periodic snapshot (its units)
    and tailing the change topic from the units' positions,
  * an edge cache joining the whole change topic from its beginning,

and nothing may be dead-lettered. "Caught up" is waited for on the group's
committed offsets (librdkafka committed()) and the store's offsets, both
equal to the input's end offsets, and an empty outbox.

Trial kinds:
  kill       SIGKILL `segd run` at random moments (ingest, publish, snapshot
             export and flushes all run concurrently), restart, repeat.
  rebalance  two `segd run` members of one group with changes.max.outbox = 1
             (back-pressure on almost every batch); the second one joins
             (waited for: it was assigned partitions), then leaves (SIGTERM
             or SIGKILL), and rejoins. At the end the first member holds every
             partition and its store (which re-reads from its own stored
             offsets what the other consumed) must equal the model.
  broker     (--kafka real, a cluster of its own) one `segd run` while the
             events are produced, during ingest and publish, each fault drawn
             from (--broker-fault, default any):
               leader-kill      the leader broker of a random partition of the
                                input or the change topic SIGKILLed, restarted
               leader-stop      that leader SIGSTOPped for 2-8 s, SIGCONTed
               two-down         that leader and one more node SIGKILLed (or
                                both SIGSTOPped) for 3-8 s: one replica left,
                                below min.insync.replicas = 2, and no KRaft
                                quorum: produce and the change publisher
                                must stall, not lose, and resume
               controller-kill  the active KRaft controller (the metadata
                                quorum's leader, `kafka.sh controller`)
                                SIGKILLed, restarted
             (two-down-kill and two-down-stop: two-down with that signal only)
             Notes beside the verdict: for two-down, the input's and the change
             publisher's acks while the nodes were down (0 when writes stall).

A trial is EXACT, a MISMATCH (users a complete read found different), a
HARNESS FAILURE (a check could not be made: an unreachable cache, a process
that exited, a member that never joined, a wait that ran out), or a SEGD
FAULT beside its data verdict (the member applied and published everything
but the group's committed offsets stayed below the end for 30 s: commits
lost in a rebalance and not re-sent). Only EXACT passes.

--self-test breaks each check on purpose (CHAOS_BREAK, tests/trials/chaoslib.py) in
short trials and fails unless every broken trial is reported as the failure
it must be: a store and cache answer altered (MISMATCH of one user in each
of the three columns), the cache check pointed at a closed port, the wait
pointed at a group nobody commits to, member b's metrics port taken, b
SIGKILLed before it joins, b SIGSTOPped so it never joins (HARNESS FAILURE).

--kafka mock (default): a `segd dev-broker` per trial. --kafka real: the
Apache Kafka cluster in --cluster-dir (default $KAFKA_CLUSTER_DIR, else
/tmp/kafka-chaos): started there (scripts/kafka.sh) and stopped at the end
when none runs, else shared (uniquely named topics and groups, its brokers
never signalled: the broker kind needs a cluster of its own, started here or
named --own-cluster). Topics: RF 3,
min.insync.replicas 2.

usage: chaos.py SEGD_BIN [--trials N] [--kind kill|rebalance|broker|both]
                [--kafka mock|real] [--cluster-dir DIR] [--users U]
                [--events E] [--seed S] [--first I] [--kills K] [--self-test]
                [--own-cluster] [--broker-fault F] [--keep]
Trial i (from --first) has seed S*1000+i: one trial is rerun alone with
--seed S --first i --trials 1.
Prints one line per trial and a summary; exit 0 iff every trial was exact
(with --self-test: iff every broken check failed as it must).
"""
import argparse, json, os, random, shutil, signal, sys, tempfile, threading, time

from chaoslib import HarnessError, RealCluster, Trial, model, workload


def trial_kill(t, rnd, events, kills):
    t.produce(events)
    db = os.path.join(t.dir, "db")
    for _ in range(kills):
        p = t.run(db, "a")
        time.sleep(rnd.uniform(0.3, 2.5))
        t.alive(p, "a", "before its SIGKILL")
        p.send_signal(signal.SIGKILL)
        p.wait()
        t.fault("sigkill")
    p = t.run(db, "a")
    ends = t.wait_caught_up({"a": p}, "a")
    time.sleep(1.5)  # one more periodic snapshot after the last batch
    t.stop(p, "a")
    t.check_offsets(db, ends)
    return db, os.path.join(t.dir, "snap-a")


def trial_rebalance(t, rnd, events, kills):
    t.produce(events)
    dba, dbb = os.path.join(t.dir, "dba"), os.path.join(t.dir, "dbb")
    bp = {"SEGD_CHANGES_MAX_OUTBOX": "1"}
    a = t.run(dba, "a", bp)
    t.wait_joined(a, "a")
    time.sleep(rnd.uniform(0.2, 1.0))
    for _ in range(kills):
        b = t.run(dbb, "b", bp)
        if os.environ.get("CHAOS_BREAK", "") == "kill-b":
            b.send_signal(signal.SIGKILL)
        if os.environ.get("CHAOS_BREAK", "") == "stop-b":
            b.send_signal(signal.SIGSTOP)
        t.wait_joined(b, "b", 6 if os.environ.get("CHAOS_BREAK") else 90)
        t.fault("rebalance: join")
        if t.backlog(("a", "b")):  # the group still had input or deltas: back-pressure held
            t.fault("rebalance: join with a backlog")
        time.sleep(rnd.uniform(0.5, 2.5))
        t.alive(a, "a", "while b was a member")
        if rnd.random() < 0.5:
            t.alive(b, "b", "before its SIGKILL")
            b.send_signal(signal.SIGKILL)
            b.wait()
            t.fault("rebalance: SIGKILL")
        else:
            t.stop(b, "b")
            t.fault("rebalance: leave")
        time.sleep(rnd.uniform(0.2, 1.0))
    # a has every partition again and resumes each from its own stored
    # offsets: its store must hold everything
    ends = t.wait_caught_up({"a": a}, "a")
    time.sleep(1.5)
    t.stop(a, "a")
    t.check_offsets(dba, ends)
    return dba, os.path.join(t.dir, "snap-a")


BROKER_FAULTS = ("leader-kill", "leader-stop", "two-down", "controller-kill")
# --broker-fault only: two-down with its signal fixed
TWO_DOWN = {"two-down-kill": "SIGKILL", "two-down-stop": "SIGSTOP"}


def trial_broker(t, rnd, events, kills):
    cl = t.cluster
    if cl is None or not cl.owned:
        raise HarnessError("the broker kind needs --kafka real and a cluster of its own")
    wait_isr(t, 300)  # an earlier trial's broker may still be catching up
    db = os.path.join(t.dir, "db")
    a = t.run(db, "a", {"SEGD_CHANGES_MAX_OUTBOX": "200"})
    t.wait_joined(a, "a", 90)
    err, stalls = [], []

    def producing():  # the events spread over about 8 s
        try:
            step = max(1, len(events) // 32)
            for i in range(0, len(events), step):
                t0 = time.time()
                t.produce(events[i:i + step])
                stalls.append(time.time() - t0)
                time.sleep(0.25)
        except Exception as e:  # noqa: BLE001 (raised below)
            err.append(e)
    th = threading.Thread(target=producing)
    th.start()
    nodes = [str(n) for n in range(1, cl.nodes + 1)]
    kinds = BROKER_FAULTS if t.args.broker_fault == "any" else (t.args.broker_fault,)
    try:
        for _ in range(kills):
            time.sleep(rnd.uniform(0.5, 3.0))
            topic = rnd.choice([t.topic, t.changes])
            part = rnd.randrange(t.partitions)
            kind = rnd.choice(kinds)
            if kind in ("leader-kill", "leader-stop"):
                node = cl.must("leader", topic, str(part))
                if kind == "leader-kill":
                    cl.must("kill", node)
                    t.fault("broker SIGKILL")
                    time.sleep(rnd.uniform(1.0, 5.0))
                    cl.must("restart", node)
                else:
                    cl.must("pause", node)
                    t.fault("broker SIGSTOP")
                    time.sleep(rnd.uniform(2.0, 8.0))
                    cl.must("resume", node)
            elif kind.startswith("two-down"):
                # the leader of a partition and one more node: one replica
                # is left, below min.insync.replicas = 2, and two of the
                # three KRaft voters are gone: no write can complete until
                # they are back. Produce and the change publisher must
                # stall (not lose) and resume.
                lead = cl.must("leader", topic, str(part))
                other = rnd.choice([n for n in nodes if n != lead])
                busy = len(t.acked_at) < len(events)  # input not all written yet
                before = metrics_or_empty(t)
                sig = "SIGKILL" if rnd.random() < 0.5 else "SIGSTOP"
                sig = TWO_DOWN.get(kind, sig)
                for n in (lead, other):
                    cl.must("kill" if sig == "SIGKILL" else "pause", n)
                t.fault("broker two down (%s)" % sig)
                if busy:
                    t.fault("broker two down: input not all written")
                down = rnd.uniform(3.0, 8.0)
                t_down = time.time()
                time.sleep(1.0)  # acks of writes replicated before the fault may still come
                during = metrics_or_empty(t)
                peak = watch_stall(t, down - 1.0)
                t_up = time.time()
                after = metrics_or_empty(t)
                for n in (lead, other):
                    cl.must("restart" if sig == "SIGKILL" else "resume", n)
                t.alive(a, "a", "after a broker fault")
                wait_isr(t, 300)

                def delta(m0, m1, k):
                    return int(m1.get(k, 0) - m0.get(k, 0)) if m0 and m1 else -1
                t.stall_notes.append(
                    "two down (%s %s+%s, %.1f s): input writes acked while down %d (%d from "
                    "their restart until every replica was in sync), outbox peak %d while "
                    "down, deltas acked while down %d, publish retries +%d until every "
                    "replica was back" %
                    (sig, lead, other, down,
                     sum(1 for x in t.acked_at if t_down + 1.0 <= x <= t_up),
                     sum(1 for x in t.acked_at if x > t_up), peak,
                     delta(during, after, "segd_outbox_acked_entries_total"),
                     delta(before, metrics_or_empty(t), "segd_publish_retries_total")))
            else:  # controller-kill: the active KRaft controller (a broker too)
                node = cl.must("controller", timeout=180)
                cl.must("kill", node)
                t.fault("controller SIGKILL")
                time.sleep(rnd.uniform(1.0, 5.0))
                cl.must("restart", node)
                t.stall_notes.append("controller %s killed" % node)
            t.alive(a, "a", "after a broker fault")
            wait_isr(t, 300)  # the next fault must not take a partition below 2 replicas
    finally:
        th.join()
    if err:
        raise HarnessError("produce during broker faults: %s" % err[0])
    if stalls:
        t.stall_notes.append("longest produce chunk %.1f s" % max(stalls))
    ends = t.wait_caught_up({"a": a}, "a")
    time.sleep(1.5)
    t.stop(a, "a")
    t.check_offsets(db, ends)
    return db, os.path.join(t.dir, "snap-a")


def metrics_or_empty(t):
    """Member a's /metrics for a note beside the verdict (not a check)."""
    try:
        return t.metrics("a")
    except Exception:  # noqa: BLE001 (a note, not a check)
        return {}


def watch_stall(t, seconds):
    """Sleeps `seconds` while sampling member a's outbox: its peak."""
    peak, deadline = 0, time.time() + seconds
    while time.time() < deadline:
        peak = max(peak, int(metrics_or_empty(t).get("segd_outbox_entries", 0)))
        time.sleep(0.5)
    return peak


def wait_isr(t, seconds):
    """Until every partition of the trial's topics has 3 in-sync replicas."""
    deadline = time.time() + seconds
    pending = [(tp, p) for tp in t.kafka.topics for p in range(t.partitions)]
    while pending and time.time() < deadline:
        out = t.cluster.sh("isr", pending[0][0], str(pending[0][1]))
        if out.returncode == 0 and len(out.stdout.strip().split(",")) == 3:
            pending.pop(0)
        else:
            time.sleep(0.5)
    if pending:
        raise HarnessError("%s [%d] not back to 3 in-sync replicas in %d s" %
                           (pending[0][0], pending[0][1], seconds))


KINDS = {"kill": trial_kill, "rebalance": trial_rebalance, "broker": trial_broker}


def one_trial(args, work, cluster, kind, seed, label, after=None):
    """Runs a trial: (verdict, details, trial). after(t, want, snap), when
    given, runs once the verdict is known, before the trial's processes and
    topics go."""
    rnd = random.Random(seed)
    events = workload(seed, args.users, args.events)
    want = model(events)
    prefix = "" if cluster is None else "chaos-%d-%s-%s-" % (os.getpid(), label, kind)
    t = Trial(args.segd, work, args, kind, cluster, prefix)
    t.stall_notes = []
    try:
        t.broker()
        db, snap = KINDS[kind](t, rnd, events, args.kills)
        diffs = {"store": t.store_diff(db, want)}
        diffs.update(t.check_caches(want, snap))
        dlq = t.dlq_count()
        ok = not any(diffs.values()) and dlq == 0
        verdict = "EXACT" if ok else "MISMATCH"
        if t.segd_faults:
            verdict = "SEGD FAULT (data %s)" % verdict
        detail = "store diff %d users, snapshot+tail diff %d, whole-topic diff %d, dlq %d" % (
            len(diffs["store"]), len(diffs["snapshot+tail"]), len(diffs["whole topic"]), dlq)
        if not ok:
            detail += " e.g. " + str([u for d in diffs.values() for u in d][:3])
        if t.segd_faults:
            detail += "; " + "; ".join(t.segd_faults)
        if t.stall_notes:
            detail += "; " + "; ".join(t.stall_notes)
        t.diffs = diffs
        if after:
            after(t, want, snap)
    except HarnessError as e:
        verdict, detail = "HARNESS FAILURE", str(e)
    finally:
        t.stop_all()
    return verdict, detail, t


def run_trials(args, work, cluster):
    kinds = ["kill", "rebalance"] if args.kind == "both" else [args.kind]
    totals, exact, runs, data_exact, harness, faulty = {}, 0, 0, 0, 0, 0
    for i in range(args.first, args.first + args.trials):
        for kind in kinds:
            seed = args.seed * 1000 + i
            t0 = time.time()
            verdict, detail, t = one_trial(args, work, cluster, kind, seed, str(i))
            runs += 1
            exact += verdict == "EXACT"
            data_exact += verdict in ("EXACT", "SEGD FAULT (data EXACT)")
            harness += verdict == "HARNESS FAILURE"
            faulty += verdict.startswith("SEGD FAULT")
            for k, v in t.faults.items():
                totals[k] = totals.get(k, 0) + v
            print("trial %d %s seed=%d: %s in %.0f s (faults %s; %s)%s" %
                  (i, kind, seed, verdict, time.time() - t0, json.dumps(t.faults), detail,
                   "" if verdict == "EXACT" else " dir=" + t.dir), flush=True)
            if verdict == "EXACT" and not args.keep:
                shutil.rmtree(t.dir, ignore_errors=True)
    print("chaos: %d of %d trials exact (data exact in %d, harness failures %d, segd faults "
          "%d); faults injected: %s" % (exact, runs, data_exact, harness,
                                        faulty, json.dumps(totals)))
    return exact == runs


# (CHAOS_BREAK, kind, the verdict it must give, words its detail must hold);
# kind "after": the check re-run on the first trial's final state, with the
# same functions its trial calls (a HarnessError is what fails a trial)
SELF_TESTS = [
    ("store-answer,cache-answer", "kill", "MISMATCH",
     "store diff 1 users, snapshot+tail diff 1, whole-topic diff 1,"),
    ("cache-port", "after", "HARNESS FAILURE", "never answered every user"),
    ("wait-group", "after", "HARNESS FAILURE", "no-such-group committed"),
    ("metrics-port", "rebalance", "HARNESS FAILURE", "cannot listen"),
    ("kill-b", "rebalance", "HARNESS FAILURE", "segd run b exited (-9) before it joined"),
    ("stop-b", "rebalance", "HARNESS FAILURE", "member b never joined"),
]


def rerun_broken(results):
    """The cache check and the caught-up wait of a finished trial, each
    broken: results[break] = (verdict, detail)."""
    def after(t, want, snap):
        checks = {"cache-port": lambda: t.check_caches(want, snap),
                  "wait-group": lambda: t.wait_caught_up({}, "a")}
        t.cache_s, t.wait_s = 6, 6  # waits that must run out
        for brk, check in checks.items():
            os.environ["CHAOS_BREAK"] = brk
            try:
                check()
                results[brk] = ("NO FAILURE", "the broken check passed")
            except HarnessError as e:
                results[brk] = ("HARNESS FAILURE", str(e))
            finally:
                os.environ.pop("CHAOS_BREAK", None)
    return after


def self_test(args, work, cluster):
    """Every broken check must fail its trial, as the failure it is."""
    proven, after = 0, {}
    for i, (brk, kind, verdict, word) in enumerate(SELF_TESTS):
        t0 = time.time()
        if kind == "after":
            got, detail = after.get(brk, ("NOT RUN", "the first trial did not reach its checks"))
        else:
            os.environ["CHAOS_BREAK"] = brk
            args.cache_s = 12 if "answer" in brk else 90  # an altered answer never converges
            args.wait_s = 180
            args.kills = 1 if kind == "rebalance" else 0  # b must start; a kill trial need not kill
            try:
                got, detail, t = one_trial(args, work, cluster, kind, args.seed * 1000 + i,
                                           "self%d" % i, rerun_broken(after) if i == 0 else None)
            finally:
                os.environ.pop("CHAOS_BREAK", None)
            if not args.keep:
                shutil.rmtree(t.dir, ignore_errors=True)
        ok = got == verdict and word in detail
        proven += ok
        print("self-test %s (%s): %s in %.0f s: reported %s: %s" %
              (brk, kind, "proven" if ok else "NOT PROVEN", time.time() - t0, got, detail),
              flush=True)
    print("self-test: %d of %d broken checks failed their trial as they must" %
          (proven, len(SELF_TESTS)))
    return proven == len(SELF_TESTS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("segd")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--kind", default="both", choices=["kill", "rebalance", "broker", "both"])
    ap.add_argument("--kafka", default="mock", choices=["mock", "real"])
    ap.add_argument("--cluster-dir",
                    default=os.environ.get("KAFKA_CLUSTER_DIR") or "/tmp/kafka-chaos")
    ap.add_argument("--own-cluster", action="store_true",
                    help="the cluster running in --cluster-dir is this run's alone: its "
                    "brokers may be signalled (else only one started here)")
    ap.add_argument("--users", type=int, default=150)
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0,
                    help="index of the first trial (trial i has seed SEED*1000+i)")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--broker-fault", default="any", choices=("any",) + BROKER_FAULTS + tuple(TWO_DOWN),
                    help="the broker kind's faults: one of them, or any (each fault drawn "
                    "at random)")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep trial directories")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="segd-chaos-")
    cluster = None
    try:
        if args.kafka == "real":
            cluster = RealCluster(args.cluster_dir, args.own_cluster)
            print("chaos: Apache Kafka in %s (%s, %d nodes)" %
                  (args.cluster_dir, "started here" if cluster.started else
                   "ours" if cluster.owned else "shared",
                   cluster.nodes), flush=True)
        ok = self_test(args, work, cluster) if args.self_test else \
            run_trials(args, work, cluster)
    except HarnessError as e:
        print("chaos: HARNESS FAILURE: %s" % e)
        ok = False
    finally:
        if cluster:
            cluster.stop()
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
