"""mixprec.torch_load: a trained model as a torch.nn.Module that reproduces
`mixprec predict` on raw inputs, read without the `safetensors` package.

    module = mixprec.load_torch("model.safetensors")   # `mixprec ckpt export RUN --torch`
    module = mixprec.load_torch("runs/mine")           # a run dir or checkpoint: exported first
    module = mixprec.Predictor("runs/mine").to_torch()
    module = run.to_torch()                            # a Run on user data: its current state
    next_obs, reward = module(obs, actions)            # world model, data units
    y = module(x)                                      # regressor: y; classifier: logits

A Gaussian head (export metadata head=gaussian, docs/world_models.md) adds
the learned bounds `max_logvar`, `min_logvar` [1, K] as parameters and its
forward returns the variances too, in the data's units, as `mixprec predict`:
    next_obs, reward, next_obs_var, reward_var = module(obs, actions)
    y, y_var = module(x)                               # regressor
An ensemble (metadata ensemble=E) holds its members as `members.<e>.layers`
(and `.max_logvar`, `.min_logvar`), and forward returns the dict of arrays
`mixprec predict` writes: the mean, the total variance, and its aleatoric
(Gaussian heads) and epistemic parts over the elite members (metadata
elites="0,2,4" when validation named a subset, `module.elites`; all
members otherwise). A world model with a termination head (metadata
termination=true: the last Linear's last output is the flag's logit)
returns that dict too, with "terminal_prob" (the sigmoid, averaged over the
elite members), as `mixprec predict`.

The module's state_dict holds `layers.<i>.weight/.bias` (an nn.Sequential
named `layers`, as the export; with residual blocks the Layers subclass of
mixprec._torch, whose Residual(n) items add their block's input, and
dropout:P as nn.Dropout(P), the identity in eval mode) and, for the world model, the buffers
`x_mean`, `x_std`, `y_mean`, `y_std`: forward standardises [obs, actions]
with the training split's statistics, runs the MLP and maps the output back
to the data's units (`next_obs = obs + delta * y_std + y_mean`), exactly as
`mixprec predict` does (docs/data.md). The classifier and regressor take x
as is, as mixprec does. Needs torch (imported on first use).
"""
import os
import shutil
import tempfile

from . import _ckpt, _lib

LAYERNORM_EPS = 1e-5  # mixprec's (model.h: mxp_model_spec.layernorm_eps), torch's default
STATS = ("x_mean", "x_std", "y_mean", "y_std")
BOUNDS = ("max_logvar", "min_logvar")  # a Gaussian head's soft log-variance bounds


def _is_export(path):
    if not os.path.isfile(path):
        return False
    try:
        h, _ = _ckpt.read_header(path)
    except (_lib.Error, OSError):
        return False
    meta = h.get("__metadata__") if isinstance(h, dict) else None
    return isinstance(meta, dict) and "kind" in meta and "layers" in meta


def load_torch(path, precision=None):
    """The model at `path` as a torch.nn.Module (see the module docstring).
    path: an export (`mixprec ckpt export RUN --torch`, Predictor.export_torch),
    or a run directory, checkpoint directory or checkpoint file of a run on
    user data (exported through mixprec.Predictor first). Weights are FP32:
    the module computes what `mixprec predict --precision fp32` does.
    precision is accepted for symmetry with Predictor and ignored for an
    export. Raises mixprec.Error for a file that is neither."""
    path = os.fspath(path)
    if _is_export(path):
        return _from_export(path)
    from .predict import Predictor
    with Predictor(path, precision=precision) as p:
        return p.to_torch()


def export_to_torch(predictor):
    """Predictor.to_torch(): export into a temporary folder, load, remove."""
    d = tempfile.mkdtemp(prefix="mixprec-torch-")
    try:
        return _from_export(predictor.export_torch(os.path.join(d, "model.safetensors")))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _parse_layers(path, text):
    items = [t.strip() for t in text.strip().strip("[]").split(",") if t.strip()]
    if not items:
        raise _lib.Error("%s: metadata layers=%r lists no layers" % (path, text), "format_error")
    return items


def _skip_module(path, i, item):
    """Residual(N) for residual:N, nn.Dropout(P) for dropout:P (_torch)."""
    import torch
    from ._torch import Residual
    name, _, arg = item.partition(":")
    try:
        if name == "residual" and 1 <= int(arg) <= i:
            return Residual(int(arg))
        if name == "dropout" and 0.0 <= float(arg) < 1.0:
            return torch.nn.Dropout(float(arg))
    except ValueError:
        pass
    raise _lib.Error("%s: layer %d is %r; accepted: residual:N (1 <= N <= %d), dropout:P "
                     "(0 <= P < 1)" % (path, i, item, i), "format_error")


def _from_export(path):
    import torch

    tensors, meta = _ckpt.read_checked(path)
    kind = meta.get("kind")
    if kind not in ("world_model", "classifier", "regressor"):
        raise _lib.Error("%s: metadata kind=%r; accepted: world_model, classifier, regressor"
                         % (path, kind), "format_error")
    eps = float(meta.get("layernorm_eps", LAYERNORM_EPS))
    acts = {"relu": torch.nn.ReLU, "gelu": torch.nn.GELU, "tanh": torch.nn.Tanh}
    try:
        n_members = int(meta.get("ensemble", "1"))
    except ValueError:
        n_members = 0
    if not 1 <= n_members <= 64:
        raise _lib.Error("%s: metadata ensemble=%r; accepted: 1..64" %
                         (path, meta.get("ensemble")), "format_error")
    pre = "members.0." if n_members > 1 else ""  # an ensemble: member 0 shapes the layers
    mods, width = [], None
    for i, item in enumerate(_parse_layers(path, meta["layers"])):
        w = tensors.get(pre + "layers.%d.weight" % i)
        if item.startswith("linear"):
            if w is None or w.ndim != 2:
                raise _lib.Error("%s: layer %d (%s) needs a 2-D layers.%d.weight" %
                                 (path, i, item, i), "format_error")
            mods.append(torch.nn.Linear(w.shape[1], w.shape[0],
                                        bias=(pre + "layers.%d.bias" % i) in tensors))
            width = w.shape[0]
        elif item == "layernorm":
            n = w.shape[0] if w is not None and w.ndim == 1 else width
            if n is None:
                raise _lib.Error("%s: layer %d (layernorm) has no width" % (path, i),
                                 "format_error")
            mods.append(torch.nn.LayerNorm(int(n), eps=eps))
        elif item in acts:
            mods.append(acts[item]())
        elif item.startswith("residual:") or item.startswith("dropout:"):
            mods.append(_skip_module(path, i, item))
        else:
            raise _lib.Error("%s: layer %d is %r; accepted: linear:N, relu, gelu, tanh, "
                             "layernorm, residual:N, dropout:P" % (path, i, item), "unsupported")
    gauss = meta.get("head", "deterministic")
    if gauss not in ("deterministic", "gaussian") or (gauss == "gaussian" and kind == "classifier"):
        raise _lib.Error("%s: metadata head=%r; accepted: deterministic, or gaussian for a "
                         "world_model or regressor" % (path, gauss), "format_error")
    gauss = gauss == "gaussian"
    from ._torch import sequential
    module = _module(kind, sequential(mods), meta)
    if n_members > 1:  # members.<e>.layers / .max_logvar / .min_logvar, as the export
        import copy
        members = torch.nn.ModuleList()
        for _ in range(n_members):
            member = torch.nn.Module()
            member.layers = copy.deepcopy(module.layers)
            members.append(member)
        del module.layers
        module.members = members
        try:  # the elites validation named ("0,2,4"); all members when absent
            elites = sorted({int(x) for x in meta.get("elites", "").split(",") if x.strip()})
        except ValueError:
            elites = None
        if elites is None or any(not 0 <= e < n_members for e in elites):
            raise _lib.Error("%s: metadata elites=%r; accepted: member indices 0..%d, comma-"
                             "separated" % (path, meta.get("elites"), n_members - 1),
                             "format_error")
        module.elites = elites or list(range(n_members))
    owners = list(module.members) if n_members > 1 else [module]
    prefixes = ["members.%d." % e for e in range(n_members)] if n_members > 1 else [""]
    state = {k: torch.from_numpy(v) for k, v in tensors.items()
             if k.startswith("layers.") or k.startswith("members.") or
             (kind == "world_model" and k in STATS) or (gauss and k in BOUNDS)}
    if gauss:
        missing = [p + k for p in prefixes for k in BOUNDS if p + k not in tensors]
        if missing:
            raise _lib.Error("%s: a Gaussian head needs %s; missing %s" %
                             (path, ", ".join(BOUNDS), ", ".join(missing)), "format_error")
        for owner, p in zip(owners, prefixes):
            for k in BOUNDS:
                setattr(owner, k, torch.nn.Parameter(torch.empty(tensors[p + k].shape)))
    if kind == "world_model":
        missing = [k for k in STATS if k not in tensors]
        if missing:
            raise _lib.Error("%s: a world model export needs %s; missing %s" %
                             (path, ", ".join(STATS), ", ".join(missing)), "format_error")
        for k in STATS:
            module.register_buffer(k, torch.empty(tensors[k].shape, dtype=torch.float32))
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise _lib.Error("%s: the tensors do not fit the layers %s: %s" %
                         (path, meta["layers"], e), "format_error") from None
    return module.eval()


def _module_class():
    import torch

    class MixprecModule(torch.nn.Module):
        """A mixprec model (see mixprec.torch_load). .kind: world_model,
        classifier or regressor; .metadata: the export's metadata."""

        def __init__(self, kind, layers, metadata):
            super().__init__()
            self.kind = kind
            self.metadata = dict(metadata)
            self.layers = layers

        def _member(self, owner, z):
            """One MLP; a Gaussian head's mean and bounded log-variance; a
            termination head's logit (the last output column), else None."""
            out = owner.layers(z)
            logit = None
            if self.metadata.get("termination") == "true":
                out, logit = out[..., :-1], out[..., -1]
            if not hasattr(owner, "max_logvar"):
                return out, None, logit
            k = owner.max_logvar.shape[1]
            F = torch.nn.functional
            lv = owner.max_logvar - F.softplus(owner.max_logvar - out[..., k:])
            lv = owner.min_logvar + F.softplus(lv - owner.min_logvar)
            return out[..., :k], lv, logit

        def _head(self, z):
            """The mean; the variance (None for one deterministic model);
            for an ensemble also its aleatoric and epistemic parts; the
            termination probability (mean of the members' sigmoids) or None."""
            if not hasattr(self, "members"):
                y, lv, logit = self._member(self, z)
                prob = None if logit is None else torch.sigmoid(logit)
                return y, (None if lv is None else torch.exp(lv)), None, prob
            outs = [self._member(self.members[e], z) for e in self.elites]
            means = torch.stack([o[0] for o in outs])
            mean = means.mean(0)
            epi = ((means - mean) ** 2).mean(0)
            alea = None if outs[0][1] is None else torch.exp(torch.stack([o[1] for o in outs])).mean(0)
            prob = None if outs[0][2] is None else \
                torch.sigmoid(torch.stack([o[2] for o in outs])).mean(0)
            return mean, epi if alea is None else alea + epi, (alea, epi), prob

        def forward(self, *args):
            if self.kind != "world_model":
                if len(args) != 1:
                    raise TypeError("a %s takes forward(x); got %d arguments" %
                                    (self.kind, len(args)))
                y, var, parts, _ = self._head(torch.as_tensor(args[0], dtype=torch.float32))
                if parts is not None:
                    out = {"y": y, "y_var": var, "y_epistemic": parts[1]}
                    if parts[0] is not None:
                        out["y_aleatoric"] = parts[0]
                    return out
                return y if var is None else (y, var)
            if len(args) != 2:
                raise TypeError("a world model takes forward(obs, actions); got %d arguments"
                                % len(args))
            obs = torch.as_tensor(args[0], dtype=torch.float32)
            actions = torch.as_tensor(args[1], dtype=torch.float32)
            s = self.y_mean.shape[0] - 1
            if obs.dim() != 2 or actions.dim() != 2 or obs.shape[1] != s or \
                    obs.shape[1] + actions.shape[1] != self.x_mean.shape[0] or \
                    obs.shape[0] != actions.shape[0]:
                raise ValueError("obs %s, actions %s; accepted: obs [N, %d], actions [N, %d]" %
                                 (tuple(obs.shape), tuple(actions.shape), s,
                                  self.x_mean.shape[0] - s))
            z = (torch.cat([obs, actions], 1) - self.x_mean) / self.x_std
            y, var, parts, prob = self._head(z)
            y = y * self.y_std + self.y_mean
            if var is None and prob is None:
                return obs + y[:, :s], y[:, s]
            if prob is not None and var is None:  # termination head: the dict of predict
                return {"next_obs": obs + y[:, :s], "reward": y[:, s], "terminal_prob": prob}
            s2 = self.y_std ** 2
            var = var * s2
            if parts is None and prob is None:
                return obs + y[:, :s], y[:, s], var[:, :s], var[:, s]
            out = {"next_obs": obs + y[:, :s], "reward": y[:, s], "next_obs_var": var[:, :s],
                   "reward_var": var[:, s]}
            if prob is not None:
                out["terminal_prob"] = prob
            for name, v in zip(("aleatoric", "epistemic"), parts or ()):
                if v is not None:
                    out["next_obs_" + name] = (v * s2)[:, :s]
                    out["reward_" + name] = (v * s2)[:, s]
            return out

    return MixprecModule


_cls = None


def _module(kind, layers, metadata):
    global _cls
    if _cls is None:
        _cls = _module_class()
    return _cls(kind, layers, metadata)
