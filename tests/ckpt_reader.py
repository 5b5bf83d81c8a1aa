#!/usr/bin/python3
"""tests/ckpt_reader.py: an independent safetensors reader for mixprec files.

Written from the published format (github.com/huggingface/safetensors,
README "Format"; dtype names as in safetensors/src/tensor.rs) and from
docs/checkpoints.md for the mixprec checksums, using only the Python
standard library and numpy (Debian python3-numpy). It shares no code with
the C reader.

usage:
  ckpt_reader.py FILE                       print a JSON summary (metadata, per-tensor
                                            dtype, shape, min, max, % non-finite)
  ckpt_reader.py --compare-inspect FILE J   J: `mixprec ckpt inspect --json FILE`
                                            output; every tensor must agree exactly
  ckpt_reader.py --check-export SRC OUT     OUT (from `mixprec ckpt export`) must hold
                                            SRC's weights rounded to OUT's dtype
  ckpt_reader.py --edit SRC DST [KEY=VALUE | TENSOR[I]=X | -KEY ...]
                                            write DST: SRC with metadata values
                                            replaced (-KEY: removed) and F32
                                            elements set, every
                                            checksum recomputed (a crafted file
                                            that passes the integrity checks)
  ckpt_reader.py --selftest                 CRC32C and dtype-decoding vectors
Exit status 0 when every check passes, 1 otherwise (the message says why).
"""
import json
import struct
import sys

import numpy as np

MAX_HEADER = 100_000_000
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}


class FormatError(Exception):
    pass


# ---- CRC32C (Castagnoli), bit-serial table -------------------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# ---- dtype decoding -------------------------------------------------------

def _fp8_table(exp_bits, man_bits, bias, has_inf):
    out = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        emax = (1 << exp_bits) - 1
        if has_inf and e == emax:
            out[b] = s * np.inf if m == 0 else np.nan
        elif not has_inf and e == emax and m == (1 << man_bits) - 1:
            out[b] = np.nan  # E4M3 "fn": only S.1111.111 is NaN
        elif e == 0:
            out[b] = s * (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            out[b] = s * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


E4M3 = _fp8_table(4, 3, 7, False)
E5M2 = _fp8_table(5, 2, 15, True)


def decode(dtype, raw):
    """Little-endian bytes -> float64 values."""
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64)
    if dtype == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if dtype == "F8_E4M3":
        return E4M3[np.frombuffer(raw, dtype=np.uint8)]
    if dtype == "F8_E5M2":
        return E5M2[np.frombuffer(raw, dtype=np.uint8)]
    raise FormatError("unsupported dtype %r" % dtype)


def bf16_rne_bits(f32):
    """Round FP32 values to BF16 (round to nearest even), as 16-bit ints."""
    u = np.asarray(f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


# ---- reading ---------------------------------------------------------------

def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError("duplicate key %r" % k)
        d[k] = v
    return d


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise FormatError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER or 8 + n > len(blob):
        raise FormatError("%s: bad header length %d (file %d bytes)" % (path, n, len(blob)))
    header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=_no_dups)
    if not isinstance(header, dict):
        raise FormatError("%s: header is not an object" % path)
    meta = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise FormatError("%s: __metadata__ must map strings to strings" % path)
    buf = blob[8 + n:]
    entries = []
    for name, e in header.items():
        dtype, shape, (begin, end) = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in SIZES:
            raise FormatError("%s: %s: dtype %s" % (path, name, dtype))
        count = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                raise FormatError("%s: %s: bad shape %r" % (path, name, shape))
            count *= d
        if end - begin != count * SIZES[dtype]:
            raise FormatError("%s: %s: offsets do not match dtype and shape" % (path, name))
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    at = 0
    for begin, end, name, _, _ in entries:
        if begin != at:
            raise FormatError("%s: %s: not contiguous (begins at %d, expected %d)"
                              % (path, name, begin, at))
        at = end
    if at != len(buf):
        raise FormatError("%s: tensors cover %d of %d data bytes" % (path, at, len(buf)))
    tensors = {}
    for begin, end, name, dtype, shape in entries:
        raw = buf[begin:end]
        tensors[name] = {"dtype": dtype, "shape": shape, "raw": raw, "begin": begin,
                         "end": end, "values": decode(dtype, raw).reshape(shape)}
    return meta, tensors, [e[2] for e in entries]


def verify_checksums(path, meta, tensors, order):
    """mixprec integrity metadata (docs/checkpoints.md)."""
    if meta.get("checksum_algorithm") != "crc32c":
        raise FormatError("%s: no crc32c checksums" % path)
    sums = json.loads(meta["checksums"])
    if set(sums) != set(tensors):
        raise FormatError("%s: checksums do not list exactly the tensors" % path)
    for name, t in tensors.items():
        if "%08x" % crc32c(t["raw"]) != sums[name]:
            raise FormatError("%s: tensor %s: checksum mismatch" % (path, name))
    # header CRC: tensors in data order (name, dtype, "d0,d1,...,;begin,end"),
    # then metadata pairs sorted by key (bytewise), header_crc32c excluded,
    # every field followed by a NUL byte
    canon = bytearray()
    for name in order:
        t = tensors[name]
        canon += name.encode() + b"\0" + t["dtype"].encode() + b"\0"
        canon += "".join("%d," % d for d in t["shape"]).encode()
        canon += (";%d,%d" % (t["begin"], t["end"])).encode() + b"\0"
    for k in sorted(meta, key=lambda s: s.encode()):
        if k != "header_crc32c":
            canon += k.encode() + b"\0" + meta[k].encode() + b"\0"
    if "%08x" % crc32c(bytes(canon)) != meta.get("header_crc32c"):
        raise FormatError("%s: header checksum mismatch" % path)


def summary(path):
    meta, tensors, order = read(path)
    if "checksums" in meta:
        verify_checksums(path, meta, tensors, order)
    out = []
    for name in order:
        v = tensors[name]["values"].ravel()
        fin = v[np.isfinite(v)]
        out.append({"name": name, "dtype": tensors[name]["dtype"],
                    "shape": tensors[name]["shape"],
                    "min": float(fin.min()) if fin.size else None,
                    "max": float(fin.max()) if fin.size else None,
                    "nonfinite_pct": 100.0 * (v.size - fin.size) / v.size if v.size else 0.0})
    return meta, tensors, out


def compare_inspect(path, inspect_json):
    _, _, mine = summary(path)
    with open(inspect_json) as f:
        theirs = json.load(f)
    if not theirs.get("checksums_ok"):
        raise FormatError("mixprec inspect says the checksums fail")
    if [t["name"] for t in theirs["tensors"]] != [t["name"] for t in mine]:
        raise FormatError("tensor lists differ")
    for a, b in zip(mine, theirs["tensors"]):
        for k in ("dtype", "shape", "min", "max"):
            x, y = a[k], b[k]
            if k in ("min", "max") and x is not None and y is not None:
                x, y = np.float32(x), np.float32(y)  # inspect prints 9 digits: exact in FP32
            if x != y:
                raise FormatError("%s: %s is %r here, %r in mixprec inspect"
                                  % (a["name"], k, a[k], b[k]))
    return len(mine)


def check_export(src, out):
    smeta, st, _ = summary(src)
    ometa, ot, _ = summary(out)
    weights = [n for n in st if not n.startswith("optim.")]
    if sorted(weights) != sorted(ot):
        raise FormatError("export holds %s, the checkpoint's weights are %s"
                          % (sorted(ot), sorted(weights)))
    if ometa.get("source_step") != smeta.get("step"):
        raise FormatError("export source_step %r, checkpoint step %r"
                          % (ometa.get("source_step"), smeta.get("step")))
    for name in weights:
        s = st[name]["values"].astype(np.float32).ravel()
        t = ot[name]
        if t["shape"] != st[name]["shape"]:
            raise FormatError("%s: shape changed" % name)
        if t["dtype"] == "BF16":
            got = np.frombuffer(t["raw"], dtype="<u2")
            if not np.array_equal(got, bf16_rne_bits(s)):
                raise FormatError("%s: BF16 export is not the RNE rounding of the source" % name)
        elif t["dtype"] == "F16":
            got = np.frombuffer(t["raw"], dtype="<u2")
            if not np.array_equal(got, s.astype(np.float16).view(np.uint16)):
                raise FormatError("%s: F16 export is not the RNE rounding of the source" % name)
        elif t["dtype"] == "F32":
            if t["raw"] != s.astype("<f4").tobytes():
                raise FormatError("%s: F32 export differs from the source" % name)
        else:  # FP8: within half an ulp of a 3- (E4M3) or 2-bit (E5M2) mantissa
            man, tiny = (3, 2.0 ** -9) if t["dtype"] == "F8_E4M3" else (2, 2.0 ** -16)
            v = t["values"].ravel()
            ref = np.clip(s.astype(np.float64), -448, 448) if man == 3 else s
            err = np.abs(v - ref)
            if np.any(err > np.abs(ref) * 2.0 ** -(man + 1) + tiny):
                raise FormatError("%s: %s export off by more than half an ulp"
                                  % (name, t["dtype"]))
    return len(weights)


def selftest():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert E4M3[0x38] == 1.0 and E4M3[0x7E] == 448.0 and np.isnan(E4M3[0x7F])
    assert E4M3[0x01] == 2.0 ** -9
    assert E5M2[0x3C] == 1.0 and E5M2[0x7B] == 57344.0 and np.isinf(E5M2[0x7C])
    assert decode("BF16", struct.pack("<H", 0x3F80))[0] == 1.0
    assert list(bf16_rne_bits(np.array([1.0, 1.00390625, 1.01171875], np.float32))) == \
        [0x3F80, 0x3F80, 0x3F82]  # ties to even


def _canon_crc(meta, tensors, order):
    canon = bytearray()
    for name in order:
        t = tensors[name]
        canon += name.encode() + b"\0" + t["dtype"].encode() + b"\0"
        canon += "".join("%d," % d for d in t["shape"]).encode()
        canon += (";%d,%d" % (t["begin"], t["end"])).encode() + b"\0"
    for k in sorted(meta, key=lambda s: s.encode()):
        if k != "header_crc32c":
            canon += k.encode() + b"\0" + meta[k].encode() + b"\0"
    return "%08x" % crc32c(bytes(canon))


def edit(src, dst, edits):
    """Rewrite src into dst with metadata values replaced (KEY=VALUE) or
    removed (-KEY) and F32 tensor elements set (NAME[I]=X), checksums
    recomputed."""
    meta, tensors, order = read(src)
    for e in edits:
        key, _, value = e.partition("=")
        if key.startswith("-") and not value:
            del meta[key[1:]]
        elif key.endswith("]") and "[" in key:
            name, _, idx = key[:-1].rpartition("[")
            t = tensors[name]
            if t["dtype"] != "F32":
                raise FormatError("%s: only F32 elements can be set" % name)
            raw = bytearray(t["raw"])
            struct.pack_into("<f", raw, 4 * int(idx), float(value))
            t["raw"] = bytes(raw)
        else:
            meta[key] = value
    sums = json.loads(meta["checksums"])
    for name in order:
        sums[name] = "%08x" % crc32c(tensors[name]["raw"])
    meta["checksums"] = json.dumps(sums, separators=(",", ":"), sort_keys=True)
    meta["header_crc32c"] = _canon_crc(meta, tensors, order)
    header = {"__metadata__": meta}
    for name in order:
        t = tensors[name]
        header[name] = {"dtype": t["dtype"], "shape": t["shape"],
                        "data_offsets": [t["begin"], t["end"]]}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(tensors[n]["raw"] for n in order))


def main(argv):
    try:
        if argv[1:] == ["--selftest"]:
            selftest()
            print("selftest ok")
        elif len(argv) == 4 and argv[1] == "--compare-inspect":
            n = compare_inspect(argv[2], argv[3])
            print("%s: %d tensors agree with mixprec inspect" % (argv[2], n))
        elif len(argv) == 4 and argv[1] == "--check-export":
            n = check_export(argv[2], argv[3])
            print("%s: %d weight tensors are the rounding of %s" % (argv[3], n, argv[2]))
        elif len(argv) >= 4 and argv[1] == "--edit":
            edit(argv[2], argv[3], argv[4:])
            summary(argv[3])  # the result must pass this reader's own checks
        elif len(argv) == 2:
            meta, _, tensors = summary(argv[1])
            json.dump({"metadata": meta, "tensors": tensors}, sys.stdout)
            print()
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (FormatError, KeyError, ValueError, AssertionError) as e:
        print("ckpt_reader: FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
