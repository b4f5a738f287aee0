#!/usr/bin/python3
"""The fleet proof of issue 11: three `segd run` instances in one group on a
12-partition dev broker, each with its own store, exporting per-partition
snapshot units to one destination DEST and restoring from it on assignment
(docs/design.md §6, §7), while a random workload (tests/trials/chaoslib.py: UPSERTs,
REMOVEs and ERASE_USERs with colliding ids and equal timestamps, plus exact
duplicates) is produced keyed by user id with murmur2_random, as segd routes:

  1. a starts alone (it takes every partition), then b and c join, all on
     empty stores (nothing to restore: they replay): 1 -> 3 members;
  2. the fleet crashes: all three SIGKILLed one after the other, each store
     gets a segment retirement while stopped (`segd segments retire` is
     offline; a store-wide marker every store of the fleet needs, §3), all
     restart with their stores;
  3. b is SIGKILLed and replaced by b2 on an EMPTY store: it must restore
     its partitions from the units ("restored p=");
  4. a and c are SIGKILLed, a unit of a partition b2 never held is
     corrupted, c is replaced by c2 on an empty store (restore.retries = 2
     everywhere): whoever gets the partition must refuse the unit ("failed
     (attempt 2)") and replay it (restore.fallback = replay); then a
     restarts with its store;
  5. everything catches up (every unit carries its partition's end offset);
  6. 3 -> 1 members: all but a leave (SIGTERM, exit 0); a alone takes every
     partition back and must catch up (the group's committed offsets at the
     end, lag 0 everywhere, an empty outbox; commits stuck below the end
     for 30 s after a is done are a SEGD FAULT, reported beside the data's
     verdict), then stops (exit 0) with its store at every end offset.

Every instance runs the revocation sweep with sweep.after.s = 2, so
partitions that move away are swept (offsets deleted, users deleted) and
partitions that come back half swept are purged before they restore.

Then, for every user, every final store whose offset for the user's
partition equals its end offset (the owner's, at least) must equal the
model, and so must a `segd cache` loaded from the units in DEST tailing the
change topic. Units must always carry their partition's input offset.

usage: fleet.py SEGD_BIN [--trials N] [--users U] [--events E] [--seed S] [--keep]
                [--kafka mock|real] [--cluster-dir DIR]
--kafka mock (default): a `segd dev-broker` per trial. --kafka real: the
Apache Kafka cluster in --cluster-dir (scripts/kafka.sh; started there and
stopped at the end when none runs, else shared), each trial's topics made
there (auto-create is off) with a unique prefix: RF 3, min.insync.replicas 2.
Prints one line per trial: EXACT, MISMATCH (users a complete read found
different), SEGD FAULT (data EXACT|MISMATCH) (the group's commits stuck below
the end), FAILED (segd did not take a step it must) or HARNESS FAILURE (a
check could not be made: an unreachable cache, a store that cannot be read,
a process that exited); exit 0 iff every trial was exact. Every member has
its own metrics port (tests/trials/chaoslib.py).
"""
import argparse, glob, json, os, random, re, shutil, signal, subprocess, sys, tempfile
import threading, time

from confluent_kafka import Consumer, TopicPartition

from chaoslib import NOW_S, HarnessError, RealCluster, Trial, model, workload

PARTITIONS = 12
RETIRED_IDS = (3, 7)
RETIRED_BEFORE_MS = (NOW_S - 86400) * 1000  # half of the workload's timestamps
PRODUCER = {"partitioner": "murmur2_random"}  # segd's input.partitioner default


class Failed(Exception):
    pass


def with_duplicates(rnd, events, share=0.1):
    """The events, and a share of them again (exact duplicates), shuffled."""
    out = list(events) + [rnd.choice(events) for _ in range(int(len(events) * share))]
    rnd.shuffle(out)
    return out


class Fleet:
    def __init__(self, t, rnd):
        self.t, self.rnd = t, rnd
        self.dest = os.path.join(t.dir, "dest")
        self.units = os.path.join(self.dest, t.topic)
        self.live = {}  # name -> (Popen, db)
        self.producing = None
        self.stopping = False
        self.t0, self.times = time.time(), []

    def phase(self, name):
        """Notes how long the phase that ends took (printed per trial)."""
        now = time.time()
        self.times.append("%s %.0fs" % (name, now - self.t0))
        self.t0 = now

    def start(self, name, db, extra=None):
        env = {"SEGD_RESTORE_FROM": self.dest, "SEGD_SNAPSHOT_INTERVAL": "1",
               "SEGD_RESTORE_RETRIES": "2", "SEGD_SWEEP_AFTER_S": "2"}
        env.update(extra or {})
        p = self.t.run(db, name, env, group="fleet", snapshot_to=self.dest)
        self.live[name] = (p, db)

    def kill(self, name):
        p, db = self.live.pop(name)
        self.t.alive(p, name, "before its SIGKILL")  # an exited member is no kill
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.t.fault("sigkill")
        return db

    def log(self, name):
        try:
            with open(os.path.join(self.t.dir, "run-%s.log.err" % name)) as f:
                return f.read()
        except OSError:
            return ""

    def produce_in_background(self, events, seconds):
        """Produces the events spread over about `seconds` while the caller
        injects faults."""
        def body():
            chunks = max(1, int(seconds / 0.25))
            step = (len(events) + chunks - 1) // chunks
            try:
                for i in range(0, len(events), step):
                    if self.stopping:
                        return
                    self.t.produce(events[i:i + step], PRODUCER)
                    time.sleep(0.25)
            except Exception as e:  # noqa: BLE001 (reported by wait_produced)
                self.produce_error = e
        self.produce_error = None
        self.producing = threading.Thread(target=body)
        self.producing.start()

    def wait_produced(self):
        self.producing.join()
        if self.produce_error:
            raise Failed("produce: %s" % self.produce_error)

    def manifests(self):
        out = {}
        for f in glob.glob(os.path.join(self.units, "p-*", "manifest.json")):
            try:
                with open(f) as fh:
                    m = json.load(fh)
            except (OSError, ValueError):  # being replaced
                continue
            out[m["partition"]] = m
        return out

    def wait_for(self, what, cond, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            for name, (p, _) in self.live.items():
                if p.poll() is not None:
                    raise Failed("%s exited (%d) while waiting for %s" % (name, p.returncode,
                                                                         what))
            if cond():
                return
            time.sleep(0.25)
        raise Failed("timed out waiting for " + what)


def unit_offset(m, topic):
    for i in m.get("input_offsets", []):
        if i.get("topic") == topic and i.get("partition") == m["partition"]:
            return i["next_offset"]
    return None


def check_units_have_offsets(fl):
    """A unit without its partition's input offset (a partition exported
    while it was still being restored) would hide the partition's data."""
    bad = [p for p, m in fl.manifests().items() if unit_offset(m, fl.t.topic) is None]
    if bad:
        raise Failed("units without their input offset: %s" % bad)


def end_offsets(t):
    """The input's end offsets (a broker error retried for 60 s)."""
    return {p: hi for p, (_, hi) in t.end_offsets().items()}


def partition_of(segd, brokers, topic, users):
    """user -> partition, as segd computes it (`segd owner`)."""
    out = subprocess.run([segd, "owner", "--brokers", brokers, "--topic", topic] +
                         sorted(users), capture_output=True, text=True, check=True)
    parts = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(\S+) partition=(\d+)", line)
        if m:
            parts[m.group(1)] = int(m.group(2))
    if set(parts) != set(users):
        raise Failed("segd owner answered for %d of %d users" % (len(parts), len(users)))
    return parts


def corrupt_one(fl, p):
    files = glob.glob(os.path.join(fl.units, "p-%05d" % p, "*.avro"))
    if not files:
        raise Failed("unit %d has no file to corrupt" % p)
    with open(files[0], "r+b") as f:
        b = bytearray(f.read())
        b[len(b) // 2] ^= 0xFF
        f.seek(0)
        f.write(b)


def trial(t, args, seed):
    rnd = random.Random(seed)
    phases = [with_duplicates(rnd, workload(seed * 10 + i, args.users, args.events))
              for i in range(4)]
    retired = {sid: RETIRED_BEFORE_MS for sid in RETIRED_IDS}
    want = model([ev for ph in phases for ev in ph], retired)
    t.broker(PARTITIONS)
    fl = t.fleet = Fleet(t, rnd)
    try:
        return phases_and_checks(t, fl, rnd, phases, want)
    finally:  # the producer ends before the broker stops
        fl.stopping = True
        if fl.producing:
            fl.producing.join()


def phases_and_checks(t, fl, rnd, phases, want):
    dbs = {n: os.path.join(t.dir, "db-" + n) for n in ("a", "b", "c", "b2", "c2")}

    # 1. scale 1 -> 3: a alone on an empty store takes every partition, then
    # b and c join on empty stores while the events are produced (nothing to
    # restore yet: they replay)
    fl.start("a", dbs["a"])
    t.wait_joined(fl.live["a"][0], "a", 90)
    fl.produce_in_background(phases[0], 2)
    time.sleep(rnd.uniform(0.3, 1.5))
    for n in ("b", "c"):
        fl.start(n, dbs[n])
    fl.wait_produced()
    fl.phase("start")

    # 2. the fleet crashes: all three SIGKILLed, the retirement goes to
    # every store while it is stopped (a store-wide marker, §3: each store
    # of the fleet needs it), all restart with their stores
    fl.produce_in_background(phases[1], 3)
    crashed = []
    for n in ("a", "b", "c"):
        time.sleep(rnd.uniform(0.1, 0.8))
        crashed.append((n, fl.kill(n)))
    for n, db in crashed:
        subprocess.run([t.segd, "segments", "retire", "--db", db, "--before-ms",
                        str(RETIRED_BEFORE_MS)] + [str(i) for i in RETIRED_IDS],
                       check=True, capture_output=True)
        fl.start(n, db)
    fl.wait_produced()
    ret = sorted(RETIRED_IDS)
    fl.wait_for("every unit to carry the retirement",
                lambda: len(fl.manifests()) == PARTITIONS and all(
                    sorted(r["segment_id"] for r in m.get("retirements", [])) == ret
                    for m in fl.manifests().values()), 60)
    check_units_have_offsets(fl)
    fl.phase("crash")

    # 3. b replaced by a new instance on an empty store: it restores
    fl.produce_in_background(phases[2], 3)
    time.sleep(rnd.uniform(0.2, 1.5))
    fl.kill("b")
    fl.start("b2", dbs["b2"])
    fl.wait_for("b2 to restore a partition", lambda: "restored p=" in fl.log("b2"), 60)
    fl.wait_produced()
    check_units_have_offsets(fl)
    fl.phase("replacement")

    # 4. a and c SIGKILLed; a unit corrupted, of a partition b2 has never
    # held: b2 began empty with restore.from, so it holds offsets exactly of
    # the partitions its log says it restored or replayed. With a and c
    # gone, the partition goes to b2 or to c2 (a new instance on an empty
    # store), which must restore it, refuse the unit and replay it. Then a
    # restarts with its store.
    fl.produce_in_background(phases[3], 4)
    time.sleep(rnd.uniform(0.2, 1.0))
    fl.kill("a")
    fl.kill("c")
    free = sorted(set(range(PARTITIONS)) - held_partitions(fl.log("b2"), t.topic))
    if not free:
        raise Failed("b2 has held every partition: nothing to corrupt")
    bad_p = rnd.choice(free)
    corrupt_one(fl, bad_p)
    t.fault("corrupt unit")
    fl.start("c2", dbs["c2"])
    fallback = re.compile(r"restore of " + re.escape(t.topic) + r" \[%d\] failed \(attempt 2\): .*; "
                          r"replaying it from input.offset.reset" % bad_p)
    fl.wait_for("the fallback for corrupt unit %d" % bad_p,
                lambda: any(fallback.search(fl.log(n)) for n in fl.live), 60)
    if not any(re.search(r"restore of " + re.escape(t.topic) +
                             r" \[%d\] failed \(attempt 1\)" % bad_p, fl.log(n))
               for n in fl.live):
        raise Failed("no first failed attempt for unit %d" % bad_p)
    fl.start("a", dbs["a"])
    fl.wait_produced()
    fl.phase("corrupt unit")

    # 5. everything caught up: every unit carries its partition's end offset
    ends = end_offsets(t)
    fl.wait_for("every unit at its end offset",
                lambda: {p: unit_offset(m, t.topic)
                         for p, m in fl.manifests().items()} == ends, 90)
    check_units_have_offsets(fl)
    fl.phase("catch up")

    # 6. scale 3 -> 1: every member but a leaves (SIGTERM, exit 0); a alone
    # takes every partition back (resuming from its own offsets, or restoring
    # the partitions it never held or has swept from the units) and must
    # catch up: the group's committed offsets at the end, a's lag 0 on all
    # 12 partitions and its outbox empty; then a stops and its store must be
    # at every end offset
    final = dict(fl.live)
    leaving = [n for n in final if n != "a"]
    for name in leaving:
        fl.live.pop(name)[0].send_signal(signal.SIGTERM)
    for name in leaving:
        p = final[name][0]
        if p.wait(timeout=60) != 0:
            raise Failed("%s exited with %d on SIGTERM" % (name, p.returncode))
        t.fault("leave")
    # a stuck commit (the group's offsets below the end 30 s after a is
    # done) is noted in t.segd_faults: the trial fails as a SEGD FAULT,
    # beside the verdict of its data, which is still judged
    got = t.wait_caught_up({"a": fl.live["a"][0]}, "a", group="fleet")
    if got != ends:
        raise HarnessError("end offsets moved: %s, then %s" % (ends, got))
    time.sleep(1.5)  # one more periodic export after the last batch
    t.stop(fl.live.pop("a")[0], "a")
    t.check_offsets(dbs["a"], ends)
    if re.search(r"restored p=\d+ .*offset=-1\b", "".join(fl.log(n) for n in dbs)):
        raise Failed("a unit without its offset was restored")
    fl.phase("scale to 1")
    stores = check_stores(t, final, ends, want)
    fl.phase("stores")
    if stores:
        dump_topics(t, stores[:5])
    cache = check_cache(t, fl, want)
    fl.phase("cache")
    return stores, cache


def held_partitions(log, topic):
    """Partitions a store that began empty holds offsets for (or will)."""
    return {int(m) for m in re.findall(re.escape(topic) +
                                       r" \[(\d+)\](?: has no stored offset|: no restore)",
                                       log)}


def check_stores(t, final, ends, want):
    """Users whose owner's store (every final store at the partition's end
    offset) differs from the model."""
    parts = partition_of(t.segd, t.brokers, t.topic, want)
    at_end = {p: [] for p in range(PARTITIONS)}
    for name, (_, db) in final.items():
        out = subprocess.run([t.segd, "offsets", "show", "--db", db, "--json"],
                             capture_output=True, text=True, check=True)
        for o in json.loads(out.stdout)["offsets"]:
            if o["topic"] == t.topic and o["next_offset"] == ends[o["partition"]]:
                at_end[o["partition"]].append(db)
    if any(not v for v in at_end.values()):
        raise Failed("partitions no final store holds at their end offset: %s" %
                     [p for p, v in at_end.items() if not v])
    bad = set()
    for db in {db for _, db in final.values()}:
        mine = {u: s for u, s in want.items() if db in at_end[parts[u]]}
        if not mine:  # e.g. a restarted instance the group gave nothing
            continue
        got = t.get_all(db, mine)
        bad |= {u for u in mine if got[u] != mine[u]}  # get_all: every user or HarnessError
    return sorted(bad)


def dump_topics(t, users):
    """For a failed trial: the input messages and change deltas of some
    users, with their partitions and offsets (changes.txt in the trial)."""
    import io
    import avro.io
    import avro.schema
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas")
    dec = {n: avro.io.DatumReader(avro.schema.parse(open(os.path.join(src, n + ".avsc")).read()))
           for n in ("change_event", "segment_event")}
    c = Consumer({"bootstrap.servers": t.brokers, "group.id": t.prefix + "fleet-dump",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([t.topic, t.changes])
    out, quiet = [], time.time() + 5
    while time.time() < quiet:
        m = c.poll(0.5)
        if m is None or m.error() or m.key() is None or m.key().decode() not in users:
            continue
        quiet = time.time() + 3
        v = m.value()
        name = "change_event" if m.topic() == t.changes else "segment_event"
        try:
            body = v[10:] if v[:2] == b"\xc3\x01" else v
            d = dec[name].read(avro.io.BinaryDecoder(io.BytesIO(body)))
        except Exception as e:  # noqa: BLE001 (a dump for a human)
            d = "undecodable: %s" % e
        out.append("%s [%d] @%d %s %s" % (m.topic(), m.partition(), m.offset(), m.key().decode(), d))
    c.close()
    with open(os.path.join(t.dir, "changes.txt"), "w") as f:
        f.write("\n".join(sorted(out)) + "\n")


def check_cache(t, fl, want):
    """Users a cache of every unit in DEST tailing the change topic gets
    wrong."""
    p, port = t.cache(fl.dest, False)
    try:
        return t.cache_equals(p, port, want, time.time() + 60)
    finally:
        p.terminate()
        p.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("segd")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--events", type=int, default=300, help="events per phase")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep trial directories")
    ap.add_argument("--kafka", default="mock", choices=["mock", "real"])
    ap.add_argument("--cluster-dir",
                    default=os.environ.get("KAFKA_CLUSTER_DIR") or "/tmp/kafka-chaos")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="segd-fleet-")
    cluster = None
    if args.kafka == "real":
        try:
            cluster = RealCluster(args.cluster_dir)
        except HarnessError as e:
            print("fleet: HARNESS FAILURE: %s" % e)
            sys.exit(1)
        print("fleet: Apache Kafka in %s (%s, %d nodes)" %
              (args.cluster_dir, "started here" if cluster.started else "shared",
               cluster.nodes), flush=True)
    try:
        exact = run_trials(args, work, cluster)
    finally:
        if cluster:
            cluster.stop()
    print("fleet: %d of %d trials exact" % (exact, args.trials))
    if exact == args.trials and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if exact == args.trials else 1)


def run_trials(args, work, cluster):
    exact = 0
    for i in range(args.trials):
        seed = args.seed * 1000 + i
        # a real cluster: the trial's topics and groups uniquely named
        prefix = "" if cluster is None else "fleet-%d-%d-" % (os.getpid(), i)
        t = Trial(args.segd, work, args, "fleet", cluster, prefix)
        t0 = time.time()
        try:
            store_diff, cache_diff = trial(t, args, seed)
            ok = not store_diff and not cache_diff
            verdict = "EXACT" if ok else "MISMATCH"
            why = "store diff %d users %s, cache diff %d users %s" % (
                len(store_diff), store_diff[:3], len(cache_diff), cache_diff[:3])
            if t.segd_faults:  # beside the data's verdict; never exact
                ok, verdict = False, "SEGD FAULT (data %s)" % verdict
                why += "; " + "; ".join(t.segd_faults)
        except Failed as e:  # segd did not do a step it must (a fault of segd)
            ok, verdict, why = False, "FAILED", str(e)
        except HarnessError as e:  # a check that could not be made
            ok, verdict, why = False, "HARNESS FAILURE", str(e)
        finally:
            t.stop_all()
        exact += ok
        print("trial %d fleet seed=%d: %s in %.0f s (faults %s; phases %s)%s" %
              (i, seed, verdict, time.time() - t0,
               json.dumps(t.faults), ", ".join(getattr(t, "fleet", None) and t.fleet.times or []),
               "" if ok else ": %s dir=%s" % (why, t.dir)), flush=True)
        if ok and not args.keep:
            shutil.rmtree(t.dir, ignore_errors=True)
    return exact


if __name__ == "__main__":
    main()
