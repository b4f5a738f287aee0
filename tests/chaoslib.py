"""Shared pieces of the chaos trials (tests/chaos.py, tests/fleet.py): the
deterministic workload, an independent model of docs/design.md §3, and the
processes of one trial (dev broker, `segd run`, producing, reading stores
with `segd get --json`, edge caches compared over HTTP)."""
import http.client, io, json, os, random, socket, subprocess, tempfile, time

import avro.io
import avro.schema
from confluent_kafka import Consumer, Producer

NOW_S = int(time.time()) // 3600 * 3600  # segd run keeps the wall clock (from_future)
GRANULARITY = 3600
HORIZON_S = 40 * 86400
SCHEMA = """{"type":"record","name":"SegmentEvent","namespace":"segd","fields":[
 {"name":"user_id","type":"string"},{"name":"ts_ms","type":"long"},
 {"name":"op","type":{"type":"enum","name":"Op","symbols":["UPSERT","REMOVE","ERASE_USER"]}},
 {"name":"segments","type":{"type":"array","items":{"type":"record","name":"SegmentUpdate",
  "fields":[{"name":"segment_id","type":"long"},{"name":"ttl_s","type":"int"},
  {"name":"flags","type":"int","default":0},{"name":"partner_id","type":"int","default":0}]}}},
 {"name":"source","type":["null","string"],"default":null}]}"""


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


# ---------- processes ----------

class Trial:
    def __init__(self, segd, work, args, name):
        self.segd, self.args, self.name = segd, args, name
        self.dir = tempfile.mkdtemp(prefix="segd-chaos-", dir=work)
        self.procs = []
        self.faults = {}

    def log(self, name):
        return open(os.path.join(self.dir, name), "ab")

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

    def broker(self, partitions=4):
        p = self.spawn([self.segd, "dev-broker", "--partitions", str(partitions), "--topics",
                        "events,events.dlq,segments.changes"], None)
        for line in p.stdout:
            line = line.decode()
            if line.startswith("bootstrap="):
                self.brokers = line.strip().split("=", 1)[1]
                return
        raise RuntimeError("dev-broker printed no bootstrap line")

    def produce(self, events, conf=None):
        """Produces keyed by user id; conf adds producer settings (e.g. a
        partitioner)."""
        schema = avro.schema.parse(SCHEMA)
        writer = avro.io.DatumWriter(schema)
        prod = Producer(dict({"bootstrap.servers": self.brokers, "linger.ms": 5,
                              "enable.idempotence": True}, **(conf or {})))
        for ev in events:
            buf = io.BytesIO()
            writer.write(dict(ev, source=None), avro.io.BinaryEncoder(buf))
            prod.produce("events", key=ev["user_id"].encode(), value=buf.getvalue())
            prod.poll(0)
        if prod.flush(60) != 0:
            raise RuntimeError("produce: messages left undelivered")

    def run(self, db, tag, extra=None, group="chaos", snapshot_to=None):
        env = {"SEGD_STORE_HORIZON_S": str(HORIZON_S), "SEGD_SNAPSHOT_INTERVAL": "1",
               "SEGD_SNAPSHOT_TO": snapshot_to or os.path.join(self.dir, "snap-" + tag),
               "SEGD_SNAPSHOT_BUCKETS": "4", "SEGD_BATCH_MAX_MESSAGES": "50"}
        env.update(extra or {})
        return self.spawn([self.segd, "run", "--brokers", self.brokers, "--topic", "events",
                           "--group", group, "--db", db, "-X", "session.timeout.ms=6000"] +
                          (["-X", "debug=" + os.environ["CHAOS_KAFKA_DEBUG"]]
                           if os.environ.get("CHAOS_KAFKA_DEBUG") else []),
                          "run-" + tag + ".log", env)

    def get_all(self, db, users):
        out = subprocess.run([self.segd, "get", "--db", db, "--now", str(NOW_S), "--json"] +
                             sorted(users), capture_output=True, text=True)
        if out.returncode != 0:
            return None
        return {j["user_id"]: j["segments"] for j in map(json.loads, out.stdout.splitlines())}

    def dlq_count(self):
        """Dead letters in events.dlq (every instance's, killed ones too)."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": "chaos-dlq-check",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["events.dlq"])
        n, quiet = 0, time.time() + 5
        while time.time() < quiet:
            m = c.poll(0.5)
            if m is not None and not m.error():
                n += 1
                quiet = time.time() + 3
        c.close()
        return n

    def cache(self, snapshot, from_beginning):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        argv = [self.segd, "cache", "--snapshot", snapshot, "--brokers", self.brokers,
                "--changes", "segments.changes", "--listen", "127.0.0.1:%d" % port,
                "--now", str(NOW_S), "--horizon-s", str(HORIZON_S)]
        if from_beginning:
            argv.append("--from-beginning")
        p = self.spawn(argv, "cache-%d.log" % port)
        return p, port

    def cache_equals(self, port, want, deadline):
        """Polls until the cache answers every user as the model says."""
        bad = list(want)
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                bad = []
                for u, segs in want.items():
                    c.request("GET", "/v1/users/" + u)
                    r = c.getresponse()
                    body = r.read()
                    # 404 is a user the cache never saw: right when nothing is live
                    if r.status not in (200, 404) or json.loads(body).get("segments") != segs:
                        bad.append(u)
                c.close()
            except (OSError, http.client.HTTPException, ValueError):
                pass
            if not bad:
                return []
            time.sleep(0.5)
        return bad

    def check_caches(self, want, snapshot):
        """Snapshot + tail (snapshot None: not checked), and the whole change
        topic from its beginning."""
        results = {"snapshot+tail": []}
        empty = os.path.join(self.dir, "empty-snap")
        nothing = os.path.join(self.dir, "nothing.jsonl")
        open(nothing, "w").close()
        subprocess.run([self.segd, "backfill", "--no-changes", "--db",
                        os.path.join(self.dir, "emptydb"), nothing],
                       check=True, capture_output=True)  # creates the empty store
        subprocess.run([self.segd, "snapshot", "export", "--db", os.path.join(self.dir, "emptydb"),
                        "--to", empty, "--topic", "events", "--buckets", "4",
                        "--now", str(NOW_S)],
                       check=True, capture_output=True)
        checks = [("whole topic", empty, True)]
        if snapshot:
            checks.insert(0, ("snapshot+tail", snapshot, False))
        for label, snap, fb in checks:
            p, port = self.cache(snap, fb)
            bad = self.cache_equals(port, want, time.time() + 90)
            p.terminate()
            p.wait(timeout=10)
            results[label] = bad
        return results


def wait_store(t, db, want, deadline):
    got = None
    while time.time() < deadline:
        got = t.get_all(db, want)
        if got == want:
            return True
        time.sleep(0.5)
    return False
