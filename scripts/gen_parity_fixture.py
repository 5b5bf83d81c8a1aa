#!/usr/bin/python3
"""scripts/gen_parity_fixture.py: the PyTorch reference dump for tests/test_parity.c.

Builds, in float32, the MLP that mxp_model_spec_mlp(12, 32, 2, 4, GELU,
layernorm=true, loss, max_batch=16) describes:

    nn.Sequential(Linear(12,32), LayerNorm(32), GELU(),
                  Linear(32,32), LayerNorm(32), GELU(),
                  Linear(32,4))

(index i of the Sequential is the mixprec layer index, so the parameter names
are "layers.<i>.weight" / "layers.<i>.bias" with i in {0, 1, 3, 4, 6}), runs
one forward/backward on a fixed batch, then 10 full-batch AdamW steps, and
writes everything tests/test_parity.c compares against to
tests/data/parity_mlp.bin. The binary format is docs/parity-fixture.md.

Two cases are written: MSE (mean over all elements) against y ~ N(0,1), and
softmax cross-entropy (mean over B) against int32 labels.

Run with Debian's interpreter (torch 1.13 + numpy):
    /usr/bin/python3 scripts/gen_parity_fixture.py [out_path]

Besides writing the file it prints, for each case, how far the float32
reference is from the same computation in float64; tests/test_parity.c's
tolerances must stay well above those numbers.

Reference style: karpathy/llm.c train_gpt2.py (write_state) + test_gpt2.c.
"""

import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

MAGIC = 0x5241504D  # bytes "MPAR" on disk (little-endian u32)
VERSION = 1

# Enum values from include/mixprec/model.h.
MXP_LAYER_LINEAR, MXP_LAYER_RELU, MXP_LAYER_GELU, MXP_LAYER_TANH, MXP_LAYER_LAYERNORM = range(5)
MXP_LOSS_MSE, MXP_LOSS_XENT = 0, 1

IN_DIM, HIDDEN, DEPTH, OUT_DIM, B = 12, 32, 2, 4, 16
N_STEPS = 10
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.01
LN_EPS = 1e-5
NAME_LEN = 32


def build_mlp(seed):
    """The mxp_model_spec_mlp layout; index i == mixprec layer index."""
    torch.manual_seed(seed)
    layers = []
    d = IN_DIM
    for _ in range(DEPTH):
        layers += [nn.Linear(d, HIDDEN), nn.LayerNorm(HIDDEN, eps=LN_EPS), nn.GELU()]
        d = HIDDEN
    layers.append(nn.Linear(d, OUT_DIM))
    model = nn.Sequential(*layers)
    # PyTorch's LayerNorm init (gamma 1, beta 0) would hide a gamma/beta
    # mix-up and make d(beta) independent of gamma: perturb both.
    with torch.no_grad():
        for mod in model:
            if isinstance(mod, nn.LayerNorm):
                mod.weight.add_(0.1 * torch.randn_like(mod.weight))
                mod.bias.add_(0.1 * torch.randn_like(mod.bias))
    return model


def named_params(model):
    """(name, tensor) in mixprec slab order: per layer, weight then bias."""
    out = []
    for i, mod in enumerate(model):
        if isinstance(mod, (nn.Linear, nn.LayerNorm)):
            out.append(("layers.%d.weight" % i, mod.weight))
            out.append(("layers.%d.bias" % i, mod.bias))
    # The "layers." prefix is mixprec's; nn.Sequential names them "<i>.weight".
    for (name, p), (tname, tp) in zip(out, model.named_parameters()):
        assert name == "layers." + tname and p is tp, (name, tname)
    return out


def loss_fn(kind):
    return nn.MSELoss() if kind == MXP_LOSS_MSE else nn.CrossEntropyLoss()


def run_case(kind, seed, dtype):
    """Forward/backward + N_STEPS AdamW steps in `dtype`. Returns a dict."""
    model = build_mlp(seed).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(B, IN_DIM, generator=g).to(dtype)
    if kind == MXP_LOSS_MSE:
        target = torch.randn(B, OUT_DIM, generator=g).to(dtype)
    else:
        target = torch.randint(0, OUT_DIM, (B,), generator=g)
    crit = loss_fn(kind)
    params = named_params(model)

    pred = model(x)
    loss = crit(pred, target)
    model.zero_grad(set_to_none=True)
    loss.backward()
    rec = {
        "x": x.detach().clone(),
        "target": target.clone(),
        "names": [n for n, _ in params],
        "shapes": [tuple(p.shape) for _, p in params],
        "params": torch.cat([p.detach().reshape(-1) for _, p in params]).clone(),
        "pred": pred.detach().clone(),
        "loss": loss.detach().clone(),
        "grads": torch.cat([p.grad.reshape(-1) for _, p in params]).clone(),
    }

    # Training from the same initial weights: losses[k] is the loss before
    # update k (losses[0] == loss). Weight decay on every tensor, as
    # torch.optim.AdamW applies it to one default parameter group.
    opt = torch.optim.AdamW([p for _, p in params], lr=LR, betas=(BETA1, BETA2),
                            eps=EPS, weight_decay=WD)
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = crit(model(x), target)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    rec["losses"] = torch.tensor(losses, dtype=torch.float64)
    rec["final_params"] = torch.cat([p.detach().reshape(-1) for _, p in params]).clone()
    return rec


def max_scaled_err(a, b, shapes):
    """max over tensors of max|a-b| / max|b| (tensor-wise scale)."""
    worst, off = 0.0, 0
    for shp in shapes:
        n = int(np.prod(shp))
        ra, rb = a[off:off + n].double(), b[off:off + n].double()
        worst = max(worst, float((ra - rb).abs().max() / rb.abs().max()))
        off += n
    return worst


def f32_bytes(t):
    return np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4")).tobytes()


def case_bytes(kind, seed, rec):
    names, shapes = rec["names"], rec["shapes"]
    n_params = int(rec["params"].numel())
    hdr = struct.pack("<16i", kind, MXP_LAYER_GELU, 1, IN_DIM, HIDDEN, DEPTH,
                      OUT_DIM, B, len(names), n_params, N_STEPS, seed, 0, 0, 0, 0)
    hyper = struct.pack("<8f", LR, BETA1, BETA2, EPS, WD, LN_EPS, 0.0, 0.0)
    table = b""
    off = 0
    for name, shp in zip(names, shapes):
        enc = name.encode("ascii")
        assert len(enc) < NAME_LEN
        dims = list(shp) + [0] * (2 - len(shp))
        n = int(np.prod(shp))
        table += enc.ljust(NAME_LEN, b"\0") + struct.pack("<4i", len(shp), dims[0], dims[1], off)
        off += n
    assert off == n_params
    if kind == MXP_LOSS_MSE:
        tgt = f32_bytes(rec["target"])
    else:
        tgt = np.ascontiguousarray(rec["target"].numpy().astype("<i4")).tobytes()
    return (hdr + hyper + table + f32_bytes(rec["x"]) + tgt + f32_bytes(rec["params"])
            + f32_bytes(rec["pred"]) + f32_bytes(rec["loss"].reshape(1))
            + f32_bytes(rec["grads"]) + f32_bytes(rec["losses"])
            + f32_bytes(rec["final_params"]))


def main():
    torch.set_num_threads(1)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data", "parity_mlp.bin")
    cases = [(MXP_LOSS_MSE, 1337), (MXP_LOSS_XENT, 4242)]
    blob = struct.pack("<8I", MAGIC, VERSION, len(cases), 0, 0, 0, 0, 0)
    for kind, seed in cases:
        r32 = run_case(kind, seed, torch.float32)
        r64 = run_case(kind, seed, torch.float64)
        shapes = r32["shapes"]
        print("case %s seed %d: %d params, loss %.9g" % (
            "mse" if kind == MXP_LOSS_MSE else "xent", seed, r32["params"].numel(), r32["loss"].item()))
        print("  losses:", " ".join("%.7g" % v for v in r32["losses"].tolist()))
        print("  f32 vs f64: loss rel %.2e, grads (tensor-scaled) %.2e, "
              "losses rel %.2e, final params (tensor-scaled) %.2e" % (
                  abs(r32["loss"].item() / r64["loss"].item() - 1),
                  max_scaled_err(r32["grads"], r64["grads"], shapes),
                  float(((r32["losses"] - r64["losses"]) / r64["losses"]).abs().max()),
                  max_scaled_err(r32["final_params"], r64["final_params"], shapes)))
        blob += case_bytes(kind, seed, r32)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(blob)
    print("wrote %s (%d bytes)" % (out, len(blob)))


if __name__ == "__main__":
    main()
