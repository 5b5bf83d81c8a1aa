"""tests/term_cases.py: the PyTorch side of test_term_head.c.

  grad DIR HEAD     HEAD det or gauss: the loss and every parameter
                    gradient, in float64, of the model test_term_head.c
                    builds (in 3, linear:8, tanh, linear:O; K = 2
                    regression targets and a termination flag: O = K + 1
                    (det) or 2K + 1 (gauss: mean [K], raw log-variance [K],
                    logit), bounds max_logvar/min_logvar [1, K] for gauss)
                    from DIR/params.bin (float32, the model's tensors in
                    table order), x.bin [16, 3], y.bin [16, 3] (the flag
                    last), w.bin [3] (per-target weights) -> ref_loss.bin
                    (float64 [1]), ref_grads.bin (float64, table order).
  train DIR HEAD    five torch.optim.AdamW steps (lr 0.01, betas (0.9,
                    0.999), eps 1e-8, weight decay 0, no clipping) on the
                    same batch from the same parameters, in float64 ->
                    ref_losses.bin (float64 [5], each step's loss before its
                    update), ref_params.bin (float64, after the 5 steps).
Written from the formulas of docs/world_models.md ("Termination head",
"Per-target loss weights"), not from the C code:
  loss = (1 / (B C)) sum_b [sum_{j<K} w_j l_bj + w_K BCE(z_b, t_b)]
         (+ 0.01 (sum max_logvar - sum min_logvar), Gaussian head)
with C = K + 1, l the squared error or the Gaussian NLL term, and BCE
torch.nn.functional.binary_cross_entropy_with_logits (reduction none).
Exit 0 ok, 77 no torch."""
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("term_cases: SKIP (no torch)")
    sys.exit(77)

B, IN, H, K = 16, 3, 8, 2


def build(d, head):
    gauss = head == "gauss"
    O = 2 * K + 1 if gauss else K + 1
    shapes = [("layers.0.weight", (H, IN)), ("layers.0.bias", (H,)),
              ("layers.2.weight", (O, H)), ("layers.2.bias", (O,))]
    if gauss:
        shapes += [("max_logvar", (1, K)), ("min_logvar", (1, K))]
    flat = np.fromfile(f"{d}/params.bin", np.float32).astype(np.float64)
    params, off = {}, 0
    for name, shp in shapes:
        n = int(np.prod(shp))
        params[name] = torch.tensor(flat[off:off + n].reshape(shp), requires_grad=True)
        off += n
    assert off == flat.size, (off, flat.size)
    x = torch.tensor(np.fromfile(f"{d}/x.bin", np.float32).astype(np.float64).reshape(B, IN))
    y = torch.tensor(np.fromfile(f"{d}/y.bin", np.float32).astype(np.float64).reshape(B, K + 1))
    w = torch.tensor(np.fromfile(f"{d}/w.bin", np.float32).astype(np.float64))
    return shapes, params, x, y, w, gauss


def loss_of(params, x, y, w, gauss):
    h = torch.tanh(x @ params["layers.0.weight"].T + params["layers.0.bias"])
    out = h @ params["layers.2.weight"].T + params["layers.2.bias"]
    C = K + 1
    z, t = out[:, -1], y[:, K]
    bce = F.binary_cross_entropy_with_logits(z, t, reduction="none")
    if gauss:
        mx, mn = params["max_logvar"], params["min_logvar"]
        mean, raw = out[:, :K], out[:, K:2 * K]
        lv = mx - F.softplus(mx - raw)
        lv = mn + F.softplus(lv - mn)
        l = (mean - y[:, :K]) ** 2 * torch.exp(-lv) + lv
    else:
        l = (out[:, :K] - y[:, :K]) ** 2
    loss = ((l * w[:K]).sum() + (bce * w[K]).sum()) / (B * C)
    if gauss:
        loss = loss + 0.01 * (mx.sum() - mn.sum())
    return loss


def grad_case(d, head):
    shapes, params, x, y, w, gauss = build(d, head)
    loss = loss_of(params, x, y, w, gauss)
    loss.backward()
    np.array([loss.item()], np.float64).tofile(f"{d}/ref_loss.bin")
    np.concatenate([params[n].grad.numpy().ravel() for n, _ in shapes]).tofile(
        f"{d}/ref_grads.bin")
    return 0


def train_case(d, head):
    shapes, params, x, y, w, gauss = build(d, head)
    opt = torch.optim.AdamW([params[n] for n, _ in shapes], lr=0.01, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.0)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = loss_of(params, x, y, w, gauss)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    np.array(losses, np.float64).tofile(f"{d}/ref_losses.bin")
    np.concatenate([params[n].detach().numpy().ravel() for n, _ in shapes]).tofile(
        f"{d}/ref_params.bin")
    return 0


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    sys.exit((grad_case if sys.argv[1] == "grad" else train_case)(sys.argv[2], sys.argv[3]))
