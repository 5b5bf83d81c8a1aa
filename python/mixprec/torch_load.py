"""mixprec.torch_load: a trained model as a torch.nn.Module that reproduces
`mixprec predict` on raw inputs, read without the `safetensors` package.

    module = mixprec.load_torch("model.safetensors")   # `mixprec ckpt export RUN --torch`
    module = mixprec.load_torch("runs/mine")           # a run dir or checkpoint: exported first
    module = mixprec.Predictor("runs/mine").to_torch()
    next_obs, reward = module(obs, actions)            # world model, data units
    y = module(x)                                      # regressor: y; classifier: logits

A Gaussian head (export metadata head=gaussian, docs/world_models.md) adds
the learned bounds `max_logvar`, `min_logvar` [1, K] as parameters and its
forward returns the variances too, in the data's units, as `mixprec predict`:
    next_obs, reward, next_obs_var, reward_var = module(obs, actions)
    y, y_var = module(x)                               # regressor

The module's state_dict holds `layers.<i>.weight/.bias` (an nn.Sequential
named `layers`, as the export) and, for the world model, the buffers
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


def _from_export(path):
    import torch

    tensors, meta = _ckpt.read_checked(path)
    kind = meta.get("kind")
    if kind not in ("world_model", "classifier", "regressor"):
        raise _lib.Error("%s: metadata kind=%r; accepted: world_model, classifier, regressor"
                         % (path, kind), "format_error")
    eps = float(meta.get("layernorm_eps", LAYERNORM_EPS))
    acts = {"relu": torch.nn.ReLU, "gelu": torch.nn.GELU, "tanh": torch.nn.Tanh}
    mods, width = [], None
    for i, item in enumerate(_parse_layers(path, meta["layers"])):
        w = tensors.get("layers.%d.weight" % i)
        if item.startswith("linear"):
            if w is None or w.ndim != 2:
                raise _lib.Error("%s: layer %d (%s) needs a 2-D layers.%d.weight" %
                                 (path, i, item, i), "format_error")
            mods.append(torch.nn.Linear(w.shape[1], w.shape[0],
                                        bias=("layers.%d.bias" % i) in tensors))
            width = w.shape[0]
        elif item == "layernorm":
            n = w.shape[0] if w is not None and w.ndim == 1 else width
            if n is None:
                raise _lib.Error("%s: layer %d (layernorm) has no width" % (path, i),
                                 "format_error")
            mods.append(torch.nn.LayerNorm(int(n), eps=eps))
        elif item in acts:
            mods.append(acts[item]())
        else:
            raise _lib.Error("%s: layer %d is %r; accepted: linear:N, relu, gelu, tanh, "
                             "layernorm" % (path, i, item), "unsupported")
    gauss = meta.get("head", "deterministic")
    if gauss not in ("deterministic", "gaussian") or (gauss == "gaussian" and kind == "classifier"):
        raise _lib.Error("%s: metadata head=%r; accepted: deterministic, or gaussian for a "
                         "world_model or regressor" % (path, gauss), "format_error")
    gauss = gauss == "gaussian"
    module = _module(kind, torch.nn.Sequential(*mods), meta)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()
             if k.startswith("layers.") or (kind == "world_model" and k in STATS) or
             (gauss and k in BOUNDS)}
    if gauss:
        missing = [k for k in BOUNDS if k not in tensors]
        if missing:
            raise _lib.Error("%s: a Gaussian head needs %s; missing %s" %
                             (path, ", ".join(BOUNDS), ", ".join(missing)), "format_error")
        for k in BOUNDS:
            setattr(module, k, torch.nn.Parameter(torch.empty(tensors[k].shape)))
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

        def _head(self, z):
            """The MLP; a Gaussian head's mean and bounded log-variance."""
            out = self.layers(z)
            if not hasattr(self, "max_logvar"):
                return out, None
            k = self.max_logvar.shape[1]
            F = torch.nn.functional
            lv = self.max_logvar - F.softplus(self.max_logvar - out[..., k:])
            lv = self.min_logvar + F.softplus(lv - self.min_logvar)
            return out[..., :k], lv

        def forward(self, *args):
            if self.kind != "world_model":
                if len(args) != 1:
                    raise TypeError("a %s takes forward(x); got %d arguments" %
                                    (self.kind, len(args)))
                y, lv = self._head(torch.as_tensor(args[0], dtype=torch.float32))
                return y if lv is None else (y, torch.exp(lv))
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
            y, lv = self._head(z)
            y = y * self.y_std + self.y_mean
            if lv is None:
                return obs + y[:, :s], y[:, s]
            var = torch.exp(lv) * self.y_std ** 2
            return obs + y[:, :s], y[:, s], var[:, :s], var[:, s]

    return MixprecModule


_cls = None


def _module(kind, layers, metadata):
    global _cls
    if _cls is None:
        _cls = _module_class()
    return _cls(kind, layers, metadata)
