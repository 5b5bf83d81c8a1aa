#!/usr/bin/python3
"""bench/fp8_input_floor.py: an independent NumPy oracle for the emulated FP8
world model (docs/workloads.md, "FP8 (emulated)", "World model: the E4M3
input floor").

usage: /usr/bin/python3 bench/fp8_input_floor.py BUILD_DIR FP32_RUN FP8_RUN

BUILD_DIR holds libmixprec.so; FP32_RUN and FP8_RUN are output.dir of two
`mixprec train` world-model runs (pendulum or cart-pole, no layernorm) of the
same config in training.precision=fp32 and fp8. The script regenerates the
validation split with the library (a 20-line C dumper, compiled with cc),
reads the newest checkpoint of each run, and evaluates the MLP in NumPy:

  - the FP8 run's forward exactly as mixprec emulates it (BF16-stored
    activations, E4M3 x and W with the checkpoint's delayed scales, FP32
    products): its MSE must equal the run's reported validation loss;
  - both runs' weights in FP32 and with E4M3 (current per-tensor scaling,
    round-to-nearest-even, saturating) on selected operands: the network
    input only, every operand, every operand but the network input;
  - the E4M3 rounding error of the standardised inputs.

The E4M3/E5M2 rounding here is written from the format definitions (3 or 2
mantissa bits, bias 7 or 15, subnormals), not from mixprec's code.
"""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

DUMP_C = r"""
#include <mixprec/mixprec.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    mxp_replay_config c = mxp_replay_config_default();
    mxp_error e;
    if (argc != 7 || mxp_env_parse(argv[1], &c.env, &e) != MXP_OK) return 2;
    c.trajectories = atoll(argv[2]);
    c.episode_len = atoll(argv[3]);
    c.val_fraction = atof(argv[4]);
    c.seed = strtoull(argv[5], NULL, 10);
    mxp_replay *r;
    if (mxp_replay_create(&c, &r, &e) != MXP_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    mxp_replay_split s = mxp_replay_val(r);
    int64_t h[3] = {s.n, mxp_replay_in_dim(r), mxp_replay_out_dim(r)};
    FILE *f = fopen(argv[6], "wb");
    if (!f) return 1;
    fwrite(h, 8, 3, f);
    fwrite(s.x, 4, (size_t)(h[0] * h[1]), f);
    fwrite(s.y, 4, (size_t)(h[0] * h[2]), f);
    fclose(f);
    mxp_replay_destroy(r);
    return 0;
}
"""


def load_ckpt(run):
    files = sorted(glob.glob(os.path.join(run, "checkpoints", "*.safetensors")))
    if not files:
        sys.exit("no checkpoint under %s/checkpoints" % run)
    b = open(files[-1], "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    md = h.pop("__metadata__")
    t = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        t[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(v["shape"])
    return t, md, json.loads(md["config"])


def fp8_round(v, mbits, emin, fmax):
    """Round float64 v to the FP8 grid: RNE, saturating, subnormals."""
    a = np.abs(v)
    e = np.maximum(np.floor(np.log2(np.where(a > 0, a, 1.0))), emin)
    ulp = np.exp2(e - mbits)
    return np.sign(v) * np.minimum(np.round(a / ulp) * ulp, fmax)


def e4m3(v):
    return fp8_round(v, 3, -6, 448.0)


def bf16(v):
    u = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def erf(x):
    # math.erf element by element (slow; used only without torch)
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    flat, of = x.ravel(), out.ravel()
    for i in range(0, flat.size, 1 << 16):
        of[i:i + (1 << 16)] = [math.erf(v) for v in flat[i:i + (1 << 16)]]
    return out


def act_fn(name):
    if name == "gelu":
        try:
            import torch  # exact erf, fast; optional
            return lambda x: 0.5 * x * (1 + torch.erf(torch.from_numpy(x / math.sqrt(2))).numpy())
        except ImportError:
            return lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))
    if name == "relu":
        return lambda x: np.maximum(x, 0)
    if name == "tanh":
        return np.tanh
    sys.exit("model.activation=%s not handled" % name)


def forward(t, layers, act, x, qx=(), qw=(), scales=None, bf16_acts=True):
    """MLP forward in float64; qx / qw: layer positions whose input / weight
    is E4M3-quantised, with scales[(pos, 'x'|'w')] or the current amax."""
    h = x.astype(np.float64)
    for p, l in enumerate(layers):
        W = t["layers.%d.weight" % l].astype(np.float64)
        b = t["layers.%d.bias" % l].astype(np.float64)
        xin = bf16(h) if bf16_acts else h
        if p in qx:
            s = scales[(p, "x")] if scales else 448.0 / np.abs(xin).max()
            xin = e4m3(np.float32(xin * s).astype(np.float64)) / s
        if p in qw:
            s = scales[(p, "w")] if scales else 448.0 / np.abs(W).max()
            W = e4m3((W.astype(np.float32) * np.float32(s)).astype(np.float64)) / s
        h = xin @ W.T + b
        if p < len(layers) - 1:
            h = act(h)
    return h


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    build, run32, run8 = sys.argv[1:]
    t32, md32, cfg = load_ckpt(run32)
    t8, md8, cfg8 = load_ckpt(run8)
    if md32["precision"] != "fp32" or md8["precision"] != "fp8":
        sys.exit("want an fp32 and an fp8 run; got %s and %s (an fp8 run the guard moved off "
                 "fp8 has no FP8 state: set guard.canary.every_steps=0)"
                 % (md32["precision"], md8["precision"]))
    if cfg.get("model.layernorm", "false") != "false":
        sys.exit("model.layernorm=true is not handled")
    with tempfile.TemporaryDirectory() as d:
        src, exe, val = (os.path.join(d, n) for n in ("dump.c", "dump", "val.bin"))
        open(src, "w").write(DUMP_C)
        inc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include")
        subprocess.run(["cc", "-std=c11", "-O1", "-I", inc, src, "-L", build, "-lmixprec",
                        "-Wl,-rpath," + os.path.abspath(build), "-o", exe], check=True)
        subprocess.run([exe, cfg["data.env"], cfg["data.trajectories"],
                        cfg["data.episode_length"], cfg["data.val_fraction"],
                        cfg["training.seed"], val], check=True)
        b = open(val, "rb").read()
    n, din, dout = struct.unpack("<3q", b[:24])
    a = np.frombuffer(b[24:], dtype=np.float32)
    xv, yv = a[:n * din].reshape(n, din), a[n * din:n * din + n * dout].reshape(n, dout)
    layers = sorted(int(k.split(".")[1]) for k in t32 if k.startswith("layers.")
                    and k.endswith(".weight"))
    act = act_fn(cfg["model.activation"])
    L = len(layers)
    allp = tuple(range(L))

    def mse(p):
        return float(np.mean((p - yv) ** 2))

    print("validation rows %d, in %d, out %d; layers %s (%s)" % (n, din, dout, layers,
                                                              cfg["model.activation"]))
    x0 = bf16(xv)
    s = 448.0 / np.abs(x0).max()
    err = e4m3(x0 * s) / s - x0
    print("E4M3 rounding of the standardised inputs: RMS %.4f (std units), RMS relative %.4f"
          % (np.sqrt(np.mean(err ** 2)),
             np.sqrt(np.mean((err / np.maximum(np.abs(x0), 1e-30)) ** 2))))
    sc = t8["fp8.scaling"].ravel()
    scales = {}
    for p in range(L):
        scales[(p, "x")], scales[(p, "w")] = float(sc[3 * p]), float(sc[3 * p + 1])
    if cfg8.get("training.precision_fp32_layers", "none") in ("none", ""):
        exact = mse(forward(t8, layers, act, xv, allp, allp, scales))
        print("fp8 run, mixprec's emulation redone with the checkpoint's scales: val MSE %.6f"
              % exact)
    else:
        print("fp8 run keeps layers in FP32 (training.precision_fp32_layers=%s): its exact "
              "emulation is not redone" % cfg8["training.precision_fp32_layers"])
    for name, t in (("fp32-trained", t32), ("fp8-trained", t8)):
        ref = forward(t, layers, act, xv, bf16_acts=False)
        m32 = mse(ref)
        print("%s weights: FP32 forward val MSE %.6f" % (name, m32))
        for label, qx, qw in (("E4M3 on the network input only", (0,), ()),
                              ("E4M3 on every x and W", allp, allp),
                              ("E4M3 on every x and W but the network input",
                               allp[1:], allp)):
            p = forward(t, layers, act, xv, qx, qw)
            print("  %-44s val MSE %.6f (%+5.0f%%); added |f_q - f|^2 %.6f"
                  % (label, mse(p), 100 * (mse(p) / m32 - 1), float(np.mean((p - ref) ** 2))))


if __name__ == "__main__":
    main()
