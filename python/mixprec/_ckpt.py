"""mixprec._ckpt: checkpoint files from Python.

resolve(path) finds the checkpoint a resume continues (the library's
mxp_ckpt_find_latest: newest verified one of a directory);
config_overrides(file) reads the config and precision a checkpoint was
written with from its safetensors header (the `config` and `precision`
metadata, as `mixprec train --resume` applies them); read/write_safetensors
move NumPy arrays in and out of safetensors files (F32, F16, BF16).
"""
import ctypes
import json
import os
import struct

import numpy as np

from . import _capi, _lib


def resolve(path):
    """(checkpoint file, is_run_dir) for a run dir, checkpoints dir or file."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise _lib.Error("resume %s: no such file or directory" % path, "io_error")
        return path, False
    d = os.path.join(path, "checkpoints")
    run_dir = os.path.isdir(d)
    if not run_dir:
        d = path
    L = _capi.declare()
    buf = ctypes.create_string_buffer(_capi.CKPT_PATH_MAX)
    err = _lib.CError()
    s = L.mxp_ckpt_find_latest(os.fsencode(d), False, None, buf, len(buf), None,
                               ctypes.byref(err))
    if s != 0:
        err.msg = ("resume %s: %s" % (path, err.msg.decode("utf-8", "replace"))).encode()[:511]
    _lib.check(s, err)
    return buf.value.decode(), run_dir


def read_header(path):
    """The JSON header of a safetensors file."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise _lib.Error("%s: not a safetensors file (shorter than 8 bytes)" % path,
                             "format_error")
        (n,) = struct.unpack("<Q", head)
        if n > (100 << 20):
            raise _lib.Error("%s: header of %d bytes; accepted: at most 100 MiB" % (path, n),
                             "format_error")
        try:
            return json.loads(f.read(n)), 8 + n
        except ValueError as e:
            raise _lib.Error("%s: header is not JSON (%s)" % (path, e), "format_error") from None


def config_overrides(path):
    """[(key, value)] that resume applies below the user's sources."""
    h, _ = read_header(path)
    meta = h.get("__metadata__", {})
    if "config" not in meta:
        raise _lib.Error("%s: no stored config: not a mixprec checkpoint" % path,
                         "format_error")
    L = _lib.lib()
    out = [(k, v) for k, v in json.loads(meta["config"]).items()
           if L.mxp_config_key_find(k.encode()) >= 0]
    # The checkpoint holds the weights: a model.init_from file that is gone
    # (Run(init=state_dict) wrote it to a temporary folder) is not needed.
    out = [(k, "none" if k == "model.init_from" and v != "none" and not os.path.exists(v)
            else v) for k, v in out]
    prec = meta.get("precision")
    if prec:
        out.append(("training.precision", prec))
        if prec not in ("fp16", "mixed_fp16"):
            out.append(("training.fp16_accumulate", "fp32"))
    return out


_DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32,
       "I64": np.int64, "U8": np.uint8, "I8": np.int8, "U16": np.uint16}


def read_safetensors(path):
    """{name: array} of a safetensors file (BF16 widened to float32)."""
    h, start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        blob = f.read()[start:]
    for name, t in h.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = blob[a:b]
        if t["dtype"] == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] in _DT:
            arr = np.frombuffer(raw, np.dtype(_DT[t["dtype"]]).newbyteorder("<"))
        else:
            raise _lib.Error("%s: tensor %s has dtype %s; accepted: %s, BF16" %
                             (path, name, t["dtype"], ", ".join(_DT)), "format_error")
        out[name] = arr.reshape(t["shape"]).copy()
    return out


def write_safetensors(path, tensors, metadata=None):
    """Write {name: array} (float32 unless float16/int) as safetensors."""
    names = sorted(tensors)
    header, chunks, off = {}, [], 0
    rev = {np.dtype(v): k for k, v in _DT.items()}
    for n in names:
        a = np.asarray(tensors[n])
        if a.dtype not in rev:
            a = a.astype(np.float32)
        a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))
        raw = a.tobytes()
        header[n] = {"dtype": rev[np.dtype(a.dtype.str.replace(">", "<"))],
                     "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)
