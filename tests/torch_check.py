"""tests/torch_check.py EXPORT INPUT PREDICTED [REPLAY]: the PyTorch side of
test_user_run.c. Loads `mixprec ckpt export --torch` output into the
documented nn.Sequential with load_state_dict(strict=True), runs it on
INPUT (.npz or safetensors) as docs/data.md shows, and compares with
`mixprec predict` output PREDICTED to 1e-5 relative (fp32). With REPLAY (the
world model's .npz), also recomputes the standardisation statistics of the
training split (first round(0.9 E) episodes) and compares them with the
exported x_mean/x_std/y_mean/y_std. Exit 0 ok, 1 mismatch, 77 no torch."""
import json
import struct
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("torch_check: SKIP (no torch)")
    sys.exit(77)


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


def load_any(path):
    if open(path, 'rb').read(2) == b'PK':
        return dict(np.load(path)), {}
    return st_read(path)


export, meta = st_read(sys.argv[1])
inputs, _ = load_any(sys.argv[2])
pred, _ = st_read(sys.argv[3])

# ---- the ten lines a PyTorch user writes (docs/data.md) ----
acts = {"relu": torch.nn.ReLU, "gelu": torch.nn.GELU, "tanh": torch.nn.Tanh}
mods, width = [], None
for item in meta["layers"].strip("[]").split(", "):
    if item.startswith("linear:"):
        width_in = mods and [m for m in mods if isinstance(m, torch.nn.Linear)][-1].out_features
        fan_in = width_in or export["layers.0.weight"].shape[1]
        mods.append(torch.nn.Linear(fan_in, int(item[7:])))
        width = int(item[7:])
    elif item == "layernorm":
        mods.append(torch.nn.LayerNorm(width))
    else:
        mods.append(acts[item]())


class Net(torch.nn.Module):  # state_dict names layers.<i>.weight / .bias, as mixprec's
    def __init__(self, mods):
        super().__init__()
        self.layers = torch.nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x)


model = Net(mods)
state = {k: torch.from_numpy(v.copy()) for k, v in export.items() if k.startswith("layers.")}
model.load_state_dict(state, strict=True)

ok = True
with torch.no_grad():
    if meta["kind"] == "world_model":
        obs = torch.from_numpy(inputs["obs"].astype(np.float32))
        actions = torch.from_numpy(inputs["actions"].astype(np.float32))
        st = {k: torch.from_numpy(export[k].copy()) for k in ("x_mean", "x_std", "y_mean", "y_std")}
        z = (torch.cat([obs, actions], 1) - st["x_mean"]) / st["x_std"]
        y = model(z) * st["y_std"] + st["y_mean"]
        S = obs.shape[1]
        ref = {"next_obs": obs + y[:, :S], "reward": y[:, S]}
    else:
        ref = {"y": model(torch.from_numpy(inputs["x"].astype(np.float32)))}
for k, r in ref.items():
    r = r.numpy().astype(np.float64)
    g = pred[k].astype(np.float64)
    err = np.abs(g - r) - (1e-6 + 1e-5 * np.abs(r))
    if g.shape != r.shape or err.max() > 0:
        print(f"torch_check: {k}: max |mixprec - torch| = {np.abs(g - r).max():.3g} "
              f"(shape {g.shape} vs {r.shape})")
        ok = False
    else:
        print(f"torch_check: {k} {g.shape}: max |mixprec - torch| = {np.abs(g - r).max():.3g}")

if len(sys.argv) > 4:
    z = np.load(sys.argv[4])
    obs, act, rew, ln = z["obs"], z["actions"], z["rewards"], z["lengths"]
    E = obs.shape[0]
    n_tr = min(max(int(np.floor((1 - 0.1) * E + 0.5)), 1), E - 1)
    xs, ys = [], []
    for e in range(n_tr):
        for t in range(ln[e]):
            xs.append(np.concatenate([obs[e, t], act[e, t]]))
            d = (obs[e, t + 1].astype(np.float64) - obs[e, t].astype(np.float64)).astype(np.float32)
            ys.append(np.concatenate([d, [rew[e, t]]]))
    xs, ys = np.array(xs, np.float64), np.array(ys, np.float64)
    for k, v in (("x_mean", xs.mean(0)), ("x_std", np.maximum(xs.std(0), 1e-6)),
                 ("y_mean", ys.mean(0)), ("y_std", np.maximum(ys.std(0), 1e-6))):
        if not np.allclose(export[k], v, rtol=1e-5, atol=1e-7):
            print(f"torch_check: statistic {k}: exported {export[k]}, numpy {v}")
            ok = False
    print("torch_check: statistics of the training split match numpy" if ok else "")
sys.exit(0 if ok else 1)
