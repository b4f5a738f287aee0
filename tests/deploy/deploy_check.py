#!/usr/bin/env python3
"""Checks the deployment files against segd itself, since no Docker engine
runs where segd is built: docker/compose.yaml (every referenced file exists;
brokers, registry, snapshot target, topics, ports and memory limit agree with
the configuration segd run computes from docker/segd.conf and the image's
environment, and with segd's defaults), docker/prometheus.yml (scrapes each
segd service on its metrics port), docker/Dockerfile (Debian 12, non-root,
HEALTHCHECK on /healthz at the metrics port, the runtime stage installs every
library the binary links, install prefix = ENTRYPOINT), the binary (names no
source or build path), docker/segd.service (sandboxing, MemoryMax from
memory.limit.mb; `systemd-analyze verify`), `cmake --install` (bin/segd,
share/man/man1/segd.1) and the man page (names every command, renders without
warnings).

usage: deploy_check.py SEGD_BIN SOURCE_DIR BUILD_DIR
"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    sys.exit("deploy_check: python3-yaml is missing (bash scripts/install-deps.sh installs it)")

SEGD, SRC, BUILD = (os.path.abspath(a) for a in sys.argv[1:4])
DOCKER = os.path.join(SRC, "docker")
failures = []
notes = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def clean_env(extra=None):
    """The test's environment without SEGD_* (ctest sets some), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGD_")}
    env.update(extra or {})
    return env


def run(args, env=None, cwd=None):
    return subprocess.run(args, capture_output=True, text=True, env=env or clean_env(),
                          cwd=cwd, timeout=60)


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1].strip("/"))


def host_of(url):
    m = re.match(r"^(?:\w+://)?([^/:]+)(?::(\d+))?", url)
    return m.group(1), int(m.group(2) or (443 if url.startswith("https") else 80))


# ---------- segd's own view: defaults and the compose service's effective config ----------

def print_config(args, env):
    """segd run --print-config: {key: value}; {} (and a failure) when it
    cannot be read."""
    r = run([SEGD, "run", "--print-config"] + args, env=env)
    if r.returncode != 0:
        check(False, "segd run --print-config %s: exit %d: %s" % (args, r.returncode,
                                                                  r.stderr.strip()))
        return {}
    conf = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*=\s*(.*?)\s*$", line)
        if m:
            conf[m.group(1)] = m.group(2)
    return conf


def dockerfile_stages():
    """[(base image, alias, [(instruction, args)])] of docker/Dockerfile."""
    text = re.sub(r"\\\n", " ", open(os.path.join(DOCKER, "Dockerfile")).read())
    stages = []
    args = {}  # ARGs before the first FROM, with their defaults (FROM ${BASE})
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "ARG" and not stages:
            name, _, default = rest.strip().partition("=")
            args[name] = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), default)
        elif instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), "?"), m.group(1))
            stages.append((image, m.group(2), []))
        else:
            stages[-1][2].append((instr, rest.strip()))
    return stages


def debian12(image):
    """debian:12, debian:12-slim, or one imported as .../debian:12 (localhost/debian:12)."""
    return re.fullmatch(r"(?:[\w.\-:]+/)?debian:12(?:-slim)?", image) is not None


def image_env(stage):
    env = {}
    for instr, args in stage[2]:
        if instr == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", args):
                env[k] = v
    return env


def host_path(service, container_path):
    """The host file a service's volume maps container_path from, or None."""
    for vol in service.get("volumes", []):
        parts = vol.split(":")
        if len(parts) >= 2 and parts[1] == container_path and parts[0].startswith("."):
            return os.path.normpath(os.path.join(DOCKER, parts[0]))
    return None


def service_config(compose, name, env_image, defaults):
    """segd run's effective config in service `name`: its --config file (through
    its volume), the image's and the service's environment, its flags."""
    svc = compose["services"][name]
    cmd = list(svc["command"])
    check(cmd[0] == "run", "%s: command is not segd run: %s" % (name, cmd))
    args = []
    for i, a in enumerate(cmd[1:], 1):
        if i > 1 and cmd[i - 1] == "--config":
            hp = host_path(svc, a)
            check(hp is not None and os.path.isfile(hp),
                  "%s: --config %s is not mounted from a file in docker/" % (name, a))
            a = hp or a
        args.append(a)
    env = dict(env_image)
    env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
    if defaults and "metrics.listen" not in defaults and "SEGD_METRICS_LISTEN" in env:
        # built before the metrics branch: it would refuse the variable; the
        # metrics checks below still hold the image's value to the scrape config
        check(False, "segd run --print-config has no metrics.listen key, which the image's "
              "SEGD_METRICS_LISTEN needs")
        metrics_env = env.pop("SEGD_METRICS_LISTEN")
    else:
        metrics_env = None
    effective = print_config(args, clean_env(env))
    if effective and metrics_env:
        effective["metrics.listen"] = metrics_env
    return effective


# ---------- the checks ----------

def check_files(compose):
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                check(os.path.exists(os.path.join(DOCKER, src)),
                      "%s: volume source %s does not exist" % (name, src))
            else:
                check(src in (compose.get("volumes") or {}),
                      "%s: named volume %s is not declared" % (name, src))
        build = svc.get("build")
        if build:
            ctx = os.path.normpath(os.path.join(DOCKER, build["context"]))
            check(os.path.isfile(os.path.join(ctx, build["dockerfile"])),
                  "%s: no %s in %s" % (name, build["dockerfile"], ctx))
            check(os.path.isfile(os.path.join(ctx, "CMakeLists.txt")),
                  "%s: build context %s is not the repository root" % (name, ctx))
        for dep in svc.get("depends_on") or []:
            check(dep in compose["services"], "%s depends on unknown service %s" % (name, dep))


def compose_topics(compose):
    env = compose["services"]["kafka-init"]["environment"]
    topics = {}
    for t in env["TOPICS"].split():
        n, p = t.split(":")
        topics[n] = int(p)
    script = compose["services"]["kafka-init"]["command"][0]
    check("kafka-topics.sh" in script and "$$TOPICS" in script,
          "kafka-init does not create $TOPICS with kafka-topics.sh")
    return topics


def check_kafka_side(compose, eff, defaults):
    topics = compose_topics(compose)
    inputs = eff.get("topics", "").split(",")
    for t in inputs + [eff.get("dlq.topic"), eff.get("changes.topic")]:
        if t:
            check(t in topics, "topic %s (segd run) is not created by kafka-init" % t)
    if defaults:
        check(eff.get("changes.topic") == defaults.get("changes.topic"),
              "changes.topic %s is not segd's default %s" % (eff.get("changes.topic"),
                                                             defaults.get("changes.topic")))
        # the default dead-letter topic is "<first input topic>" + a suffix
        suffix = defaults.get("dlq.topic", "")[len("probe"):]
        check(eff.get("dlq.topic") == inputs[0] + suffix,
              "dlq.topic %s is not segd's default %s%s" % (eff.get("dlq.topic"), inputs[0],
                                                           suffix))
    changes = eff.get("changes.topic", "segments.changes")
    for t in inputs:
        check(topics.get(changes, 0) >= topics.get(t, 0),
              "change topic %s has fewer partitions than %s (segd run refuses it)" % (changes, t))
    # brokers: the kafka service's PLAINTEXT listener
    kenv = compose["services"]["kafka"]["environment"]
    adv = kenv["KAFKA_ADVERTISED_LISTENERS"].split(",")
    for b in eff.get("brokers", "").split(","):
        check("PLAINTEXT://" + b in adv, "brokers %s is not an advertised listener %s" % (b, adv))
    cache = compose["services"]["segd-cache"]["command"]
    flag = lambda f: cache[cache.index(f) + 1] if f in cache else None
    check(flag("--brokers") == eff.get("brokers"), "segd cache --brokers %s, segd run %s" %
          (flag("--brokers"), eff.get("brokers")))
    check(flag("--changes") == changes, "segd cache --changes %s, segd run's changes.topic %s" %
          (flag("--changes"), changes))
    snap = eff.get("snapshot.to", "").rstrip("/") + "/" + inputs[0]
    check(flag("--snapshot") == snap, "segd cache --snapshot %s, segd run exports to %s" %
          (flag("--snapshot"), snap))
    return flag


def check_http_services(compose, eff):
    reg_host, reg_port = host_of(eff.get("input.schema.registry.url", ""))
    renv = compose["services"].get(reg_host, {}).get("environment", {})
    check("confluentinc/cp-schema-registry" in compose["services"].get(reg_host, {}).get(
        "image", ""), "registry host %s is not the cp-schema-registry service" % reg_host)
    check(port_of(renv.get("SCHEMA_REGISTRY_LISTENERS", ":0")) == reg_port,
          "schema registry listens on %s, segd uses port %d" %
          (renv.get("SCHEMA_REGISTRY_LISTENERS"), reg_port))
    snap_host, snap_port = host_of(eff.get("snapshot.to", ""))
    svc = compose["services"].get(snap_host)
    if check(svc is not None, "snapshot.to host %s is no service" % snap_host):
        conf = host_path(svc, "/etc/nginx/conf.d/default.conf")
        text = open(conf).read() if conf else ""
        check(re.search(r"listen\s+%d;" % snap_port, text) is not None,
              "nginx does not listen on %d" % snap_port)
        check(re.search(r"dav_methods\s+PUT\s+DELETE;", text) and "create_full_put_path on"
              in text, "nginx snapshot target lacks WebDAV PUT/DELETE")


def cache_listen_default():
    r = run([SEGD, "cache", "--help"])
    m = re.search(r"--listen: default (\S+?);?\s", r.stdout + r.stderr)
    check(m is not None, "segd cache --help names no --listen default")
    return m.group(1).rstrip(";") if m else "127.0.0.1:0"


def check_metrics(compose, eff, defaults, img_env, cache_flag):
    listen = eff.get("metrics.listen") or img_env.get("SEGD_METRICS_LISTEN", "")
    check(listen.startswith("0.0.0.0:"), "segd run in a container listens on %r, not 0.0.0.0"
          % listen)
    port = port_of(listen)
    if defaults and "metrics.listen" in defaults:
        check(port == port_of(defaults["metrics.listen"]),
              "metrics port %d is not segd's default %s" % (port, defaults["metrics.listen"]))
    else:
        check(False, "segd run --print-config has no metrics.listen default: the metrics "
              "port not compared")
    prom = yaml.safe_load(open(os.path.join(DOCKER, "prometheus.yml")))
    targets = {t for job in prom["scrape_configs"] for sc in job.get("static_configs", [])
               for t in sc["targets"]}
    # segd cache serves /metrics on its --listen port (its --help says so)
    cl = cache_flag("--listen")
    cache_port = port_of(cl or ":0")
    if not re.search(r"--listen:.*?/metrics", run([SEGD, "cache", "--help"]).stdout, re.S):
        check(False, "segd cache --help does not say --listen serves /metrics: its scrape "
              "target not checked against it")
    check("segd-run:%d" % port in targets, "prometheus.yml does not scrape segd-run:%d (has %s)"
          % (port, sorted(targets)))
    check("segd-cache:%d" % cache_port in targets, "prometheus.yml does not scrape "
          "segd-cache:%d, its --listen port (has %s)" % (cache_port, sorted(targets)))
    exposed = [str(e) for e in compose["services"]["segd-run"].get("expose", [])]
    check(str(port) in exposed, "segd-run does not expose its metrics port %d" % port)
    hc = " ".join(compose["services"]["segd-cache"].get("healthcheck", {}).get("test", []))
    check("127.0.0.1:%d/healthz" % cache_port in hc,
          "segd-cache's healthcheck does not ask /healthz on its --listen port: %r" % hc)
    prom_svc = compose["services"]["prometheus"]
    check(host_path(prom_svc, "/etc/prometheus/prometheus.yml") ==
          os.path.join(DOCKER, "prometheus.yml"), "prometheus does not mount docker/prometheus.yml")
    # the cache's HTTP port: segd cache's default port, published
    check(cl is not None and cl.startswith("0.0.0.0:") and
          port_of(cl) == port_of(cache_listen_default()),
          "segd cache --listen %s: want 0.0.0.0 and the default port of %s" %
          (cl, cache_listen_default()))
    check(any(str(p).endswith(":%d" % port_of(cl or ":0"))
              for p in compose["services"]["segd-cache"].get("ports", [])),
          "segd cache's port is not published")
    return port


def check_memory(compose, eff, defaults):
    limit = int(eff.get("memory.limit.mb") or 0)
    if not check(limit > 0, "no memory.limit.mb in segd run's configuration"):
        return
    mem = str(compose["services"]["segd-run"].get("mem_limit", "0m"))
    m = re.match(r"^(\d+)m$", mem)
    check(m and int(m.group(1)) >= math.ceil(limit * 1.1),
          "segd-run mem_limit %s below memory.limit.mb %d + 10 %%" % (mem, limit))
    unit = open(os.path.join(DOCKER, "segd.service")).read()
    m = re.search(r"^MemoryMax=(\d+)M$", unit, re.M)
    default = int((defaults or {}).get("memory.limit.mb") or limit)
    check(m and int(m.group(1)) >= math.ceil(default * 1.1),
          "segd.service MemoryMax below the default memory.limit.mb %d + 10 %%" % default)


def needed_packages():
    """Debian packages of the libraries the binary links directly."""
    r = run(["readelf", "-d", SEGD])
    pkgs = {}
    for lib in re.findall(r"Shared library: \[(.+?)\]", r.stdout):
        if lib.startswith(("libasan", "libubsan", "libtsan", "libm.", "libc.", "libpthread")):
            continue
        q = run(["dpkg", "-S", "*/" + lib])
        pkgs[lib] = q.stdout.split(":")[0] if q.returncode == 0 else None
    return pkgs


def check_dockerfile():
    stages = dockerfile_stages()
    check(len(stages) >= 2, "Dockerfile is not multi-stage")
    build, final = stages[0], stages[-1]
    check(debian12(build[0]) and build[1], "build stage is not debian:12 AS name: %s" % build[0])
    check(debian12(final[0]), "runtime stage is not Debian 12: %s" % final[0])
    instrs = final[2]
    users = [a for i, a in instrs if i == "USER"]
    check(users and users[-1] not in ("root", "0"), "runtime stage runs as root")
    hc = " ".join(a for i, a in instrs if i == "HEALTHCHECK")
    check("/healthz" in hc, "no HEALTHCHECK on /healthz")
    env = image_env(final)
    if "${SEGD_METRICS_LISTEN##*:}" in hc:
        port = port_of(env.get("SEGD_METRICS_LISTEN", ":0"))
        check(port > 0, "HEALTHCHECK's port variable SEGD_METRICS_LISTEN is not set")
    else:
        check(False, "HEALTHCHECK does not use the metrics port (SEGD_METRICS_LISTEN)")
    installs = " ".join(a for i, a in instrs if i == "RUN")
    for lib, pkg in needed_packages().items():
        if pkg is None:
            notes.append("%s: no Debian package found (dpkg -S)" % lib)
            continue
        prio = run(["dpkg-query", "-W", "-f=${Priority}", pkg]).stdout
        check(re.search(r"\b%s\b" % re.escape(pkg), installs) or prio == "required",
              "the runtime stage does not install %s (for %s)" % (pkg, lib))
    entry = " ".join(a for i, a in instrs if i == "ENTRYPOINT")
    prefix = re.search(r"cmake --install build --prefix (\S+)", " ".join(
        a for i, a in build[2] if i == "RUN"))
    copy = [a for i, a in instrs if i == "COPY" and prefix and prefix.group(1) in a]
    check(prefix and copy, "runtime stage does not copy the install prefix")
    if prefix and copy:
        dest = copy[0].split()[-1].rstrip("/")
        check('"%s/bin/segd"' % dest in entry, "ENTRYPOINT %s is not %s/bin/segd" % (entry, dest))
    # the whole context, last (before it only files the package layer needs)
    copies = [a for i, a in build[2] if i == "COPY"]
    check(copies and copies[-1].split()[0] == ".",
          "build stage does not copy the whole context last: %s" % copies)
    # COPY . . must not bring a local build tree (its CMakeCache.txt names another path)
    ignore = os.path.join(SRC, ".dockerignore")
    patterns = [l.strip() for l in open(ignore) if l.strip() and not l.startswith("#")] \
        if os.path.isfile(ignore) else []
    for tree in ("build", "build-asan"):
        check(any(re.fullmatch(p.replace("*", ".*"), tree) for p in patterns),
              ".dockerignore does not keep %s/ out of the build context" % tree)
    return env


def check_binary_names_no_tree():
    """Nothing reads the source or build tree at run time: the binary (less its
    debug info, which names the sources for debuggers) holds neither path."""
    with tempfile.TemporaryDirectory() as d:
        stripped = os.path.join(d, "segd")
        r = run(["objcopy", "--strip-debug", SEGD, stripped])
        if not check(r.returncode == 0, "objcopy: %s" % r.stderr):
            return
        data = open(stripped, "rb").read()
        for tree in {SRC, BUILD}:
            # sanitizer builds keep source file names for their reports: those
            # name .c/.h files and are never opened; anything else would be
            paths = set(re.findall(re.escape(tree.encode()) + rb"[\w./+-]*", data))
            opened = sorted(p.decode() for p in paths if not re.search(rb"\.[ch]$", p))
            check(not opened, "the binary names %s (read at run time?)" % opened[:5])
        check(b"schemas/segment_event.avsc" not in data, "the binary names a schema file")


def check_install_and_man():
    with tempfile.TemporaryDirectory() as d:
        r = run(["cmake", "--install", BUILD, "--prefix", d])
        if not check(r.returncode == 0, "cmake --install: %s" % (r.stdout + r.stderr)):
            return
        binp, man = os.path.join(d, "bin", "segd"), os.path.join(d, "share/man/man1/segd.1")
        check(os.access(binp, os.X_OK), "cmake --install put no bin/segd")
        check(os.path.isfile(man), "cmake --install put no share/man/man1/segd.1")
        if not os.path.isfile(man):
            return
        r = run([binp, "help"])
        commands = re.findall(r"^  ([a-z][a-z-]+)\s", r.stdout + r.stderr, re.M)
        check(len(commands) >= 10, "segd help lists no commands: %s" % r.stdout)
        text = open(man).read()
        synopsis = text.split(".SH SYNOPSIS", 1)[-1].split(".SH DESCRIPTION", 1)[0]
        for c in commands + ["help"]:
            check(re.search(r"^\.B segd %s\b" % re.escape(c.replace("-", r"\-")), synopsis,
                            re.M),
                  "man page SYNOPSIS lacks `segd %s`" % c)
        for section in ("SIGNALS", "EXIT STATUS", "FILES", "CONFIGURATION"):
            check(".SH " + section in text, "man page has no %s section" % section)
        if shutil.which("groff"):
            r = run(["groff", "-man", "-Tutf8", "-ww", "-z", man])
            check(r.returncode == 0 and not r.stderr.strip(),
                  "groff warns on segd.1: %s" % r.stderr.strip())
        else:
            check(False, "groff not installed (scripts/install-deps.sh installs groff-base): "
                  "man page rendering not checked")
        if shutil.which("man"):
            r = run(["man", "--warnings", "-l", man], env=clean_env({"MANWIDTH": "80"}))
            check(r.returncode == 0 and "SYNOPSIS" in r.stdout and not r.stderr.strip(),
                  "man -l segd.1: %s" % r.stderr.strip())
        else:
            check(False, "man not installed (scripts/install-deps.sh installs man-db): "
                  "man -l segd.1 not checked")
        check_unit(binp)


def check_unit(installed_segd):
    path = os.path.join(DOCKER, "segd.service")
    unit = open(path).read()
    want = {"Type": "simple", "User": "segd", "ProtectSystem": "strict",
            "NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectHome": "yes",
            "Restart": "on-failure"}
    for k, v in want.items():
        check(re.search(r"^%s=%s$" % (k, re.escape(v)), unit, re.M),
              "segd.service lacks %s=%s" % (k, v))
    rw = re.search(r"^ReadWritePaths=(.+)$", unit, re.M)
    check(rw and "/var/lib/segd" in rw.group(1).split(), "segd.service: store not writable")
    m = re.search(r"^ExecStart=(\S+) run --config (\S+)$", unit, re.M)
    check(m and m.group(1) == "/usr/local/bin/segd",
          "segd.service ExecStart is not /usr/local/bin/segd run --config FILE")
    if not shutil.which("systemd-analyze"):
        check(False, "systemd-analyze not installed (scripts/install-deps.sh installs "
              "systemd): segd.service not verified")
        return
    with tempfile.TemporaryDirectory() as d:
        # verify needs the ExecStart binary: the one cmake --install just put down
        test_unit = os.path.join(d, "segd.service")
        open(test_unit, "w").write(unit.replace("ExecStart=/usr/local/bin/segd",
                                                "ExecStart=" + installed_segd))
        r = run(["systemd-analyze", "verify", "--man=no", test_unit])
        # verify reports unknown keys and bad values on stderr yet exits 0
        check(r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(),
              "systemd-analyze verify segd.service: %s" % (r.stdout + r.stderr).strip())


def main():
    compose = yaml.safe_load(open(os.path.join(DOCKER, "compose.yaml")))
    for s in ("kafka", "kafka-init", "schema-registry", "snapshots", "segd-run", "segd-cache",
              "prometheus"):
        check(s in compose["services"], "compose.yaml has no %s service" % s)
    check(compose["services"]["kafka"]["image"].startswith("apache/kafka:") and
          "broker,controller" in compose["services"]["kafka"]["environment"][
              "KAFKA_PROCESS_ROLES"], "kafka is not apache/kafka in KRaft mode")
    # the Kafka the tests run (scripts/kafka.sh's KAFKA_VERSION, README's "tested against")
    tested = re.search(r"^KAFKA_VERSION=(\S+)", open(os.path.join(SRC, "scripts", "kafka.sh")).read(),
                       re.M)
    for s in ("kafka", "kafka-init"):
        check(tested and compose["services"][s]["image"] == "apache/kafka:" + tested.group(1),
              "%s: image %s is not the tested Apache Kafka %s" % (
                  s, compose["services"][s]["image"], tested and tested.group(1)))
    check(compose["services"]["snapshots"]["image"].startswith("nginx"), "snapshots: not nginx")
    check(compose["services"]["segd-cache"]["command"][0] == "cache", "segd-cache: not segd cache")
    check_files(compose)
    img_env = check_dockerfile()
    defaults = print_config(["--brokers", "probe:9092", "--topic", "probe", "--group", "probe",
                             "--db", "/nonexistent"], clean_env())
    eff = service_config(compose, "segd-run", img_env, defaults)
    if eff:  # else segd run refused the service's configuration: said above
        cache_flag = check_kafka_side(compose, eff, defaults)
        check_http_services(compose, eff)
        check_metrics(compose, eff, defaults, img_env, cache_flag)
        check_memory(compose, eff, defaults)
    check_binary_names_no_tree()
    check_install_and_man()
    for n in notes:
        print("deploy_check: note: " + n)
    if failures:
        for f in failures:
            print("FAIL: " + f, file=sys.stderr)
        sys.exit(1)
    print("deploy_check: ok (compose, prometheus, Dockerfile, binary, systemd unit, install, "
          "man page)")


if __name__ == "__main__":
    main()
