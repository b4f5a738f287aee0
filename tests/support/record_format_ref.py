"""An independent decoder of segd's profile record, written from
docs/record-format.md alone (not from core/record.c): tests/cli/snapshot_cli.sh
decodes every record of a native snapshot with it and compares them with the
avro snapshot of the same store, so the document is enough to write a
decoder. decode(bytes) -> (erased_before_ms, [(segment_id, ts_ms, expiry_s,
flags, partner_id), ...]); raises ValueError on anything malformed."""
import struct
def xxh32(data, seed=0):
    P1, P2, P3, P4, P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    M = 0xffffffff
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & M
    n = len(data); i = 0
    if n >= 16:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed & M, (seed - P1) & M]
        while i + 16 <= n:
            for j in range(4):
                w, = struct.unpack_from('<I', data, i); i += 4
                v[j] = (rotl((v[j] + w * P2) & M, 13) * P1) & M
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 4 <= n:
        w, = struct.unpack_from('<I', data, i); i += 4
        h = (rotl((h + w * P3) & M, 17) * P4) & M
    while i < n:
        h = (rotl((h + data[i] * P5) & M, 11) * P1) & M; i += 1
    h ^= h >> 15; h = (h * P2) & M; h ^= h >> 13; h = (h * P3) & M; h ^= h >> 16
    return h

class Bits:
    def __init__(s, b): s.v = int.from_bytes(b, 'little'); s.n = len(b) * 8; s.p = 0
    def get(s, k):
        if s.p + k > s.n: raise ValueError('bits exhausted')
        x = (s.v >> s.p) & ((1 << k) - 1); s.p += k; return x
    def rice(s, k):
        q = 0
        while q < 24 and s.get(1): q += 1
        if q == 24: return s.get(64)
        return (q << k) | s.get(k)

def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if not c & 0x80: return r, i
def unzz(z): return (z >> 1) ^ -(z & 1)

def decode(b):
    if not b: return 0, []
    if len(b) < 5:
        raise ValueError('too short')
    body, ck = b[:-4], struct.unpack('<I', b[-4:])[0]
    if xxh32(body) != ck:
        raise ValueError('checksum')
    if body[0] != 1:
        raise ValueError('format byte')
    i = 1
    erased, i = varint(body, i); n, i = varint(body, i)
    if n == 0: return erased, []
    nd, i = varint(body, i); g, i = varint(body, i)
    kb = body[i]; k_ts = body[i + 1]; i += 2
    attrs, k_id = kb & 1, kb >> 1
    nrel, i = varint(body, i)
    rels = []
    for _ in range(nrel):
        z, i = varint(body, i); rels.append(unzz(z))
    z, i = varint(body, i); ts = [unzz(z)]
    fl = [(0, 0)] * nd
    if attrs:
        fl = []
        for _ in range(nd):
            f, i = varint(body, i); p, i = varint(body, i); fl.append((f, p))
    bits = Bits(body[i:])
    for _ in range(nd - 1): ts.append(ts[-1] + bits.rice(k_ts))
    rb = (nrel - 1).bit_length()
    exp = []
    for t in range(nd):
        r = rels[bits.get(rb)] if rb else rels[0]
        exp.append((r + ts[t] // 1000 // g) * g)  # // is floor division
    ids = []
    for j in range(n):
        gap = bits.rice(k_id)
        ids.append(gap if j == 0 else ids[-1] + 1 + gap)
    idx = []
    m = 0
    while nd > 1 and nd ** (m + 1) <= 1 << 32: m += 1
    j = 0
    while len(idx) < n:
        r = min(m, n - j) if m else n
        if m == 0: idx += [0] * n; break
        v = bits.get((nd ** r - 1).bit_length())
        for _ in range(r): idx.append(v % nd); v //= nd
        j += r
    if bits.n - bits.p >= 8 or bits.v >> bits.p:
        raise ValueError('padding')
    s32 = lambda x: x - (1 << 32) if x >= 1 << 31 else x
    return erased, [(ids[j], ts[idx[j]], exp[idx[j]], s32(fl[idx[j]][0]), s32(fl[idx[j]][1])) for j in range(n)]

if __name__ == '__main__':
    import sys
    print(decode(bytes.fromhex(sys.argv[1])))
