"""tests/gauss_cases.py: the PyTorch side of test_gauss_head.c.

  grad DIR      the Gaussian head's loss and every gradient, in float64, of
                the model test_gauss_head.c builds (in 3, linear:8, tanh,
                linear:4 = mean and log-variance of K=2 targets, bounds
                max_logvar/min_logvar [1, 2]) from DIR/params.bin (float32,
                the model's tensors in table order), x.bin [16, 3], y.bin
                [16, 2]; written from the documented formulas
                (docs/world_models.md), not from the C code: ref_loss.bin
                (float64 [1]), ref_grads.bin (float64, table order),
                ref_dpred.bin (float64 [16, 4], dloss/doutput).
  export EXPORT INPUT PREDICTED
                the GaussianMLP module of docs/world_models.md loaded from
                `mixprec ckpt export --torch` (strict), run on INPUT's obs and
                actions as a world model; its mean and variance (data units)
                must match `mixprec predict` output to 1e-5 relative.
Exit 0 ok, 1 mismatch, 77 no torch."""
import json
import struct
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("gauss_cases: SKIP (no torch)")
    sys.exit(77)


# ---- the module of docs/world_models.md -------------------------------------
class GaussianMLP(nn.Module):
    """PETS / mbrl-lib GaussianMLP head over an nn.Sequential whose last
    Linear has 2K outputs: per row the mean [K] then the raw log-variance."""

    def __init__(self, layers, out_size):
        super().__init__()
        self.layers = layers
        self.max_logvar = nn.Parameter(torch.full((1, out_size), 0.5))
        self.min_logvar = nn.Parameter(torch.full((1, out_size), -10.0))

    def forward(self, x):
        out = self.layers(x)
        k = self.max_logvar.shape[1]
        mean, logvar = out[..., :k], out[..., k:]
        logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        return mean, logvar

    def loss(self, x, y):
        """mbrl-lib's training loss: Gaussian NLL + 0.01 (sum max - sum min)."""
        mean, logvar = self(x)
        nll = ((mean - y) ** 2 * torch.exp(-logvar) + logvar).mean()
        return nll + 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())


class Ensemble(nn.Module):
    """E GaussianMLP members (state_dict names members.<e>.*, as mixprec's
    export); forward gives the ensemble mean, the aleatoric variance (mean
    of the members' variances) and the epistemic one (population variance
    of the members' means)."""

    def __init__(self, members):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, x):
        means, logvars = zip(*(m(x) for m in self.members))
        means, var = torch.stack(means), torch.exp(torch.stack(logvars))
        mean = means.mean(0)
        return mean, var.mean(0), ((means - mean) ** 2).mean(0)


def st_read(path):
    with open(path, 'rb') as f:
        data = f.read()
    n = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dts = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + b:8 + n + e], dts[v["dtype"]]).reshape(v["shape"])
    return out, meta


def sequential(layers_text, in_dim):
    acts = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
    mods, width = [], in_dim
    for item in layers_text.strip("[]").split(", "):
        if item.startswith("linear:"):
            mods.append(nn.Linear(width, int(item[7:])))
            width = int(item[7:])
        elif item == "layernorm":
            mods.append(nn.LayerNorm(width))
        else:
            mods.append(acts[item]())
    return nn.Sequential(*mods)


def grad_case(d):
    B, IN, H, K = 16, 3, 8, 2
    shapes = [("layers.0.weight", (H, IN)), ("layers.0.bias", (H,)),
              ("layers.2.weight", (2 * K, H)), ("layers.2.bias", (2 * K,)),
              ("max_logvar", (1, K)), ("min_logvar", (1, K))]
    flat = np.fromfile(f"{d}/params.bin", np.float32).astype(np.float64)
    x = torch.tensor(np.fromfile(f"{d}/x.bin", np.float32).astype(np.float64).reshape(B, IN))
    y = torch.tensor(np.fromfile(f"{d}/y.bin", np.float32).astype(np.float64).reshape(B, K))
    model = GaussianMLP(nn.Sequential(nn.Linear(IN, H), nn.Tanh(), nn.Linear(H, 2 * K)), K)
    model = model.double()
    sd, off = {}, 0
    for name, shp in shapes:
        n = int(np.prod(shp))
        sd[name] = torch.tensor(flat[off:off + n].reshape(shp))
        off += n
    assert off == flat.size, (off, flat.size)
    model.load_state_dict(sd, strict=True)
    out = model.layers(x)
    out.retain_grad()
    k = K
    mean, raw = out[:, :k], out[:, k:]
    lv = model.max_logvar - F.softplus(model.max_logvar - raw)
    lv = model.min_logvar + F.softplus(lv - model.min_logvar)
    loss = ((mean - y) ** 2 * torch.exp(-lv) + lv).mean() + \
        0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
    loss.backward()
    params = dict(model.named_parameters())
    np.array([loss.item()], np.float64).tofile(f"{d}/ref_loss.bin")
    np.concatenate([params[n].grad.numpy().ravel() for n, _ in shapes]).tofile(
        f"{d}/ref_grads.bin")
    out.grad.numpy().astype(np.float64).tofile(f"{d}/ref_dpred.bin")
    return 0


def export_case(exp_path, in_path, pred_path):
    export, meta = st_read(exp_path)
    inputs = dict(np.load(in_path))
    pred, _ = st_read(pred_path)
    if meta.get("head") != "gaussian":
        print(f"gauss_cases: export metadata head={meta.get('head')!r}, expected 'gaussian'")
        return 1
    # ---- as docs/world_models.md shows ----
    stats = {k: torch.tensor(export.pop(k).copy()) for k in ("x_mean", "x_std", "y_mean", "y_std")}
    E = int(meta.get("ensemble", "1"))
    pre = "members.0." if E > 1 else ""
    K = export[pre + "max_logvar"].shape[1]
    layers_in = export[pre + "layers.0.weight"].shape[1]
    if E > 1:
        model = Ensemble([GaussianMLP(sequential(meta["layers"], layers_in), K) for _ in range(E)])
    else:
        model = GaussianMLP(sequential(meta["layers"], layers_in), K)
    model.load_state_dict({k: torch.tensor(v.copy()) for k, v in export.items()}, strict=True)
    obs = torch.tensor(inputs["obs"], dtype=torch.float32)
    act = torch.tensor(inputs["actions"], dtype=torch.float32)
    with torch.no_grad():
        x = (torch.cat([obs, act], 1) - stats["x_mean"]) / stats["x_std"]
        if E > 1:
            mean, aleatoric, epistemic = model(x)
        else:
            mean, logvar = model(x)
            aleatoric, epistemic = torch.exp(logvar), torch.zeros_like(mean)
        y = mean * stats["y_std"] + stats["y_mean"]
        s2 = stats["y_std"] ** 2
        var = (aleatoric + epistemic) * s2
    S = obs.shape[1]
    want = {"next_obs": obs + y[:, :S], "reward": y[:, S], "next_obs_var": var[:, :S],
            "reward_var": var[:, S]}
    if E > 1:
        want.update({"next_obs_aleatoric": (aleatoric * s2)[:, :S],
                     "reward_aleatoric": (aleatoric * s2)[:, S],
                     "next_obs_epistemic": (epistemic * s2)[:, :S],
                     "reward_epistemic": (epistemic * s2)[:, S]})
    if set(want) != set(pred):
        print(f"gauss_cases: predict wrote {sorted(pred)}, expected {sorted(want)}")
        return 1
    bad = 0
    for k, v in want.items():
        got = pred[k].astype(np.float64)
        ref = v.numpy().astype(np.float64)
        err = np.abs(got - ref) - (1e-6 + 1e-5 * np.abs(ref))
        if got.shape != ref.shape or (err > 0).any():
            print(f"gauss_cases: {k} differs: max |diff| {np.abs(got - ref).max():.3g}")
            bad = 1
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "grad":
        sys.exit(grad_case(sys.argv[2]))
    sys.exit(export_case(sys.argv[2], sys.argv[3], sys.argv[4]))
