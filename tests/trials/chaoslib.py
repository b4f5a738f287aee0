"""Shared pieces of the chaos trials (tests/trials/chaos.py, tests/trials/fleet.py): the
deterministic workload, an independent model of docs/design.md §3, the
broker a trial runs on (a dev broker per trial, or uniquely named topics on a
real Apache Kafka cluster from scripts/kafka.sh), and the processes of one
trial (`segd run`, producing, reading stores with `segd get --json`, edge
caches compared over HTTP).

Every check fails closed. A reader that cannot be asked (a cache that never
answers, a `segd get` that fails), a process that exited when it should run,
a member that never joined, a signal that never came within its deadline:
each raises HarnessError, which a trial reports as a failure of the trial
under its own name, never as "exact" and never as a data mismatch. Data
mismatches are the lists of users a complete read found different.

CHAOS_BREAK (a comma-separated list, for the self-test of tests/trials/chaos.py)
breaks a check on purpose so that its failure can be seen:
  store-answer   one user of the store's answer is altered
  cache-answer   one user of every cache's answer is altered
  cache-port     the cache check asks a port nothing listens on
  wait-group     the committed-offset wait asks a group nobody commits to
  metrics-port   member b's metrics port is taken before it starts
  kill-b         member b is SIGKILLed before it can join
  stop-b         member b is SIGSTOPped before it can join (it never does)
"""
import http.client, io, json, os, random, re, socket, subprocess, tempfile, time

import avro.io
import avro.schema
from confluent_kafka import Consumer, Producer, TopicPartition

NOW_S = int(time.time()) // 3600 * 3600  # segd run keeps the wall clock (from_future)
GRANULARITY = 3600
HORIZON_S = 40 * 86400
HERE = os.path.dirname(os.path.abspath(__file__))
KAFKA_SH = os.path.join(HERE, "..", "..", "scripts", "kafka.sh")
SCHEMA = """{"type":"record","name":"SegmentEvent","namespace":"segd","fields":[
 {"name":"user_id","type":"string"},{"name":"ts_ms","type":"long"},
 {"name":"op","type":{"type":"enum","name":"Op","symbols":["UPSERT","REMOVE","ERASE_USER"]}},
 {"name":"segments","type":{"type":"array","items":{"type":"record","name":"SegmentUpdate",
  "fields":[{"name":"segment_id","type":"long"},{"name":"ttl_s","type":"int"},
  {"name":"flags","type":"int","default":0},{"name":"partner_id","type":"int","default":0}]}}},
 {"name":"source","type":["null","string"],"default":null}]}"""


class HarnessError(Exception):
    """The trial could not be judged: a check could not be made."""


def broken(what):
    return what in os.environ.get("CHAOS_BREAK", "").split(",")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------- workload and model (docs/design.md §3) ----------

def workload(seed, users, events):
    """Events with few segment ids per user and timestamps on a coarse grid,
    so that the same (user, segment) is hit by UPSERT and REMOVE at equal
    ts_ms, and erases cover some of them."""
    rnd = random.Random(seed)
    out = []
    for _ in range(events):
        u = "c%05d" % rnd.randrange(users)
        ts = (NOW_S - rnd.randrange(2 * 86400)) * 1000
        ts -= ts % 3600000  # an hourly grid: equal timestamps are common
        r = rnd.random()
        if r < 0.03:
            out.append({"user_id": u, "ts_ms": ts, "op": "ERASE_USER", "segments": []})
            continue
        op = "REMOVE" if r < 0.30 else "UPSERT"
        segs = []
        for sid in rnd.sample(range(24), rnd.randint(1, 4)):
            segs.append({"segment_id": sid, "ttl_s": rnd.choice([3600, 86400, 7 * 86400]),
                         "flags": rnd.randrange(3), "partner_id": rnd.randrange(3)})
        out.append({"user_id": u, "ts_ms": ts, "op": op, "segments": segs})
    return out


def expiry(ts_ms, ttl_s):
    t = ts_ms // 1000 + ttl_s
    return (t + GRANULARITY - 1) // GRANULARITY * GRANULARITY


def model(events, retired=None):
    """user -> sorted live entries [id, expires_at, ts_ms, flags, partner_id].
    Per (user, segment) the largest (ts_ms, removal, expiry, flags, partner)
    wins (removals win ties); an erase at T kills entries with ts_ms <= T, and
    so does a retirement {segment id: T} for that segment in every user (the
    join's winner is above T iff some entry is, so filtering it is exact)."""
    retired = retired or {}
    best, erased = {}, {}
    for ev in events:
        u = ev["user_id"]
        if ev["op"] == "ERASE_USER":
            erased[u] = max(erased.get(u, 0), ev["ts_ms"])
            continue
        for s in ev["segments"]:
            if ev["op"] == "REMOVE":
                key = (ev["ts_ms"], 1, 0, 0, 0)
            else:
                key = (ev["ts_ms"], 0, expiry(ev["ts_ms"], s["ttl_s"]), s["flags"],
                       s["partner_id"])
            k = (u, s["segment_id"])
            if k not in best or key > best[k]:
                best[k] = key
    live = {}
    for (u, sid), (ts, removal, exp, fl, pa) in best.items():
        if removal or exp <= NOW_S or ts <= erased.get(u, 0) or ts <= retired.get(sid, 0):
            continue
        live.setdefault(u, []).append({"id": sid, "expires_at": exp, "ts_ms": ts,
                                       "flags": fl, "partner_id": pa})
    users = {ev["user_id"] for ev in events}
    return {u: sorted(live.get(u, []), key=lambda e: e["id"]) for u in users}


def altered(segs):
    """A different answer for one user (CHAOS_BREAK)."""
    return (segs or []) + [{"id": 999, "expires_at": 0, "ts_ms": 0, "flags": 0,
                            "partner_id": 0}]


# ---------- brokers ----------

class MockBroker:
    """`segd dev-broker` (librdkafka's mock cluster), one per trial."""
    real = False

    def __init__(self, trial, partitions):
        p = trial.spawn([trial.segd, "dev-broker", "--partitions", str(partitions), "--topics",
                         "events,events.dlq,segments.changes"], None)
        self.prefix = ""
        for line in p.stdout:
            line = line.decode()
            if line.startswith("bootstrap="):
                self.bootstrap = line.strip().split("=", 1)[1]
                return
        raise HarnessError("dev-broker printed no bootstrap line")

    def close(self):
        pass  # the trial's stop_all ends the process


class RealCluster:
    """An Apache Kafka cluster from scripts/kafka.sh in DIR. Started (and
    owned: its brokers may be killed) when none runs there; a cluster that
    already runs is shared (scripts/test.sh): only uniquely named topics and
    groups are made on it, and its brokers are never signalled."""

    def __init__(self, directory, mine=False):
        self.dir = directory
        self.env = dict(os.environ, KAFKA_CLUSTER_DIR=directory)
        self.owned = mine  # a running cluster the caller says is this run's alone
        self.started = False
        if not self.running():
            out = self.sh("start", "3", timeout=300)
            if out.returncode != 0:
                raise HarnessError("kafka.sh start: " + out.stderr[-500:])
            self.owned = self.started = True
        with open(os.path.join(directory, "bootstrap")) as f:
            self.bootstrap = f.read().strip()
        with open(os.path.join(directory, "nodes")) as f:
            self.nodes = int(f.read())

    def sh(self, *argv, timeout=120):
        return subprocess.run(["bash", KAFKA_SH] + list(argv), env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def running(self):
        try:
            with open(os.path.join(self.dir, "nodes")) as f:
                nodes = int(f.read())
        except (OSError, ValueError):
            return False
        for n in range(1, nodes + 1):
            try:
                with open(os.path.join(self.dir, "node-%d" % n, "pid")) as f:
                    os.kill(int(f.read()), 0)
                return True
            except (OSError, ValueError):
                continue
        return False

    def must(self, *argv, timeout=120):
        out = self.sh(*argv, timeout=timeout)
        if out.returncode != 0:
            raise HarnessError("kafka.sh %s: %s" % (" ".join(argv), out.stderr.strip()[-300:]))
        return out.stdout.strip()

    def stop(self):
        if self.started:
            self.sh("stop", timeout=120)


class RealTopics:
    """One trial's topics on a real cluster: `PREFIXevents` (and .dlq,
    PREFIXsegments.changes), replication factor 3, min.insync.replicas 2."""
    real = True

    def __init__(self, cluster, partitions, prefix):
        self.cluster, self.prefix, self.bootstrap = cluster, prefix, cluster.bootstrap
        self.topics = []
        for t in ("events", "events.dlq", "segments.changes"):
            cluster.must("topic", prefix + t, str(partitions), "3", "min.insync.replicas=2")
            self.topics.append(prefix + t)

    def close(self):
        if self.topics:
            self.cluster.sh("delete-topic", *self.topics)


# ---------- processes ----------

class Trial:
    def __init__(self, segd, work, args, name, cluster=None, prefix=""):
        self.segd, self.args, self.name = segd, args, name
        self.cluster, self.prefix = cluster, prefix
        self.dir = tempfile.mkdtemp(prefix="segd-chaos-", dir=work)
        self.procs = []
        self.faults = {}
        self.kafka = None
        self.ports = {}  # member tag -> its metrics port
        self.segd_faults = []  # segd misbehaving beside the data (not a harness failure)
        self.acked_at = []  # the times of the input's delivery reports
        # a self-test shortens the waits that are expected to run out
        self.cache_s = getattr(args, "cache_s", 90)
        self.wait_s = getattr(args, "wait_s", 180)

    def log(self, name):
        return open(os.path.join(self.dir, name), "ab")

    def errlog(self, tag):
        try:
            with open(os.path.join(self.dir, "run-%s.log.err" % tag), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def spawn(self, argv, logname, env=None):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE if logname is None else self.log(logname),
                             stderr=self.log((logname or "proc") + ".err"),
                             env=dict(os.environ, **(env or {})))
        self.procs.append(p)
        return p

    def fault(self, kind):
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.kafka:
            self.kafka.close()

    # topic and group names: unique per trial on a shared cluster
    @property
    def topic(self):
        return self.prefix + "events"

    @property
    def changes(self):
        return self.prefix + "segments.changes"

    def group(self, name="chaos"):
        return self.prefix + name

    def broker(self, partitions=4):
        if self.cluster is None:
            self.kafka = MockBroker(self, partitions)
        else:
            self.kafka = RealTopics(self.cluster, partitions, self.prefix)
        self.brokers = self.kafka.bootstrap
        self.partitions = partitions

    def producer(self, conf=None):
        return Producer(dict({"bootstrap.servers": self.brokers, "linger.ms": 5, "log_level": 0,
                              "enable.idempotence": True, "acks": "all"}, **(conf or {})))

    def produce(self, events, conf=None):
        """Produces keyed by user id; conf adds producer settings (e.g. a
        partitioner)."""
        schema = avro.schema.parse(SCHEMA)
        writer = avro.io.DatumWriter(schema)
        prod = self.producer(conf)
        errors = []

        def ack(err, _msg):
            if err is not None:
                errors.append(err)
            else:
                self.acked_at.append(time.time())  # when writes went through (a note)
        for ev in events:
            buf = io.BytesIO()
            writer.write(dict(ev, source=None), avro.io.BinaryEncoder(buf))
            while True:
                try:
                    prod.produce(self.topic, key=ev["user_id"].encode(), value=buf.getvalue(),
                                 on_delivery=ack)
                    break
                except BufferError:
                    prod.poll(0.1)
            prod.poll(0)
        if prod.flush(120) != 0:
            raise HarnessError("produce: messages left undelivered after 120 s")
        if errors:
            raise HarnessError("produce: %d deliveries failed: %s" % (len(errors), errors[0]))

    def run(self, db, tag, extra=None, group="chaos", snapshot_to=None):
        """`segd run` with ports of its own (metrics.listen)."""
        port = self.ports[tag] = free_port()
        if broken("metrics-port") and tag == "b":
            self.squatter = socket.socket()
            self.squatter.bind(("127.0.0.1", port))
            self.squatter.listen(1)
        env = {"SEGD_STORE_HORIZON_S": str(HORIZON_S), "SEGD_SNAPSHOT_INTERVAL": "1",
               "SEGD_SNAPSHOT_TO": snapshot_to or os.path.join(self.dir, "snap-" + tag),
               "SEGD_SNAPSHOT_BUCKETS": "4", "SEGD_BATCH_MAX_MESSAGES": "50",
               "SEGD_METRICS_LISTEN": "127.0.0.1:%d" % port,
               "SEGD_CHANGES_TOPIC": self.changes}
        env.update(extra or {})
        with open(os.path.join(self.dir, "run-%s.log.err" % tag), "ab") as f:
            f.write(b"=== start\n")  # the joins of this start are after the last mark
        return self.spawn([self.segd, "run", "--brokers", self.brokers, "--topic", self.topic,
                           "--group", self.group(group), "--db", db,
                           "-X", "session.timeout.ms=6000"] +
                          (["-X", "debug=" + os.environ["CHAOS_KAFKA_DEBUG"]]
                           if os.environ.get("CHAOS_KAFKA_DEBUG") else []),
                          "run-" + tag + ".log", env)

    def alive(self, p, tag, when):
        if p.poll() is not None:
            raise HarnessError("segd run %s exited (%d) %s: %s" %
                               (tag, p.returncode, when, last_error(self.errlog(tag))))

    def joined(self, tag):
        """True once the latest start of member `tag` was assigned partitions."""
        log = self.errlog(tag).rsplit("=== start\n", 1)[-1]
        return any(int(n) > 0 for n in re.findall(r"partitions assigned\"? count=(\d+)", log))

    def wait_joined(self, p, tag, seconds=60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.joined(tag):
                return
            self.alive(p, tag, "before it joined the group")
            time.sleep(0.2)
        raise HarnessError("member %s never joined the group in %d s" % (tag, seconds))

    def stop(self, p, tag):
        """SIGTERM; a clean stop exits 0."""
        self.alive(p, tag, "before its stop")
        p.terminate()
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise HarnessError("segd run %s did not stop in 60 s after SIGTERM" % tag)
        if rc != 0:
            raise HarnessError("segd run %s exited %d on SIGTERM: %s" %
                               (tag, rc, last_error(self.errlog(tag))))

    # ----- progress: what "caught up" means

    def end_offsets(self, topic=None, seconds=60):
        """partition -> (low, high) watermarks. A broker error (a leader that
        just moved after a broker fault) is retried for `seconds`, then it
        is no answer."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": self.prefix + "chaos-check",
                      "log_level": 0})
        deadline, why = time.time() + seconds, None
        try:
            while time.time() < deadline:
                try:
                    return {p: c.get_watermark_offsets(TopicPartition(topic or self.topic, p),
                                                       timeout=10)
                            for p in range(self.partitions)}
                except Exception as e:  # noqa: BLE001 (retried, then reported)
                    why = e
                    time.sleep(1)
            raise HarnessError("watermarks of %s: %s" % (topic or self.topic, why))
        finally:
            c.close()

    def committed(self, group):
        """The group's committed offsets per partition (librdkafka's
        committed(); -1001 = none)."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": group})
        try:
            tps = c.committed([TopicPartition(self.topic, p) for p in range(self.partitions)],
                              timeout=10)
            return {tp.partition: tp.offset for tp in tps if tp.error is None}
        except Exception:  # noqa: BLE001 (retried by the caller until its deadline)
            return {}
        finally:
            c.close()

    def store_offsets(self, db):
        """A stopped store's input offsets (`segd offsets show` opens the
        store read-write: refused while segd run holds it)."""
        out = subprocess.run([self.segd, "offsets", "show", "--db", db, "--json"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise HarnessError("segd offsets show --db %s: %s" % (db, out.stderr.strip()[-300:]))
        return {o["partition"]: o["next_offset"] for o in json.loads(out.stdout)["offsets"]
                if o["topic"] == self.topic}

    def metrics(self, tag):
        """The running member's /metrics as {series with labels: value}."""
        c = http.client.HTTPConnection("127.0.0.1", self.ports[tag], timeout=5)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read().decode()
            if r.status != 200:
                raise ValueError("HTTP %d" % r.status)
        finally:
            c.close()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def member_done(self, tag):
        """Member `tag` holds every partition, each with lag 0 (its stored
        offset at the high watermark), and its outbox is empty; or why not."""
        try:
            m = self.metrics(tag)
        except (OSError, http.client.HTTPException, ValueError) as e:
            return "metrics of %s unreadable: %s" % (tag, e)
        lags = [m.get('segd_consumer_lag_messages{topic="%s",partition="%d"}' % (self.topic, p))
                for p in range(self.partitions)]
        if m.get("segd_assigned_partitions") != self.partitions or lags != [0] * self.partitions:
            return "%s: assigned %s, lags %s" % (tag, m.get("segd_assigned_partitions"), lags)
        if m.get("segd_outbox_entries") != 0:
            return "%s: outbox %s" % (tag, m.get("segd_outbox_entries"))
        return None

    def backlog(self, tags):
        """Input left to apply and outbox entries left to publish, summed
        over the members' /metrics (None when one cannot be read)."""
        total = 0
        for tag in tags:
            try:
                m = self.metrics(tag)
            except (OSError, http.client.HTTPException, ValueError):
                return None
            total += sum(v for k, v in m.items()
                         if k.startswith("segd_consumer_lag_messages{") or
                         k == "segd_outbox_entries")
        return total

    def wait_caught_up(self, members, last, group="chaos", grace_s=30):
        """Until the group's committed offsets equal the input's end offsets
        and member `last` (which must hold every partition) has applied and
        published everything, while every member in `members` ({tag: Popen})
        runs. Returns the end offsets (the caller checks them against the
        stopped store). A member done for grace_s while the group's commits
        stay below the end is a segd fault (commits not re-sent), noted in
        self.segd_faults; the trial goes on to judge the data."""
        ends = {p: hi for p, (_, hi) in self.end_offsets().items()}
        g = self.group("no-such-group" if broken("wait-group") else group)
        deadline = time.time() + self.wait_s
        why, done_since = "no attempt", None
        while time.time() < deadline:
            for tag, p in members.items():
                self.alive(p, tag, "while catching up")
            com = self.committed(g)
            mine = self.member_done(last)
            if com == ends and mine is None:
                return ends
            why = "group %s committed %s" % (g, com) if com != ends else mine
            if mine is None:
                done_since = done_since or time.time()
                if time.time() - done_since > min(grace_s, self.wait_s / 2) and \
                        not broken("wait-group"):
                    self.segd_faults.append(
                        "commits stuck: %s applied and published everything %d s ago, group "
                        "committed %s, end offsets %s" % (last, grace_s, com, ends))
                    return ends
            else:
                done_since = None
            time.sleep(0.5)
        raise HarnessError("not caught up in %d s: end offsets %s, %s" % (self.wait_s, ends, why))

    def check_offsets(self, db, ends):
        """After the stop: the store's offsets are the end offsets (else the
        wait ended too early)."""
        got = self.store_offsets(db)
        if got != ends:
            raise HarnessError("stopped store %s at offsets %s, not the end offsets %s" %
                               (db, got, ends))

    def dlq_count(self):
        """Dead letters in the DLQ topic (every instance's, killed ones too),
        from its watermarks."""
        return sum(hi - lo for lo, hi in self.end_offsets(self.topic + ".dlq").values())

    # ----- readers

    def get_all(self, db, users):
        """The store's answer for every user; HarnessError when it cannot be
        read whole."""
        out = subprocess.run([self.segd, "get", "--db", db, "--now", str(NOW_S), "--json"] +
                             sorted(users), capture_output=True, text=True)
        if out.returncode != 0:
            raise HarnessError("segd get --db %s exited %d: %s" %
                               (db, out.returncode, out.stderr.strip()[-300:]))
        got = {j["user_id"]: j["segments"] for j in map(json.loads, out.stdout.splitlines())}
        if set(got) != set(users):
            raise HarnessError("segd get answered %d of %d users" % (len(got), len(users)))
        if broken("store-answer"):
            u = sorted(got)[0]
            got[u] = altered(got[u])
        return got

    def store_diff(self, db, want):
        got = self.get_all(db, want)
        return sorted(u for u in want if got[u] != want[u])

    def cache(self, snapshot, from_beginning):
        port = free_port()
        argv = [self.segd, "cache", "--snapshot", snapshot, "--brokers", self.brokers,
                "--changes", self.changes, "--listen", "127.0.0.1:%d" % port,
                "--now", str(NOW_S), "--horizon-s", str(HORIZON_S)]
        if from_beginning:
            argv.append("--from-beginning")
        p = self.spawn(argv, "cache-%d.log" % port)
        return p, port

    def cache_read(self, port, want):
        """One complete read of every user: user -> segments, or an
        exception (OSError, HTTPException, ValueError) when any user has no
        answer. 404 is a user the cache never saw: no live segments."""
        got = {}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            for u in want:
                c.request("GET", "/v1/users/" + u)
                r = c.getresponse()
                body = r.read()
                if r.status == 404:
                    got[u] = []
                elif r.status == 200:
                    got[u] = json.loads(body).get("segments")
                else:
                    raise ValueError("HTTP %d for %s" % (r.status, u))
        finally:
            c.close()
        if broken("cache-answer"):
            u = sorted(got)[0]
            got[u] = altered(got[u])
        return got

    def cache_equals(self, p, port, want, deadline):
        """Polls until the cache answers every user as the model says; the
        users of the last complete read that differ. HarnessError when no
        read was ever complete (unreachable, every answer an error) or the
        cache exited."""
        if broken("cache-port"):
            port = free_port()  # nothing listens there
        bad, answered, why = None, 0, "no attempt"
        while time.time() < deadline:
            if p.poll() is not None:
                raise HarnessError("segd cache exited (%d)" % p.returncode)
            try:
                got = self.cache_read(port, want)
                answered += 1
                bad = sorted(u for u in want if got[u] != want[u])
                if not bad:
                    return []
            except (OSError, http.client.HTTPException, ValueError) as e:
                why = "%s: %s" % (type(e).__name__, e)
            time.sleep(0.5)
        if bad is None:
            raise HarnessError("segd cache on port %d never answered every user (%s)" %
                               (port, why))
        return bad

    def empty_snapshot(self):
        """A snapshot of an empty store: the start of a cache that joins the
        whole change topic from its beginning."""
        empty = os.path.join(self.dir, "empty-snap")
        nothing = os.path.join(self.dir, "nothing.jsonl")
        open(nothing, "w").close()
        for argv in ([self.segd, "backfill", "--no-changes", "--db",
                      os.path.join(self.dir, "emptydb"), nothing],
                     [self.segd, "snapshot", "export", "--db", os.path.join(self.dir, "emptydb"),
                      "--to", empty, "--topic", self.topic, "--buckets", "4",
                      "--now", str(NOW_S)]):
            out = subprocess.run(argv, capture_output=True, text=True)
            if out.returncode != 0:
                raise HarnessError("%s: %s" % (" ".join(argv[:3]), out.stderr.strip()[-300:]))
        return empty

    def check_caches(self, want, snapshot):
        """Snapshot + tail, and the whole change topic from its beginning:
        label -> users that differ."""
        results = {}
        for label, snap, fb in (("snapshot+tail", snapshot, False),
                                ("whole topic", self.empty_snapshot(), True)):
            p, port = self.cache(snap, fb)
            try:
                results[label] = self.cache_equals(p, port, want, time.time() + self.cache_s)
            finally:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        return results


def last_error(log):
    lines = [line for line in log.splitlines() if line.strip() and line != "=== start"]
    return lines[-1][-300:] if lines else "(no log)"
