#!/usr/bin/python3
"""tests/hardening_cases.py: the hostile and ordinary files of
tests/test_hardening_cli.sh (issue 30), written with NumPy and the
standard library only (zipfile, zlib, struct), sharing no code with the
C readers.

usage:
  hardening_cases.py data DIR          write the data files into DIR
  hardening_cases.py tamper SRC DST WHAT
                                       DST: checkpoint SRC with its
                                       workload_meta edited (WHAT below) and
                                       every checksum recomputed
                                       (tests/ckpt_reader.py --edit)

Data files (DIR/...):
  reg.npz        regressor x [256, 5], y [256, 2]
  narrow.npz     x [64, 5], y [64, 1] (narrower y than the model's 2)
  wide.npz       x [64, 5], y [64, 3] (wider)
  wm.npz         world model obs [16, 21, 3], actions [16, 20, 2], rewards
  in.npz         x [4, 5]; inwm.npz obs [4, 3], actions [4, 2]
  in_bad.npz     x [4, 7] (wrong width); in_nan.npz x [4, 5] with a NaN
  declared.npz   5-6 KB: one member whose zip sizes and .npy header declare
                 1 GiB, with 5 KB of deflated data
  bomb.npz       ~256 KB of deflated zeros expanding to 256 MiB, obs of the
                 wrong rank (2) for a world model
  label.npz      a classifier x [4, 2], y with the label 2^20 (~500 bytes)
  empty.npz      numpy.savez() with no arrays
  descr_nul.npz  x, y whose .npy descr is '<f4' followed by a NUL byte
  deflate.npz    x's deflate stream ends 4 KB before its declared size
"""
import json
import os
import struct
import sys
import zipfile
import zlib

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def npy_header(descr, shape):
    """A version 1.0 .npy header (magic, lengths, dict padded to 64)."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        descr, "(%s)" % "".join("%d, " % s for s in shape) if len(shape) != 1
        else "(%d,)" % shape[0])
    d = d.encode("latin1")
    pad = 64 - (10 + len(d) + 1) % 64
    d += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d


def patch_sizes(path, member, size):
    """Set member's uncompressed size to size in its local header and its
    central directory entry (both: libzip checks that they agree)."""
    b = bytearray(open(path, "rb").read())
    z = zipfile.ZipFile(path)
    info = z.getinfo(member)
    struct.pack_into("<I", b, info.header_offset + 22, size)
    cd = b.rfind(b"PK\x01\x02")
    while cd >= 0:
        n = struct.unpack_from("<H", b, cd + 28)[0]
        if b[cd + 46:cd + 46 + n].decode() == member:
            struct.pack_into("<I", b, cd + 24, size)
            break
        cd = b.rfind(b"PK\x01\x02", 0, cd)
    open(path, "wb").write(bytes(b))


def deflated_member(path, name, chunks):
    """A zip holding member `name` deflated from the byte chunks (streamed:
    a 256 MiB member needs no 256 MiB buffer here)."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as z:
        with z.open(info, "w", force_zip64=False) as f:
            for c in chunks:
                f.write(c)


def data(d):
    r = np.random.default_rng(1)
    x = r.normal(size=(256, 5)).astype("f4")
    np.savez(os.path.join(d, "reg.npz"), x=x, y=np.tanh(x[:, :2]))
    for name, k in (("narrow", 1), ("wide", 3)):
        np.savez(os.path.join(d, name + ".npz"), x=r.normal(size=(64, 5)).astype("f4"),
                 y=r.normal(size=(64, k)).astype("f4"))
    np.savez(os.path.join(d, "wm.npz"), obs=r.normal(size=(16, 21, 3)).astype("f4"),
             actions=r.normal(size=(16, 20, 2)).astype("f4"),
             rewards=r.normal(size=(16, 20)).astype("f4"))
    np.savez(os.path.join(d, "in.npz"), x=x[:4])
    np.savez(os.path.join(d, "inwm.npz"), obs=r.normal(size=(4, 3)).astype("f4"),
             actions=r.normal(size=(4, 2)).astype("f4"))
    np.savez(os.path.join(d, "in_bad.npz"), x=r.normal(size=(4, 7)).astype("f4"))
    nan = x[:4].copy()
    nan[1, 2] = np.nan
    np.savez(os.path.join(d, "in_nan.npz"), x=nan)

    # a member declaring 1 GiB with 5 KB of data behind it
    n = (1 << 30) // 4
    p = os.path.join(d, "declared.npz")
    hdr = npy_header("<f4", (n,))
    deflated_member(p, "x.npy", [hdr, os.urandom(5000)])
    patch_sizes(p, "x.npy", len(hdr) + 4 * n)

    # a genuine bomb: 256 MiB of zeros, obs of rank 2 (the world model wants 3)
    p = os.path.join(d, "bomb.npz")
    shape = (16, (1 << 28) // 4 // 16)
    zero = bytes(1 << 20)
    deflated_member(p, "obs.npy", [npy_header("<f4", shape)] + [zero] * 256)

    np.savez(os.path.join(d, "label.npz"), x=np.ones((4, 2), "f4"),
             y=np.array([0, 1, 1, 1 << 20], "i8"))
    np.savez(os.path.join(d, "empty.npz"))

    # descr '<f4' + NUL: numpy refuses it; so must the reader
    p = os.path.join(d, "descr_nul.npz")
    with zipfile.ZipFile(p, "w") as z:
        for name, a in (("x", x), ("y", np.tanh(x[:, :2]))):
            h = npy_header("<f4\0", a.shape)
            z.writestr(name + ".npy", h + a.astype("<f4").tobytes())

    # a deflate stream that ends 4 KB before the size its zip entry and
    # .npy header declare (its CRC matches what it holds: libzip sees no
    # error, the data just ends)
    p = os.path.join(d, "deflate.npz")
    n = 2000 * 5
    hdr = npy_header("<f4", (n + 1024,))
    deflated_member(p, "x.npy", [hdr, r.normal(size=n).astype("<f4").tobytes()])
    patch_sizes(p, "x.npy", len(hdr) + 4 * (n + 1024))


def tamper(src, dst, what):
    sys.path.insert(0, here)
    import ckpt_reader
    meta, _, _ = ckpt_reader.read(src)
    if what == "missing":
        ckpt_reader.edit(src, dst, ["-workload_meta"])
        return
    if what == "garbage":
        ckpt_reader.edit(src, dst, ["workload_meta={not json"])
        return
    wm = json.loads(meta["workload_meta"])
    if what == "x_std_zero":
        wm["x_std"] = [0.0] * len(wm["x_std"])
    elif what == "x_std_negative":
        wm["x_std"] = [-v for v in wm["x_std"]]
    elif what == "x_mean_1e38":
        wm["x_mean"][0] = 1e38
    elif what == "y_std_1e38":
        wm["y_std"][0] = 1e38
    elif what == "out_dim":
        wm["out_dim"] += 1
    elif what == "in_dim_1e7":
        wm["in_dim"] = 10 ** 7
    else:
        raise SystemExit("unknown tamper %r" % what)
    ckpt_reader.edit(src, dst, ["workload_meta=" + json.dumps(wm)])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "data":
        data(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "tamper":
        tamper(*sys.argv[2:])
    else:
        raise SystemExit(__doc__)
