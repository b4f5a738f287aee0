#!/usr/bin/env python3
"""Helpers of tests/cli/resp_cli.sh: speak RESP2 over a raw socket so that the
bytes of two servers' answers can be compared exactly.
  store-equal SEGD DB NOW USERS PORT   segd cache --resp answers each user's
      ZRANGEBYSCORE -inf +inf WITHSCORES as `segd get --json` of the store at
      the same clock, in Redis's order (score, then member bytes); waits up
      to 60 s for the tail; prints how many users and segments
  zadds SEGD DB NOW USERS              the store's live entries as ZADD
      commands in RESP (for redis-cli --pipe)
  queries SEGD DB NOW USERS            the comparison's commands, one a line
  raw PORT [inline] < queries          the raw reply bytes of those commands,
      pipelined (multibulk, or inline text lines), then QUIT"""
import json
import socket
import subprocess
import sys
import time


def store(segd, db, now, users):
    ids = ["u%010d" % i for i in range(int(users))]
    out = subprocess.run([segd, "get", "--db", db, "--now", now, "--json"] + ids,
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def encode(words):
    out = b"*%d\r\n" % len(words)
    for w in words:
        b = w.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


def read_reply(f):
    line = f.readline()
    if not line:
        raise EOFError
    t, rest = line[:1], line[1:-2]
    if t in b"+-:":
        return (t, rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise ValueError(line)


def ask(port, cmds):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    s.sendall(b"".join(encode(c) for c in cmds))
    f = s.makefile("rb")
    replies = [read_reply(f) for _ in cmds]
    s.close()
    return replies


def expected(profile):
    segs = sorted(profile["segments"], key=lambda s: (s["expires_at"], str(s["id"]).encode()))
    out = []
    for s in segs:
        out += [str(s["id"]).encode(), str(s["expires_at"]).encode()]
    return out


def store_equal(segd, db, now, users, port):
    deadline = time.time() + 60
    while True:
        want = store(segd, db, now, users)
        got = ask(port, [["ZRANGEBYSCORE", w["user_id"], "-inf", "+inf", "WITHSCORES"]
                         for w in want])
        bad = [w["user_id"] for w, g in zip(want, got) if expected(w) != g]
        if not bad or time.time() > deadline:
            break
        time.sleep(0.5)
    assert not bad, f"{len(bad)} users differ from the store, e.g. {bad[:3]}"
    segs = sum(len(w["segments"]) for w in want)
    assert segs > 0
    print(f"{len(want)} users, {segs} live segments equal")


def zadds(segd, db, now, users):
    out = sys.stdout.buffer
    for w in store(segd, db, now, users):
        for s in w["segments"]:
            out.write(encode(["ZADD", w["user_id"], str(s["expires_at"]), str(s["id"])]))


def queries(segd, db, now, users):
    q = []
    for w in store(segd, db, now, users)[:40]:
        u, segs = w["user_id"], w["segments"]
        exp = sorted(s["expires_at"] for s in segs) or [int(now)]
        x = str(exp[len(exp) // 2])
        first = str(segs[0]["id"]) if segs else "1"
        q += [["ZRANGEBYSCORE", u, now, "+inf", "WITHSCORES"],
              ["ZRANGEBYSCORE", u, "-inf", "+inf"],
              ["ZRANGEBYSCORE", u, "(" + x, "+inf", "WITHSCORES", "LIMIT", "1", "5"],
              ["ZRANGEBYSCORE", u, "-inf", "(" + x, "LIMIT", "0", "-1"],
              ["ZRANGEBYSCORE", u, x, x, "LIMIT", "-1", "3"],
              ["ZREVRANGEBYSCORE", u, "+inf", x, "WITHSCORES"],
              ["ZRANGE", u, x, "+inf", "BYSCORE", "WITHSCORES"],
              ["ZRANGE", u, "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "2", "3"],
              ["ZRANGE", u, "0", "-1", "WITHSCORES"],
              ["ZRANGE", u, "-5", "-2", "REV"],
              ["ZCOUNT", u, "(" + x, "+inf"],
              ["ZCOUNT", u, "-inf", x],
              ["ZSCORE", u, first],
              ["ZSCORE", u, "0" + first],
              ["ZCARD", u],
              ["EXISTS", u, "nobody", u]]
    q += [["ZRANGEBYSCORE", "nobody", "-inf", "+inf"], ["ZCARD", "nobody"],
          ["ZSCORE", "nobody", "1"], ["ZRANGE", "nobody", "0", "-1"],
          ["ZRANGEBYSCORE", "u0000000001", "a", "b"],
          ["ZRANGEBYSCORE", "u0000000001", "0", "1", "LIMIT", "x", "1"],
          ["ZRANGEBYSCORE", "u0000000001", "0", "1", "BOGUS"],
          ["ZRANGEBYSCORE", "u0000000001", "0", "1", "REV"],
          ["ZRANGE", "u0000000001", "0", "1", "LIMIT", "0", "1"],
          ["ZRANGEBYSCORE", "u0000000001", "-inf", "+inf", "LIMIT", "-0", "1"],
          ["ZSCORE", "u0000000001", "-0"], ["ZRANGE", "u0000000001", "-0", "2"],
          ["ZCARD"], ["ZCOUNT", "u0000000001", "1"], ["FOO", "bar", "baz"],
          ["PING"], ["PING", "hi"], ["ECHO", "hello"], ["SELECT", "0"]]
    for c in q:
        print(" ".join(c))


def raw(port, form="multibulk"):
    cmds = [line.split() for line in sys.stdin.read().splitlines() if line.strip()]
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    if form == "inline":  # as nc or redis-cli's pipe of text lines send them
        s.sendall(b"".join(" ".join(c).encode() + b"\r\n" for c in cmds) + b"QUIT\r\n")
    else:
        s.sendall(b"".join(encode(c) for c in cmds) + encode(["QUIT"]))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    sys.stdout.buffer.write(data)


def rawbytes(port):
    """stdin's bytes as they are; the answer until the server closes."""
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    s.sendall(sys.stdin.buffer.read())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    sys.stdout.buffer.write(data)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"store-equal": store_equal, "zadds": zadds, "queries": queries, "raw": raw,
     "rawbytes": rawbytes}[cmd](*args)
