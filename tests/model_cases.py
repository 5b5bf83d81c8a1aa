"""tests/model_cases.py OUTDIR: weights for test_user_model.c, written as
safetensors by hand (struct + json), and the oracle: the forward pass of
[linear:5, tanh, layernorm, linear:4, relu, linear] on x, computed by NumPy
in float64 from the same (F32, or BF16/F16-rounded) weights.
Files: init.safetensors (F32), init_bf16.safetensors, init_f16.safetensors,
x.bin / y.bin / y_bf16.bin / y_f16.bin (raw float32), and malformed ones."""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(7)
D, H1, H2, K, B = 3, 5, 4, 2, 7
W = {
    "layers.0.weight": rng.uniform(-0.8, 0.8, (H1, D)), "layers.0.bias": rng.uniform(-0.3, 0.3, H1),
    "layers.2.weight": rng.uniform(0.5, 1.5, H1), "layers.2.bias": rng.uniform(-0.2, 0.2, H1),
    "layers.3.weight": rng.uniform(-0.6, 0.6, (H2, H1)), "layers.3.bias": rng.uniform(-0.3, 0.3, H2),
    "layers.5.weight": rng.uniform(-0.6, 0.6, (K, H2)), "layers.5.bias": rng.uniform(-0.3, 0.3, K),
}
W = {k: v.astype(np.float32) for k, v in W.items()}
x = rng.uniform(-2, 2, (B, D)).astype(np.float32)


def bf16_bits(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return u.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for k, (dt, shape, raw) in tensors.items():
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def forward(w):
    def lin(h, i):
        return h @ w[f"layers.{i}.weight"].astype(np.float64).T + w[f"layers.{i}.bias"]
    h = np.tanh(lin(x.astype(np.float64), 0))
    mu = h.mean(1, keepdims=True)
    var = ((h - mu) ** 2).mean(1, keepdims=True)
    h = (h - mu) / np.sqrt(var + 1e-5) * w["layers.2.weight"] + w["layers.2.bias"]
    h = np.maximum(lin(h, 3), 0)
    return lin(h, 5)


x.tofile(os.path.join(out, "x.bin"))
st_write(os.path.join(out, "init.safetensors"),
         {k: ("F32", v.shape, v.tobytes()) for k, v in W.items()})
forward(W).astype(np.float32).tofile(os.path.join(out, "y.bin"))
st_write(os.path.join(out, "init_bf16.safetensors"),
         {k: ("BF16", v.shape, bf16_bits(v).tobytes()) for k, v in W.items()})
forward({k: bf16_value(bf16_bits(v)) for k, v in W.items()}).astype(np.float32).tofile(
    os.path.join(out, "y_bf16.bin"))
st_write(os.path.join(out, "init_f16.safetensors"),
         {k: ("F16", v.shape, v.astype(np.float16).tobytes()) for k, v in W.items()})
forward({k: v.astype(np.float16).astype(np.float32) for k, v in W.items()}).astype(
    np.float32).tofile(os.path.join(out, "y_f16.bin"))

# malformed: one defect each
miss = {k: ("F32", v.shape, v.tobytes()) for k, v in W.items() if k != "layers.3.bias"}
st_write(os.path.join(out, "missing.safetensors"), miss)
extra = {k: ("F32", v.shape, v.tobytes()) for k, v in W.items()}
extra["layers.6.weight"] = ("F32", (2, 2), np.zeros((2, 2), np.float32).tobytes())
st_write(os.path.join(out, "extra.safetensors"), extra)
shaped = {k: ("F32", v.shape, v.tobytes()) for k, v in W.items()}
shaped["layers.3.weight"] = ("F32", (H1, H2), W["layers.3.weight"].tobytes())
st_write(os.path.join(out, "shape.safetensors"), shaped)
nan = {k: ("F32", v.shape, v.tobytes()) for k, v in W.items()}
bad = W["layers.0.bias"].copy()
bad[1] = np.nan
nan["layers.0.bias"] = ("F32", bad.shape, bad.tobytes())
st_write(os.path.join(out, "nan.safetensors"), nan)
