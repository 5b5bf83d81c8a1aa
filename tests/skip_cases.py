"""tests/skip_cases.py: the PyTorch side of test_skip.c and test_skip_cli.sh.

  grad DIR P    loss and every gradient, in float64, of the model
                test_skip.c builds: in 3, [linear:8, tanh, linear:8, gelu,
                linear:8, residual:3, dropout:P, tanh, linear:8, residual:2,
                linear] (2 targets, MSE), from DIR/params.bin (float32, the
                tensors in table order), x.bin [16, 3], y.bin [16, 2] and
                mask.bin (uint8 [16, 8], 1 = kept: the mask mixprec drew for
                the dropout layer). Written from the documented formulas
                (docs/world_models.md "Residual blocks and dropout": a
                residual layer adds the input of the N layers before it,
                y = x + f(x); dropout multiplies by mask / (1 - P)), not
                from the C code. Writes ref_loss.bin (float64 [1]),
                ref_grads.bin (float64, table order) and ref_scale.bin (the
                float32 factor torch.nn.functional.dropout gives a kept
                element of a float32 tensor at P).
  export EXPORT INPUT PREDICTED
                the Residual / Layers modules of docs/world_models.md,
                loaded from `mixprec ckpt export --torch` (strict), run as a
                world model (deterministic head) on INPUT's obs and actions
                in eval mode; next_obs and reward must match `mixprec
                predict` to 1e-6 + 1e-5 relative (as gauss_cases.py). Also mixprec.load_torch's module
                (PYTHONPATH set by the caller) must give the same.
Exit 0 ok, 1 mismatch, 77 no torch."""
import json
import struct
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("skip_cases: SKIP (no torch)")
    sys.exit(77)


# ---- the modules of docs/world_models.md ------------------------------------
class Residual(nn.Module):
    """residual:N: adds the input of the N layers before it to their output."""

    def __init__(self, n):
        super().__init__()
        self.n = n


class Layers(nn.Sequential):
    """nn.Sequential that runs Residual(n): y = (input of the n modules
    before it) + x. State-dict names layers.<i>.weight, as mixprec's."""

    def forward(self, x):
        ins = []
        for m in self:
            ins.append(x)
            x = ins[-1 - m.n] + x if isinstance(m, Residual) else m(x)
        return x


def sequential(layers_text, in_dim):   # metadata "layers" -> Layers
    acts = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
    mods, width = [], in_dim
    for item in layers_text.strip("[]").split(", "):
        if item.startswith("linear:"):
            mods.append(nn.Linear(width, int(item[7:]))); width = int(item[7:])
        elif item.startswith("residual:"):
            mods.append(Residual(int(item[9:])))
        elif item.startswith("dropout:"):
            mods.append(nn.Dropout(float(item[8:])))
        elif item == "layernorm":
            mods.append(nn.LayerNorm(width))
        else:
            mods.append(acts[item]())
    return Layers(*mods)


def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dt = {"F32": np.float32, "BOOL": np.bool_, "U8": np.uint8}
    return ({k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                              dt.get(v["dtype"], np.float32)).reshape(v["shape"])
             for k, v in header.items()}, meta)


# ---- grad -------------------------------------------------------------------
class MaskDropout(nn.Module):
    """The documented dropout with a given mask: x * mask / (1 - P)."""

    def __init__(self, mask, p):
        super().__init__()
        self.mask, self.p = mask, p

    def forward(self, x):
        return x * self.mask / (1.0 - self.p)


def grad_case(d, p):
    B, IN, H, K = 16, 3, 8, 2
    mask = torch.tensor(np.fromfile(d + "/mask.bin", np.uint8).reshape(B, H).astype(np.float64))
    mods = [nn.Linear(IN, H), nn.Tanh(), nn.Linear(H, H), nn.GELU(), nn.Linear(H, H), Residual(3),
            MaskDropout(mask, p), nn.Tanh(), nn.Linear(H, H), Residual(2), nn.Linear(H, K)]
    model = Layers(*mods).double()
    params = np.fromfile(d + "/params.bin", np.float32).astype(np.float64)
    off = 0
    with torch.no_grad():
        for _, t in model.named_parameters():
            t.copy_(torch.tensor(params[off:off + t.numel()]).reshape(t.shape))
            off += t.numel()
    assert off == params.size, (off, params.size)
    x = torch.tensor(np.fromfile(d + "/x.bin", np.float32).reshape(B, IN).astype(np.float64))
    y = torch.tensor(np.fromfile(d + "/y.bin", np.float32).reshape(B, K).astype(np.float64))
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    np.array([loss.item()], np.float64).tofile(d + "/ref_loss.bin")
    np.concatenate([t.grad.numpy().ravel() for _, t in model.named_parameters()]).tofile(
        d + "/ref_grads.bin")
    # torch's own dropout of a float32 tensor: the factor of a kept element
    out = torch.nn.functional.dropout(torch.ones(4096, dtype=torch.float32), p, training=True)
    kept = out[out != 0].unique()
    assert kept.numel() == 1, kept
    np.array([kept.item()], np.float32).tofile(d + "/ref_scale.bin")
    return 0


# ---- export -----------------------------------------------------------------
def export_case(exp_path, in_path, pred_path):
    sd, meta = st_read(exp_path)
    sd = {k: torch.tensor(v.copy()) for k, v in sd.items()}
    stats = {k: sd.pop(k) for k in ("x_mean", "x_std", "y_mean", "y_std")}
    layers = sequential(meta["layers"], sd["layers.0.weight"].shape[1])
    model = nn.Module()
    model.layers = layers
    model.load_state_dict(sd, strict=True)
    model.eval()
    inp = np.load(in_path)
    obs, act = torch.tensor(inp["obs"]), torch.tensor(inp["actions"])
    with torch.no_grad():
        x = (torch.cat([obs, act], 1) - stats["x_mean"]) / stats["x_std"]
        delta = model.layers(x) * stats["y_std"] + stats["y_mean"]
    S = obs.shape[1]
    nxt, rew = (obs + delta[:, :S]).numpy(), delta[:, S].numpy()
    pred, _ = st_read(pred_path)
    ok = True
    for name, got in (("next_obs", nxt), ("reward", rew)):
        ref = pred[name].reshape(got.shape)
        err = np.max(np.abs(got - ref) - (1e-6 + 1e-5 * np.abs(ref)))
        print(f"skip_cases: export {name}: max |difference| - (1e-6 + 1e-5 |ref|) = {err:.2e}")
        ok = ok and err <= 0
    try:
        import mixprec
        mod = mixprec.load_torch(exp_path)
        with torch.no_grad():
            out = mod(obs, act)
        for name, got in zip(("next_obs", "reward"), out[:2]):
            ref = pred[name].reshape(got.shape)
            err = np.max(np.abs(got.numpy() - ref) - (1e-6 + 1e-5 * np.abs(ref)))
            print(f"skip_cases: mixprec.load_torch {name}: max |difference| - tolerance "
                  f"{err:.2e}")
            ok = ok and err <= 0
        ok = ok and any(isinstance(m, nn.Dropout) for m in mod.layers)
    except ImportError:
        print("skip_cases: mixprec not importable: load_torch not checked")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "grad":
        sys.exit(grad_case(sys.argv[2], float(sys.argv[3])))
    sys.exit(export_case(sys.argv[2], sys.argv[3], sys.argv[4]))
