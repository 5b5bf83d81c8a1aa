"""mixprec._data: NumPy arrays into the library's mxp_dataset, replay
buffers into arrays (buffer_arrays), layer lists into the model.layers key,
and parameter names between the library ("layers.0.weight") and PyTorch's
nn.Sequential ("0.weight").
"""
import ctypes
import os
from collections.abc import Mapping

import numpy as np

from . import _lib

_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2,
           np.dtype(np.int64): 3, np.dtype(np.bool_): 4}


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
                             "or the path of a safetensors/.npz/HDF5 file" % type(arrays).__name__,
                             "invalid_arg")
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
                # the C name ends at a NUL byte: 'x\0junk' would be taken as 'x'
                if not isinstance(name, str) or not name or "\0" in name:
                    raise _lib.Error("data: array name %r; accepted: a non-empty str without "
                                     "NUL bytes (x, y, obs, ...)" % (name,), "invalid_arg")
                a = np.asarray(value)
                if a.dtype.kind in "ui" and a.dtype not in _DTYPES:
                    a = a.astype(np.int64)
                elif a.dtype.kind == "f" and a.dtype not in _DTYPES:
                    a = a.astype(np.float32)
                if a.dtype not in _DTYPES:
                    raise _lib.Error("data[%r]: dtype %s; accepted: float32, float64, int32, "
                                     "int64, bool (or what converts to them)" % (name, a.dtype),
                                     "invalid_arg")
                a = np.ascontiguousarray(a)
                shape = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                _lib.check(L.mxp_dataset_add(self.ptr, name.encode(), _DTYPES[a.dtype],
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



# a transition tuple's fields, in the order of the classic DQN replay buffer
_TUPLE_NAMES = ("obs", "actions", "rewards", "next_obs", "dones")


def _array(v):
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def _sb3_arrays(buf):
    """A Stable-Baselines3 ReplayBuffer's arrays [size, n_envs, ...], oldest
    first, one environment after the other (each env's steps contiguous)."""
    size = buf.buffer_size if buf.full else buf.pos
    if size < 1:
        raise _lib.Error("replay_buffer: the Stable-Baselines3 buffer is empty", "invalid_arg")
    names = {"observations": "obs", "actions": "actions", "rewards": "rewards",
             "next_observations": "next_obs", "dones": "dones", "timeouts": "timeouts"}
    out = {}
    for attr, name in names.items():
        a = getattr(buf, attr, None)
        if a is None:  # next_observations under optimize_memory_usage
            continue
        a = np.asarray(a)
        a = np.roll(a, -buf.pos, axis=0) if buf.full else a[:size]
        out[name] = np.swapaxes(a, 0, 1).reshape((-1,) + a.shape[2:])
    # optimize_memory_usage=True keeps no next_observations: then obs[i+1] is
    # the next state and a done row is an episode's final state (docs/data.md)
    return out


def buffer_arrays(buf):
    """A replay buffer as a dict of arrays for Dataset (the names are judged
    by the library, docs/data.md):
      - a mapping {name: array}: flat transitions (obs/observations/states,
        actions, rewards, next_obs, terminals/timeouts/dones, ...) or episodes
        (obs [E, T+1, S], actions, rewards, lengths, terminals, timeouts [E, T]);
      - a sequence of transitions, each a mapping (stacked per key) or a tuple
        (obs, action, reward, next_obs, done);
      - a Stable-Baselines3 ReplayBuffer (observations, actions, rewards,
        next_observations, dones, timeouts; [size, n_envs, ...]).
    Torch tensors are accepted wherever arrays are."""
    if isinstance(buf, Mapping):
        return {str(k): _array(v) for k, v in buf.items()}
    if all(hasattr(buf, a) for a in ("observations", "actions", "rewards", "pos", "full",
                                     "buffer_size")):
        return _sb3_arrays(buf)
    if isinstance(buf, (list, tuple)) and buf:
        first = buf[0]
        if isinstance(first, Mapping):
            keys = list(first.keys())
            try:
                return {str(k): np.stack([_array(t[k]) for t in buf]) for k in keys}
            except (KeyError, ValueError) as e:
                raise _lib.Error("replay_buffer: the transitions do not share keys and shapes "
                                 "(%s); accepted: every transition with the keys %r"
                                 % (e, keys), "invalid_arg") from None
        if isinstance(first, (list, tuple)) or hasattr(first, "_fields"):
            if any(len(t) != len(_TUPLE_NAMES) for t in buf):
                raise _lib.Error("replay_buffer: transition tuples of %d fields; accepted: "
                                 "(obs, action, reward, next_obs, done)" % len(first),
                                 "invalid_arg")
            cols = list(zip(*buf))
            return {n: np.stack([_array(v) for v in c]) for n, c in zip(_TUPLE_NAMES, cols)}
    raise _lib.Error("replay_buffer: a %s; accepted: a dict of arrays (flat transitions or "
                     "episodes, docs/data.md), a non-empty list of transition dicts or "
                     "(obs, action, reward, next_obs, done) tuples, or a Stable-Baselines3 "
                     "ReplayBuffer" % type(buf).__name__, "invalid_arg")


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
