#!/usr/bin/python3
"""tests/fuzz/make_corpus_data.py: regenerate the seed corpus of the data
fuzzer (tests/fuzz/fuzz_data.c) in tests/fuzz/corpus_data: small .npz files
of each workload (numpy.savez and savez_compressed, .npy versions 1.0 and
2.0, int32/int64/float64 arrays), safetensors files of the same arrays, and
workload_meta texts. Needs /usr/bin/python3 with NumPy."""
import json
import os
import struct

import numpy as np

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_data")
os.makedirs(out, exist_ok=True)
for f in os.listdir(out):
    os.remove(os.path.join(out, f))
r = np.random.default_rng(0)


def st(name, arrays):
    header, blobs, off = {}, [], 0
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        dt = {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64"}[str(a.dtype)]
        b = a.tobytes()
        header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


x = r.normal(size=(6, 3)).astype("f4")
reg = {"x": x, "y": np.tanh(x[:, :2])}
cls = {"x": x.astype("f8"), "y": np.array([0, 1, 2, 1, 0, 2], "i4"),
       "x_val": x[:2], "y_val": np.array([1, 0], "i8")}
wm = {"obs": r.normal(size=(3, 4, 2)).astype("f4"),
      "actions": r.normal(size=(3, 3, 1)).astype("f4"),
      "rewards": r.normal(size=(3, 3)).astype("f4"), "lengths": np.array([3, 1, 2], "i8")}
for name, arrays in (("reg", reg), ("cls", cls), ("wm", wm)):
    np.savez(os.path.join(out, name + ".npz"), **arrays)
    np.savez_compressed(os.path.join(out, name + "_z.npz"), **arrays)
    st(name + ".safetensors", arrays)
np.savez(os.path.join(out, "empty.npz"))
# a version 2.0 .npy member
with open(os.path.join(out, "v2.npz"), "wb") as f:
    import io, zipfile
    buf = io.BytesIO()
    np.lib.format.write_array(buf, x, version=(2, 0))
    with zipfile.ZipFile(f, "w") as z:
        z.writestr(zipfile.ZipInfo("x.npy", (1980, 1, 1, 0, 0, 0)), buf.getvalue())
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.tanh(x[:, :1]), version=(2, 0))
        z.writestr(zipfile.ZipInfo("y.npy", (1980, 1, 1, 0, 0, 0)), buf.getvalue())
metas = [
    {"kind": "world_model", "in_dim": 3, "out_dim": 3, "state_dim": 2, "action_dim": 1,
     "x_mean": [0.1, -0.2, 0.0], "x_std": [1.0, 0.5, 1e-6], "y_mean": [0.0, 0.0, 1.0],
     "y_std": [1.0, 2.0, 3.0]},
    {"kind": "classifier", "in_dim": 3, "out_dim": 4, "state_dim": 0, "action_dim": 0},
    {"kind": "regressor", "in_dim": 3, "out_dim": 2, "state_dim": 0, "action_dim": 0},
    # widths whose sum overflows int64 (refused before they are added)
    {"kind": "world_model", "in_dim": 5, "out_dim": 4, "state_dim": 2 ** 63 - 1,
     "action_dim": 2},
]
for i, m in enumerate(metas):
    with open(os.path.join(out, "meta%d.json" % i), "w") as f:
        json.dump(m, f)
