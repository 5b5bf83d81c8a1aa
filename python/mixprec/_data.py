"""mixprec._data: NumPy arrays into the library's mxp_dataset, layer lists
into the model.layers key, and parameter names between the library
("layers.0.weight") and PyTorch's nn.Sequential ("0.weight").
"""
import ctypes
import os

import numpy as np

from . import _lib

_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2,
           np.dtype(np.int64): 3}


class Dataset(_lib.Handle):
    """An owned mxp_dataset holding copies of a dict of arrays."""

    def __init__(self, arrays):
        """arrays: a dict {name: array}, or the path of a safetensors/.npz
        file (read by the library, mxp_dataset_read, as the CLI reads one)."""
        L = _lib.lib()
        if isinstance(arrays, (str, bytes, os.PathLike)):
            self._read(L, arrays)
            return
        if not hasattr(arrays, "items"):
            raise _lib.Error("data of type %s; accepted: a dict of arrays ({'x': ..., 'y': ...}) "
                             "or the path of a safetensors/.npz file" % type(arrays).__name__,
                             "invalid_arg")
        if not hasattr(L, "mxp_dataset_create"):
            raise _lib.Error("%s has no mxp_dataset_create: this libmixprec cannot take "
                             "arrays from memory; rebuild it" % _lib.lib_path(), "unsupported")
        P, E = ctypes.c_void_p, ctypes.POINTER(_lib.CError)
        _lib._fn(L, "mxp_dataset_create", ctypes.c_int, ctypes.POINTER(P), E)
        _lib._fn(L, "mxp_dataset_destroy", None, P)
        _lib._fn(L, "mxp_dataset_add", ctypes.c_int, P, ctypes.c_char_p, ctypes.c_int,
                 ctypes.c_int, ctypes.POINTER(ctypes.c_int64), P, E)
        self._L = L
        self.ptr = P()
        _lib.track(self)
        err = _lib.CError()
        _lib.check(L.mxp_dataset_create(ctypes.byref(self.ptr), ctypes.byref(err)), err)
        try:
            for name, value in arrays.items():
                a = np.asarray(value)
                if a.dtype == np.bool_ or a.dtype.kind in "ui" and a.dtype not in _DTYPES:
                    a = a.astype(np.int64)
                elif a.dtype.kind == "f" and a.dtype not in _DTYPES:
                    a = a.astype(np.float32)
                if a.dtype not in _DTYPES:
                    raise _lib.Error("data[%r]: dtype %s; accepted: float32, float64, int32, "
                                     "int64 (or what converts to them)" % (name, a.dtype),
                                     "invalid_arg")
                a = np.ascontiguousarray(a)
                shape = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                _lib.check(L.mxp_dataset_add(self.ptr, str(name).encode(), _DTYPES[a.dtype],
                                             a.ndim, shape, a.ctypes.data, ctypes.byref(err)),
                           err)
        except BaseException:
            self.close()
            raise

    def _read(self, L, path):
        P, E = ctypes.c_void_p, ctypes.POINTER(_lib.CError)
        _lib._fn(L, "mxp_dataset_read", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(P), E)
        _lib._fn(L, "mxp_dataset_destroy", None, P)
        self._L = L
        self.ptr = P()
        _lib.track(self)
        err = _lib.CError()
        _lib.check(L.mxp_dataset_read(os.fsencode(path), ctypes.byref(self.ptr),
                                      ctypes.byref(err)), err)

    def close(self):
        if self.ptr:
            self._L.mxp_dataset_destroy(self.ptr)
            self.ptr = ctypes.c_void_p()



def layers_text(model):
    """["linear:64", "gelu", "linear"] -> "linear:64,gelu,linear" (a string
    passes through)."""
    if isinstance(model, str):
        return model
    return ",".join(str(x) for x in model)


def torch_name(name):
    """"layers.0.weight" -> "0.weight" (nn.Sequential's name)."""
    return name[len("layers."):] if name.startswith("layers.") else name


def library_names(state_dict):
    """A state_dict under PyTorch names (or the library's) with the
    library's names, as float32 arrays."""
    out = {}
    for k, v in state_dict.items():
        if hasattr(v, "detach"):  # a torch tensor
            v = v.detach().cpu().numpy()
        k = str(k)
        out[k if k.startswith("layers.") else "layers." + k] = np.asarray(v, np.float32)
    return out
