"""mixprec.predict: a checkpoint of a run on user data, used without the
training data (the library's mxp_predictor, include/mixprec/predict.h;
the CLI's `mixprec predict` / `eval` / `ckpt export --torch`).

    p = mixprec.Predictor("runs/latest")        # run dir, checkpoints dir or file
    y = p.predict(x=x)                          # classifier: logits; regressor: y
    out = p.predict(obs=obs, actions=actions)   # world model: next_obs, reward (data units)
    p.evaluate({"x": x, "y": y}); p.export_torch("model_torch.safetensors")
    module = p.to_torch()                       # torch.nn.Module: predict() on raw inputs
"""
import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_int, c_int64, c_void_p

import numpy as np

from . import _capi, _data, _lib

_KINDS = ("world_model", "classifier", "regressor")
_NP = {0: np.float32, 1: np.float64, 2: np.int32, 3: np.int64}


class _Array(Structure):
    """struct mxp_array (dataset.h)."""
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * 8), ("numel", c_int64), ("data", c_void_p)]


_declared = False


def _declare():
    global _declared
    L = _capi.declare()
    if _declared:
        return L
    P, E, f = c_void_p, POINTER(_lib.CError), _lib._fn
    f(L, "mxp_predictor_load", c_int, c_char_p, c_int, POINTER(P), E)
    f(L, "mxp_predictor_destroy", None, P)
    f(L, "mxp_predictor_kind", c_int, P)
    f(L, "mxp_predictor_precision", c_int, P)
    f(L, "mxp_predictor_checkpoint", c_char_p, P)
    f(L, "mxp_predictor_evaluate", c_int, P, P, POINTER(_capi.RunEval), E)
    f(L, "mxp_predictor_predict", c_int, P, P, POINTER(P), E)
    f(L, "mxp_predictor_export_torch", c_int, P, c_char_p, E)
    f(L, "mxp_dataset_num_arrays", c_int, P)
    f(L, "mxp_dataset_array", POINTER(_Array), P, c_int)
    f(L, "mxp_dataset_destroy", None, P)
    _declared = True
    return L


def _dataset_arrays(L, d):
    out = {}
    for i in range(L.mxp_dataset_num_arrays(d)):
        a = L.mxp_dataset_array(d, i).contents
        dt = np.dtype(_NP[a.dtype])
        shape = tuple(a.shape[k] for k in range(a.ndim))
        raw = ctypes.string_at(a.data, a.numel * dt.itemsize)
        out[a.name.decode()] = np.frombuffer(raw, dt).reshape(shape).copy()
    return out


class Predictor(_lib.Handle):
    """The model of one checkpoint (see the module docstring). precision:
    a mode name to compute in, or None for the checkpoint's."""

    def __init__(self, path, precision=None):
        L = _declare()
        self._L = L
        self.ptr = c_void_p()
        prec = -1 if precision is None else _capi.PRECISIONS.index(precision) \
            if precision in _capi.PRECISIONS else None
        if prec is None:
            raise _lib.error_from("config_error", "precision=%r; accepted: %s or None" %
                                  (precision, ", ".join(_capi.PRECISIONS)))
        err = _lib.CError()
        _lib.track(self)
        _lib.check(L.mxp_predictor_load(os.fsencode(path), prec, ctypes.byref(self.ptr),
                                        ctypes.byref(err)), err)

    @property
    def kind(self):
        return _KINDS[self._L.mxp_predictor_kind(self.ptr)]

    @property
    def precision(self):
        return _capi.PRECISIONS[self._L.mxp_predictor_precision(self.ptr)]

    @property
    def checkpoint(self):
        return _capi.cstr(self._L.mxp_predictor_checkpoint(self.ptr))

    def predict(self, x=None, **arrays):
        """x [N, D] -> y [N, K] (classifier: logits [N, C]); or obs=[N, S],
        actions=[N, A] -> {"next_obs": [N, S], "reward": [N]} in the data's
        units; a Gaussian head (model.head=gaussian) adds the variances
        "next_obs_var" [N, S], "reward_var" [N] (regressor: "y_var" [N, K]).
        A single x returns an array, anything else a dict."""
        if x is not None:
            arrays["x"] = x
        ds = _data.Dataset(arrays)
        out = c_void_p()
        err = _lib.CError()
        try:
            _lib.check(self._L.mxp_predictor_predict(self.ptr, ds.ptr, ctypes.byref(out),
                                                     ctypes.byref(err)), err)
            res = _dataset_arrays(self._L, out)
        finally:
            ds.close()
            if out:
                self._L.mxp_dataset_destroy(out)
        return res["y"] if set(arrays) == {"x"} and set(res) == {"y"} else res

    def evaluate(self, data=None):
        """Loss (and accuracy; world models: "open_loop"; ensembles:
        "member_loss", "elites", as Run.evaluate)
        as training reports it, on `data` (a dict of
        arrays as for training, or the path of a safetensors/.npz file, as
        `mixprec eval --data`), or on the run's held-out split when None
        (runs on data.path only)."""
        ev = _capi.RunEval()
        err = _lib.CError()
        ds = _data.Dataset(data) if data is not None else None
        try:
            _lib.check(self._L.mxp_predictor_evaluate(self.ptr, ds.ptr if ds else None,
                                                      ctypes.byref(ev), ctypes.byref(err)), err)
        finally:
            if ds:
                ds.close()
        from .run import _nan_to_none
        return {"split": _capi.cstr(ev.name), "loss": _nan_to_none(ev.loss),
                "accuracy": _nan_to_none(ev.accuracy), "bce": _nan_to_none(ev.bce),
                "open_loop": ev.open_loop_dict(), **ev.member_fields()}

    def export_torch(self, path):
        """A safetensors file for PyTorch (layers.<i>.weight/.bias, and the
        world model's standardisation statistics)."""
        err = _lib.CError()
        _lib.check(self._L.mxp_predictor_export_torch(self.ptr, os.fsencode(path),
                                                      ctypes.byref(err)), err)
        return os.fspath(path)

    def to_torch(self):
        """The model as a torch.nn.Module that reproduces predict() in FP32
        on raw inputs, standardisation included (mixprec.torch_load): a
        world model's forward(obs, actions) -> (next_obs, reward) in the
        data's units; a classifier's or regressor's forward(x). Needs torch
        (not the safetensors package)."""
        from .torch_load import export_to_torch
        return export_to_torch(self)

    def close(self):
        if self.ptr:
            self._L.mxp_predictor_destroy(self.ptr)
            self.ptr = c_void_p()
