#!/usr/bin/python3
"""scripts/gen_optim_fixture.py: the PyTorch reference for the shared
optimizer element functions (src/backend/numerics/optim.h), used by
tests/test_numerics.c.

Runs torch.optim.AdamW and torch.optim.SGD (single-tensor implementations,
foreach=False) in float32 on one flat parameter of N elements for S steps
with fixed gradients, and writes tests/data/optim_ref.bin:

    u32 magic 0x4F50544D ("MTPO"), u32 version 1, u32 N, u32 S
    f32 w0[N]; f32 grads[S][N]
    then per case (adamw, sgd_nesterov, sgd_momentum) f32 w[S][N]
    (the weights after each step).

Hyper-parameters (the test uses the same):
    adamw: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01
    sgd_nesterov: lr 0.01, momentum 0.9, weight_decay 1e-4, nesterov True
    sgd_momentum: lr 0.05, momentum 0.5, weight_decay 0, nesterov False

Run with Debian's interpreter (torch 1.13 + numpy):
    /usr/bin/python3 scripts/gen_optim_fixture.py [out_path]
"""

import struct
import sys

import numpy as np
import torch

N, S = 1000, 6


def run(opt_cls, w0, grads, **kw):
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = opt_cls([p], foreach=False, **kw)
    out = []
    for s in range(S):
        p.grad = torch.from_numpy(grads[s].copy())
        opt.step()
        out.append(p.detach().numpy().copy())
    return np.stack(out).astype(np.float32)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/optim_ref.bin"
    rng = np.random.default_rng(17)
    w0 = rng.standard_normal(N).astype(np.float32)
    grads = (rng.standard_normal((S, N)) * 10.0 ** rng.uniform(-4, 1, (S, N))).astype(np.float32)
    grads[:, :20] = 0.0  # dead units: AdamW's update is then decay only
    cases = [
        run(torch.optim.AdamW, w0, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
            weight_decay=0.01),
        run(torch.optim.SGD, w0, grads, lr=0.01, momentum=0.9, weight_decay=1e-4,
            nesterov=True),
        run(torch.optim.SGD, w0, grads, lr=0.05, momentum=0.5, weight_decay=0.0),
    ]
    with open(path, "wb") as f:
        f.write(struct.pack("<4I", 0x4F50544D, 1, N, S))
        f.write(w0.tobytes())
        f.write(grads.tobytes())
        for c in cases:
            f.write(c.tobytes())
    print(f"wrote {path}: N={N} S={S}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
