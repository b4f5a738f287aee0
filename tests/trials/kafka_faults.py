#!/usr/bin/python3
"""Broker faults on a real 3-node Apache Kafka cluster (issue 21 item 4),
driven by tests/kafka/kafka_failover.sh, tests/kafka/kafka_outage.sh and
tests/kafka/cache_log_start.sh, which start and stop the cluster (its folder in
KAFKA_CLUSTER_DIR, topics events, segments.changes and events.dlq created
with replication factor 3 and min.insync.replicas 2). The workload and the
independent model of docs/design.md §3 are tests/trials/chaoslib.py's.

  failover   while a producer feeds events (250/s, after a warm-up that gives
             `segd run` a periodic snapshot and a `segd cache` tailing its
             change stream), SIGKILL the leader of input partition 0 and
             restart it once fenced (8 s at least); then the store, that
             cache and the whole change topic replayed all equal the model,
             nothing is dead-lettered, and the longest stretch without
             progress in segd's /metrics is printed.
  outage     the same, but all three nodes SIGSTOPped for 30 s: while
             they are stopped and segd is idle, its store holds exactly the
             events below the input offsets it stored (offsets never ahead of
             data); after SIGCONT the same segd run and cache carry on by
             themselves to an exact end; and the group's offsets in Kafka never
             pass the store's, sampled throughout (OffsetWatch: before the
             outage, while the nodes are stopped, after SIGCONT until segd
             run is stopped, and once after its stop).
  logstart   a cache SIGSTOPped while the change topic's log start is moved
             past its position (delete-records) exits 1 naming the gap when
             continued, a cache started on the old snapshot refuses with the
             same reason, and a cache on a newer snapshot equals the store.

usage: kafka_faults.py failover|outage|logstart SEGD_BIN
Exit 0 iff every check held; otherwise "FAIL: <reason>" and exit 1.
KAFKA_FAULTS_BREAK=<name> breaks one check on purpose (the tests of the test):
restart, resume, delete (skip that fault step), model, cache, topic (one
expected value of the store's, the caches' or the whole topic's check off),
offsets (outage: the store's offsets in every sample of the committed-offsets
watch read one lower), offsets-read (outage: that watch's store read fails).
"""
import glob, http.client, io, json, os, shutil, signal, subprocess, sys, tempfile, threading, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import avro.io  # noqa: E402
import avro.schema  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from chaoslib import HORIZON_S, NOW_S, SCHEMA, Trial, model, workload  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BREAK = os.environ.get("KAFKA_FAULTS_BREAK", "")
GROUP = "chaos"  # chaoslib.Trial.run's group


class Failed(Exception):
    pass


def check(cond, reason):
    if not cond:
        raise Failed(reason)


def kafka(*args):
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "kafka.sh")] + [str(a) for a in args],
                       capture_output=True, text=True)
    check(r.returncode == 0, "scripts/kafka.sh %s: %s" % (" ".join(map(str, args)),
                                                         r.stderr.strip()[-300:]))
    return r.stdout.strip()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ---------- a paced producer ----------

class Feeder(threading.Thread):
    """Produces events keyed by user at `rate` per second (idempotent,
    acks=all) and records which were acknowledged, and when."""

    def __init__(self, brokers, events, rate):
        super().__init__(daemon=True)
        self.events, self.rate = events, rate
        self.where = [None] * len(events)
        self.acks, self.errors = [], []
        self.sent = 0
        self.done = threading.Event()
        # murmur2_random: Kafka's Java partitioner, the one segd run expects
        # (input.partitioner); librdkafka's default would make events misrouted
        self.prod = Producer({"bootstrap.servers": brokers, "linger.ms": 5,
                              "partitioner": "murmur2_random",
                              "enable.idempotence": True, "message.timeout.ms": 240000,
                              "log_level": 2})
        self.writer = avro.io.DatumWriter(avro.schema.parse(SCHEMA))

    def report(self, i):
        def cb(err, msg):
            if err is not None:
                self.errors.append(str(err))
            else:
                self.where[i] = (msg.partition(), msg.offset())
                self.acks.append(time.time())
        return cb

    def run(self):
        t0 = time.time()
        for i, ev in enumerate(self.events):
            while time.time() < t0 + i / self.rate:
                self.prod.poll(0.01)
            buf = io.BytesIO()
            self.writer.write(dict(ev, source=None), avro.io.BinaryEncoder(buf))
            self.prod.produce("events", key=ev["user_id"].encode(), value=buf.getvalue(),
                              on_delivery=self.report(i))
            self.sent = i + 1
            self.prod.poll(0)
        self.left = self.prod.flush(240)
        self.done.set()

    def finish(self, timeout):
        self.done.wait(timeout)
        check(self.done.is_set(), "the producer did not finish within %d s" % timeout)
        check(not self.errors, "produce errors: %s" % self.errors[:3])
        check(self.left == 0 and None not in self.where,
              "%d events never acknowledged" % self.where.count(None))
        self.prod = None


# ---------- segd's progress, sampled from /metrics ----------

def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{", 1)[0]
        out[base] = out.get(base, 0.0) + float(value)
    return out


class Progress(threading.Thread):
    """Samples segd run's counters every 0.1 s; a failed scrape is recorded
    (segd run must keep serving /metrics through every broker fault)."""
    SERIES = ("segd_consumed_messages_total", "segd_change_events_total",
              "segd_dlq_messages_total", "segd_outbox_entries")

    def __init__(self, port, proc):
        super().__init__(daemon=True)
        self.port, self.proc = port, proc
        self.samples, self.failures = [], 0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            try:
                m = scrape(self.port)
                self.samples.append((time.time(),) + tuple(m.get(s, 0.0) for s in self.SERIES))
            except OSError:
                if self.proc.poll() is None and self.samples:
                    self.failures += 1
            time.sleep(0.1)

    def last(self, i):
        return self.samples[-1][i] if self.samples else 0.0

    def changes(self, i):
        """Times at which series i moved."""
        out, prev = [], None
        for s in self.samples:
            if prev is not None and s[i] != prev:
                out.append(s[0])
            prev = s[i]
        return out

    def longest_stall(self, i, since, until):
        """The longest time series i did not move within [since, until],
        counted from its last move before since."""
        times = self.changes(i)
        before = [t for t in times if t <= since]
        points = ([before[-1]] if before else [since]) + [t for t in times if since < t <= until]
        points.append(until)
        return max(b - a for a, b in zip(points, points[1:]))

    def first_move_after(self, i, t):
        later = [c for c in self.changes(i) if c > t]
        return later[0] if later else None


class Metadata:
    """Leaders and in-sync replicas from one admin client (a kafka.sh call
    per question starts a Python process: seconds each on a loaded machine,
    while the fault is meant to land mid-ingest). None while no broker
    answers."""

    def __init__(self, brokers):
        self.a = AdminClient({"bootstrap.servers": brokers, "log_level": 0})

    def partition(self, topic, p):
        try:
            return self.a.list_topics(topic, timeout=5).topics[topic].partitions[p]
        except (KafkaException, KeyError):
            return None

    def leader(self, topic, p):
        md = self.partition(topic, p)
        check(md is not None and md.leader >= 0, "no leader of %s/%d" % (topic, p))
        return str(md.leader)

    def isr(self, topic, p):
        md = self.partition(topic, p)
        return None if md is None else [str(n) for n in md.isrs]


def longest_gap(times, since, until):
    ts = sorted(times)
    before = [t for t in ts if t <= since]
    points = ([before[-1]] if before else [since]) + [t for t in ts if since < t <= until]
    points.append(until)
    return max(b - a for a, b in zip(points, points[1:]))


# ---------- the pieces of one scenario ----------

class Scenario:
    def __init__(self, segd, name):
        # a folder of this run's own: kept when a check fails, for its logs
        self.work = tempfile.mkdtemp(prefix="segd-faults-%s-" % name)
        self.t = Trial(segd, self.work, None, name)
        self.t.brokers = kafka("bootstrap")
        self.t.partitions = 4  # chaoslib's Trial.broker() sets it; the topics are made here
        self.segd, self.dir = segd, self.t.dir
        self.db = os.path.join(self.dir, "db")
        self.procs = {}

    def start_run(self):
        self.mport = free_port()
        self.run = self.t.run(self.db, "a", {"SEGD_METRICS_LISTEN": "127.0.0.1:%d" % self.mport})
        self.procs["segd run"] = self.run
        self.progress = Progress(self.mport, self.run)
        self.progress.start()

    def alive(self):
        for name, p in self.procs.items():
            check(p.poll() is None, "%s exited with %s (logs in %s)" % (name, p.returncode, self.dir))

    def wait(self, what, cond, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.alive()
            if cond():
                return
            time.sleep(0.2)
        raise Failed("%s did not happen within %d s" % (what, timeout))

    def units(self, snap):
        return glob.glob(os.path.join(snap, "events", "p-*", "manifest.json"))

    def export(self, to):
        r = subprocess.run([self.segd, "snapshot", "export", "--db", self.db, "--to", to,
                            "--now", str(NOW_S), "--horizon-s", str(HORIZON_S)],
                           capture_output=True, text=True)
        check(r.returncode == 0, "snapshot export: %s" % r.stderr.strip()[-300:])
        return [json.load(open(u)) for u in self.units(to)]

    def start_cache(self, snap, name="cache", from_beginning=False):
        p, port = self.t.cache(snap, from_beginning)
        self.procs[name] = p

        def healthy():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        self.wait("%s healthy" % name, healthy, 90)
        return p, port

    def store(self, want):
        got = self.t.get_all(self.db, want)
        check(got is not None, "segd get failed")
        return got

    def store_equals(self, want, timeout):
        deadline = time.time() + timeout
        got = None
        while time.time() < deadline:
            self.alive()
            got = self.store(want)
            if got == want:
                return got
            time.sleep(0.5)
        bad = sorted(u for u in want if got.get(u) != want[u])
        raise Failed("store != model for %d of %d users, e.g. %s: store %s model %s" %
                     (len(bad), len(want), bad[0], got.get(bad[0]), want[bad[0]]))

    def cache_answers(self, port, want, timeout=60):
        """Users the cache answers otherwise than want says, polled until
        none or timeout. Fails closed: an unreachable cache differs for all
        (chaoslib's Trial.cache_equals returns [] when the first request is
        refused, so it is not used here)."""
        deadline = time.time() + timeout
        while True:
            bad = []
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                for u, segs in want.items():
                    c.request("GET", "/v1/users/" + u)
                    r = c.getresponse()
                    body = json.loads(r.read())
                    # 404: a user the cache never saw, right when nothing is live
                    if r.status not in (200, 404) or body.get("segments") != segs:
                        bad.append(u)
                c.close()
            except (OSError, http.client.HTTPException, ValueError) as e:
                bad = ["(cache unreachable: %s)" % e]
            if not bad or time.time() > deadline:
                return bad
            time.sleep(0.5)

    def cache_equals(self, port, want, label):
        bad = self.cache_answers(port, corrupt(want, "cache"))
        check(not bad, "%s != store for %d users, e.g. %s" % (label, len(bad), bad[:3]))
        log("%s: %d users equal the store" % (label, len(want)))

    def whole_topic_equals(self, want):
        """A cache of an empty store's snapshot reading the whole change
        topic from its beginning."""
        empty, nothing = os.path.join(self.dir, "empty-snap"), os.path.join(self.dir, "none.jsonl")
        open(nothing, "w").close()
        for argv in (["backfill", "--no-changes", "--db", os.path.join(self.dir, "emptydb"),
                      nothing],
                     ["snapshot", "export", "--db", os.path.join(self.dir, "emptydb"), "--to",
                      empty, "--topic", "events", "--buckets", "4", "--now", str(NOW_S)]):
            r = subprocess.run([self.segd] + argv, capture_output=True, text=True)
            check(r.returncode == 0, "segd %s: %s" % (argv[0], r.stderr.strip()[-300:]))
        p, port = self.start_cache(empty, "whole-topic cache", True)
        bad = self.cache_answers(port, corrupt(want, "topic"))
        del self.procs["whole-topic cache"]
        p.terminate()
        p.wait(10)
        check(not bad, "the whole change topic replayed != store for %d users, e.g. %s" %
              (len(bad), bad[:3]))
        log("whole change topic replayed: %d users equal the store" % len(want))

    def no_dead_letters(self):
        # kafka_own.bash makes the dead-letter topic with the input's 4 partitions
        n = sum(hi - lo for lo, hi in watermarks(self.t.brokers, "events.dlq", 4))
        check(n == 0, "%d events dead-lettered" % n)
        check(self.progress.last(3) == 0, "segd_dlq_messages_total = %s" % self.progress.last(3))

    def stop(self):
        if hasattr(self, "progress"):
            self.progress.halt.set()
        self.t.stop_all()


def corrupt(want, check_name="model"):
    """KAFKA_FAULTS_BREAK=model (the store's check), cache (every cache's) or
    topic (the whole change topic's): one expected value off by one hour."""
    if BREAK != check_name:
        return want
    u = next(u for u in sorted(want) if want[u])
    want = dict(want)
    want[u] = [dict(want[u][0], expires_at=want[u][0]["expires_at"] + 3600)] + want[u][1:]
    return want


# ---------- scenarios ----------

def warm_up(s, events):
    """segd run on the first 500 events, a cache on its periodic snapshot,
    then the rest produced at 250 a second; returns once 1000 of them were
    sent. The paced feed starts only now: under load the cache can take long
    to start, and the fault must land while events still arrive."""
    s.start_run()
    first = Feeder(s.t.brokers, events[:500], 5000)
    first.start()
    first.finish(120)
    snapdir = os.path.join(s.dir, "snap-a")
    s.wait("a periodic snapshot of 4 units with data",
           lambda: len(s.units(snapdir)) == 4 and s.progress.last(1) > 0, 90)
    cache, cport = s.start_cache(snapdir)
    feed = Feeder(s.t.brokers, events[500:], 250)
    feed.start()
    s.wait("1000 events of the paced feed sent", lambda: feed.sent >= 1000, 60)
    return feed, cache, cport


def failover(s):
    events = workload(2101, 150, 8500)
    want = model(events)
    feed, cache, cport = warm_up(s, events)
    md = Metadata(s.t.brokers)
    node = md.leader("events", 0)
    led = [(t, p) for t in ("events", "segments.changes") for p in range(4)
           if md.leader(t, p) == node]
    t_kill = time.time()
    kafka("kill", node)
    log("SIGKILL node %s, leader of %s" % (node, " ".join("%s/%d" % x for x in led)))
    # restarted once the controller fenced it (it left the ISR, Kafka's
    # broker.session.timeout.ms later), so that its coming back is seen
    s.wait("node %s out of the in-sync replicas of events/0" % node,
           lambda: node not in (md.isr("events", 0) or [node]), 60)
    log("node %s left the ISR after %.1f s" % (node, time.time() - t_kill))
    # the pause is measured while events still arrive: a failover after the
    # input ended would measure nothing
    check(not feed.done.is_set(), "the producer had sent every event before the failover "
          "ended: not a failover during ingest")
    time.sleep(max(0, t_kill + 8 - time.time()))
    if BREAK != "restart":
        kafka("restart", node)
        log("node %s restarted" % node)
    s.wait("node %s back in the in-sync replicas of events/0" % node,
           lambda: node in (md.isr("events", 0) or []), 150)
    feed.finish(240)
    t_end = feed.acks[-1]
    got = s.store_equals(corrupt(want), 120)
    log("store: %d users equal the model of %d events" % (len(got), len(events)))
    s.cache_equals(cport, got, "cache (snapshot + tail, through the failover)")
    s.alive()
    cache.terminate()
    cache.wait(10)
    del s.procs["cache"]
    s.whole_topic_equals(got)
    s.no_dead_letters()
    check(s.progress.failures == 0, "%d /metrics scrapes failed" % s.progress.failures)
    pr = s.progress
    stall_in = pr.longest_stall(1, t_kill, t_end)
    stall_out = pr.longest_stall(2, t_kill, t_end)
    stall_prod = longest_gap(feed.acks, t_kill, t_end)
    log("failover pause: consumed stalled %.1f s, change events stalled %.1f s, producer acks "
        "stalled %.1f s (SIGKILL of node %s at +0; data flowing until +%.1f s)" %
        (stall_in, stall_out, stall_prod, node, t_end - t_kill))
    print("RESULT failover_pause_consumed_s=%.1f failover_pause_changes_s=%.1f "
          "producer_ack_gap_s=%.1f" % (stall_in, stall_out, stall_prod))


class OffsetWatch(threading.Thread):
    """Samples "Kafka's committed offsets never pass the store's" while segd
    runs, every ~0.3 s: each sample reads the group's committed offsets of
    events from Kafka, then the store's (`segd offsets show`, a read-only
    open beside segd run), in that order (the store's only grow, so a store
    read after Kafka's that is behind it is a real breach), and compares
    them. Every read must succeed: a Kafka read that gets no answer within
    60 s (or no committed offset for some partition), or a store read that
    fails, fails the test; nothing is skipped. The one exception is the
    phase "down", while all three nodes are stopped: no broker can answer
    then (and the group's offsets cannot move), so those samples read the
    store (which must succeed) and compare it with Kafka's offsets as read
    last, just before the nodes were stopped (no Kafka read is in flight
    across a phase change). Phases, set by outage(): before (the paced feed
    running), down, back (after SIGCONT, until just before segd run is
    stopped: the catch-up, then the exact end)."""

    def __init__(self, s):
        super().__init__(daemon=True)
        self.s = s
        self.phase = "before"
        self.samples = []  # (phase, Kafka's offsets or None, the store's, time)
        self.error = None
        self.kc_last = None
        self.halt = threading.Event()
        # held by a Kafka read: the next phase begins between two reads, so
        # that no read is left hanging on a node stopped under it
        self.turn = threading.Lock()
        self.c = Consumer({"bootstrap.servers": s.t.brokers, "group.id": GROUP,
                           "enable.auto.commit": False, "log_level": 0})

    def kafka_side(self):
        deadline = time.time() + 60
        why = "no answer"
        while time.time() < deadline and not self.halt.is_set():
            try:
                got = self.c.committed([TopicPartition("events", p) for p in range(4)],
                                       timeout=10)
                errs = [str(tp.error) for tp in got if tp.error is not None]
                if not errs:
                    kc = {tp.partition: tp.offset for tp in got}
                    check(len(kc) == 4 and all(o >= 0 for o in kc.values()),
                          "Kafka's committed offsets of the group %s: not all 4 partitions "
                          "committed (%s)" % (GROUP, kc))
                    return kc
                why = errs[0]
            except KafkaException as e:
                why = str(e)
            time.sleep(0.5)
        raise Failed("reading Kafka's committed offsets (phase %s): %s" % (self.phase, why))

    def store_side(self):
        db = self.s.db if BREAK != "offsets-read" else self.s.db + ".missing"
        r = subprocess.run([self.s.segd, "offsets", "show", "--db", db, "--json"],
                           capture_output=True, text=True)
        check(r.returncode == 0, "segd offsets show (phase %s): exit %d: %s" %
              (self.phase, r.returncode, r.stderr.strip()[-300:]))
        st = committed_store_offsets(json.loads(r.stdout))
        check(sorted(st) == list(range(4)), "the store's offsets list partitions %s" % sorted(st))
        if BREAK == "offsets":  # the store read one behind: the check must see a breach
            st = {p: o - 1 for p, o in st.items()}
        return st

    def sample(self):
        with self.turn:
            phase = self.phase
            kc = self.kafka_side() if phase != "down" else None
        if phase != "down":
            self.kc_last = kc
        st = self.store_side()
        ref = kc if kc is not None else self.kc_last
        check(ref is not None, "no Kafka offsets read before the brokers were all stopped")
        check(all(ref[p] <= st[p] for p in range(4)),
              "phase %s: Kafka's committed offsets %s%s pass the store's %s" %
              (phase, ref, "" if kc is not None else " (read last, before the full outage)", st))
        self.samples.append((phase, kc, st, time.time()))

    def run(self):
        try:
            while not self.halt.is_set():
                self.sample()
                time.sleep(0.3)
        except Failed as e:
            self.error = str(e)
        except Exception as e:  # anything unexpected fails the test too
            self.error = "offset watch: %r" % e

    def enter(self, phase, action):
        """Runs action (stopping or continuing nodes) between two Kafka reads,
        then starts phase."""
        with self.turn:
            action()
            self.phase = phase

    def count(self, phase):
        check(self.error is None, self.error or "")
        return sum(1 for x in self.samples if x[0] == phase)

    def wait_samples(self, s, phase, n, timeout):
        """Until n more samples of this phase were taken (a failure or a
        timeout fails the test)."""
        have = self.count(phase)
        s.wait("%d samples of the committed offsets (phase %s)" % (n, phase),
               lambda: self.count(phase) >= have + n, timeout)

    def finish(self):
        self.halt.set()
        self.join(120)
        check(not self.is_alive(), "the offset watch did not stop")
        self.c.close()
        counts = {ph: self.count(ph) for ph in ("before", "down", "back")}
        check(all(n >= 2 for n in counts.values()),
              "too few samples of the committed offsets per phase: %s" % counts)
        return counts


def outage(s):
    events = workload(2102, 150, 5000)
    want = model(events)
    feed, cache, cport = warm_up(s, events)
    # Kafka's committed offsets against the store's, sampled throughout
    watch = OffsetWatch(s)
    watch.start()
    watch.wait_samples(s, "before", 2, 60)
    # (not one node after another: with two nodes stopped and the group's
    # coordinator running, segd run was fenced (FENCED_INSTANCE_ID) and
    # stopped, another scenario than this one)
    t_stop = time.time()
    watch.enter("down", lambda: [kafka("pause", n) for n in (1, 2, 3)])
    check(not feed.done.is_set(), "the producer finished before the outage")
    log("SIGSTOP nodes 1 2 3")
    # segd idle: nothing more to read (what librdkafka had prefetched applied)
    last = [None, time.time()]

    def idle():
        v = s.progress.last(1)
        if v != last[0]:
            last[:] = [v, time.time()]
        return time.time() - last[1] >= 3
    s.wait("segd idle while the brokers are stopped", idle, 20)
    before = s.progress.last(1)
    units = s.export(os.path.join(s.dir, "during-outage"))
    at_outage = s.store(want)
    check(s.progress.last(1) == before, "segd consumed while every broker was stopped")
    stored = {}
    for u in units:
        for i in u["input_offsets"]:
            if i["topic"] == "events":
                stored[i["partition"]] = max(stored.get(i["partition"], 0), i["next_offset"])
    check(len(stored) == 4, "the snapshot lists input offsets of %d partitions" % len(stored))
    time.sleep(max(0, t_stop + 30 - time.time()))
    watch.wait_samples(s, "down", 2, 30)
    watch.enter("back", lambda: [kafka("resume", n) for n in (1, 2, 3)
                                 if BREAK != "resume"])
    t_cont = time.time()
    log("SIGCONT nodes 1 2 3 after %.1f s" % (t_cont - t_stop))
    s.wait("segd consuming again", lambda: s.progress.first_move_after(1, t_cont), 120)
    t_moved = s.progress.first_move_after(1, t_cont)
    feed.finish(240)
    got = s.store_equals(corrupt(want), 120)
    t_exact = time.time()
    log("store: %d users equal the model of %d events" % (len(got), len(events)))
    # offsets never ahead of data: the store during the outage was exactly
    # the events below its stored offsets. Where each event landed is read
    # back from the topic: the delivery report of a batch the idempotent
    # producer retried across the outage may carry no offset.
    landed = read_events(s.t.brokers)
    check(model([ev for msgs in landed.values() for _, ev in msgs]) == want,
          "the events topic itself does not hold the produced events")
    prefix = [ev for p, msgs in landed.items() for o, ev in msgs if o < stored[p]]
    check(0 < len(prefix) < len(events),
          "the outage caught %d of %d events applied: not a mid-stream check" %
          (len(prefix), len(events)))
    pm = model(prefix)
    bad = [u for u in want if at_outage.get(u) != pm.get(u, [])]
    check(not bad, "during the outage the store != the events below its offsets %s for %d "
          "users, e.g. %s" % (stored, len(bad), bad[:3]))
    log("during the outage: store = model of the %d events below offsets %s" %
        (len(prefix), json.dumps(stored, sort_keys=True)))
    s.cache_equals(cport, got, "cache (the same process, through the outage)")
    s.alive()
    cache.terminate()
    cache.wait(10)
    del s.procs["cache"]
    s.whole_topic_equals(got)
    s.no_dead_letters()
    # the group's committed offsets in Kafka never passed the store's: the
    # samples of every phase held (and then once more after the stop, below)
    watch.wait_samples(s, "back", 2, 60)
    counts = watch.finish()
    log("committed offsets <= the store's in every sample: %s (%d after SIGCONT before the "
        "store was exact)" % (counts, sum(1 for x in watch.samples
                                          if x[0] == "back" and x[3] < t_exact)))
    run = s.procs.pop("segd run")
    run.send_signal(signal.SIGTERM)
    check(run.wait(60) == 0, "segd run exit %s at SIGTERM" % run.returncode)
    r = subprocess.run([s.segd, "offsets", "show", "--db", s.db, "--json"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "segd offsets show: %s" % r.stderr)
    final = committed_store_offsets(json.loads(r.stdout))
    c = Consumer({"bootstrap.servers": s.t.brokers, "group.id": GROUP})
    kc = {tp.partition: tp.offset for tp in
          c.committed([TopicPartition("events", p) for p in range(4)], timeout=30)}
    c.close()
    ends = {p: hi for p, (_, hi) in enumerate(watermarks(s.t.brokers, "events", 4))}
    check(final == ends, "store offsets %s != ends of the input %s" % (final, ends))
    check(all(kc[p] <= final[p] for p in range(4)),
          "Kafka's committed offsets %s pass the store's %s" % (kc, final))
    log("offsets: store %s = input ends; Kafka's committed %s" % (final, kc))
    log("outage recovery: first batch %.1f s after SIGCONT, store exact %.1f s after SIGCONT" %
        (t_moved - t_cont, t_exact - t_cont))
    print("RESULT outage_first_batch_s=%.1f outage_exact_s=%.1f" %
          (t_moved - t_cont, t_exact - t_cont))


def read_events(brokers):
    """{partition: [(offset, event)]} of the whole events topic."""
    reader = avro.io.DatumReader(avro.schema.parse(SCHEMA))
    ends = watermarks(brokers, "events", 4)
    c = Consumer({"bootstrap.servers": brokers, "group.id": "kafka-faults-read",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("events", p, lo) for p, (lo, _) in enumerate(ends)])
    out = {p: [] for p in range(4)}
    left = sum(hi - lo for lo, hi in ends)
    deadline = time.time() + 60
    while left > 0 and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        ev = reader.read(avro.io.BinaryDecoder(io.BytesIO(m.value())))
        out[m.partition()].append((m.offset(), ev))
        left -= 1
    c.close()
    check(left == 0, "%d messages of the events topic not read back" % left)
    return out


def committed_store_offsets(j):
    """{partition: next offset} of input topic events from segd offsets show --json."""
    out = {}
    for o in j.get("offsets", []):
        if o.get("topic") == "events":
            out[o["partition"]] = o["next_offset"]
    check(out, "no stored input offsets in %s" % json.dumps(j)[:300])
    return out


def stacks(pid):
    """Every thread's stack of a process that hangs, when gdb is at hand."""
    if shutil.which("gdb"):
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=120)
        print("--- stacks of %d\n%s" % (pid, "\n".join(
            ln for ln in r.stdout.splitlines() if ln.startswith(("#", "Thread")))), file=sys.stderr)


def watermarks(brokers, topic, partitions):
    c = Consumer({"bootstrap.servers": brokers, "group.id": "wm"})
    out = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    c.close()
    return out


def change_positions(units):
    """Per change partition, the position a cache of these units starts at."""
    pos = {}
    for u in units:
        mine = {q["partition"]: q["offset"] for q in u["changes"]["positions"]}
        for p in range(4):
            pos[p] = min(pos.get(p, 1 << 62), mine.get(p, 0))
    return pos


def logstart(s):
    events = workload(2103, 150, 3000)
    first, rest = events[:1500], events[1500:]
    s.start_run()
    feed = Feeder(s.t.brokers, first, 2000)
    feed.start()
    feed.finish(120)
    want1 = model(first)
    s.store_equals(want1, 120)
    s.wait("the outbox drained", lambda: s.progress.last(4) == 0 and s.progress.last(2) > 0, 60)
    old = os.path.join(s.dir, "snap-old")
    units = s.export(old)
    check(len(units) == 4, "the export made %d units" % len(units))
    pos_old = change_positions(units)
    cache, cport = s.start_cache(old, "cache A")
    s.cache_equals(cport, want1, "cache A on the first snapshot")
    cache.send_signal(signal.SIGSTOP)
    log("cache A stopped at change positions %s" % pos_old)
    feed = Feeder(s.t.brokers, rest, 2000)
    feed.start()
    feed.finish(120)
    want = model(events)
    s.store_equals(corrupt(want), 120)
    s.wait("the outbox drained", lambda: s.progress.last(4) == 0, 60)
    wm = watermarks(s.t.brokers, "segments.changes", 4)
    moved = [p for p in range(4) if wm[p][1] > pos_old[p]]
    check(moved, "no change partition grew past the first snapshot: %s" % wm)
    if BREAK != "delete":
        for p in moved:
            kafka("delete-records", "segments.changes", p, wm[p][1])
    low = watermarks(s.t.brokers, "segments.changes", 4)
    check(all(low[p][0] > pos_old[p] for p in moved),
          "log start %s not past cache A's positions %s" % (low, pos_old))
    log("log start of segments.changes moved to %s (cache A at %s)" %
        ([lo for lo, _ in low], pos_old))
    # a cache on the old snapshot refuses to start
    p, port = s.t.cache(old, False)
    rc = p.wait(60) if p.poll() is None else p.returncode
    errlog = open(os.path.join(s.dir, "cache-%d.log.err" % port)).read()
    check(rc == 1 and "snapshot older than the change topic's retention" in errlog,
          "a cache on the old snapshot: exit %s, log %s" % (rc, errlog[-300:]))
    log("a cache started on the old snapshot refused: exit 1, names the gap")
    # the stopped cache, continued, meets the gap: it stops naming it
    del s.procs["cache A"]
    cache.send_signal(signal.SIGCONT)
    try:
        rc = cache.wait(60)
    except subprocess.TimeoutExpired:
        rc = None
        stacks(cache.pid)
    errlog = open(os.path.join(s.dir, "cache-%d.log.err" % cport)).read()
    check(rc == 1 and "deltas the cache has not joined are gone" in errlog,
          "cache A after the log start passed it: exit %s (want 1 naming the gap), log %s" %
          (rc, errlog[-400:]))
    log("cache A continued: exit 1, log: %s" %
        [ln for ln in errlog.splitlines() if "are gone" in ln][0][:160])
    if "shutdown did not finish" in errlog:  # cmd_cache.c's watchdog: worth knowing how often
        log("cache A: its teardown did not finish within the grace; the watchdog ended it")
    # reload: a newer snapshot, then the cache follows the change topic
    new = os.path.join(s.dir, "snap-new")
    pos_new = change_positions(s.export(new))
    check(all(pos_new[p] >= low[p][0] for p in range(4)),
          "the new snapshot's positions %s are behind the log start %s" % (pos_new, low))
    cache, cport = s.start_cache(new, "cache B")
    s.cache_equals(cport, want, "cache B on a newer snapshot")
    more = workload(2104, 150, 600)
    feed = Feeder(s.t.brokers, more, 2000)
    feed.start()
    feed.finish(120)
    got = s.store_equals(model(events + more), 120)
    s.cache_equals(cport, got, "cache B after more events")
    s.no_dead_letters()
    s.alive()


def main():
    kind, segd = sys.argv[1], sys.argv[2]
    if not os.environ.get("KAFKA_CLUSTER_DIR"):
        # never scripts/kafka.sh's default folder: this kills and stops brokers
        sys.exit("FAIL: KAFKA_CLUSTER_DIR must name a cluster of this test's own")
    s = Scenario(segd, kind)
    ok = False
    try:
        {"failover": failover, "outage": outage, "logstart": logstart}[kind](s)
        ok = True
    except Failed as e:
        print("FAIL: %s" % e, file=sys.stderr)
    finally:
        s.stop()
    if not ok:
        for f in sorted(glob.glob(os.path.join(s.dir, "*.err"))):
            with open(f, errors="replace") as fh:
                tail = fh.readlines()[-8:]
            print("--- %s\n%s" % (f, "".join(tail)), file=sys.stderr)
    if ok and not os.environ.get("KEEP"):
        shutil.rmtree(s.work, ignore_errors=True)
    print("kafka_faults %s: %s" % (kind, "ok" if ok else "FAILED (logs in %s)" % s.dir))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
