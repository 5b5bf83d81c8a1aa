"""mixprec._ckpt: checkpoint files from Python.

read_header(file) reads a safetensors header; read/write_safetensors move
NumPy arrays in and out of safetensors files (F32, F16, BF16); read_checked
also returns the metadata and checks every tensor's extent against the file
(mixprec.load_torch reads exports with it, no safetensors package needed). (The config
of a resume is the library's mxp_run_resume_config: config.py.)
"""
import json
import os
import struct

import numpy as np

from . import _lib


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


def read_checked(path):
    """({name: array}, {metadata}) of a safetensors file, every tensor's
    dtype, shape and byte range checked against the header and the file size
    (BF16 widened to float32). Raises Error (format_error) naming the file
    and the tensor."""
    path = os.fspath(path)
    h, start = read_header(path)
    size = os.path.getsize(path)
    if not isinstance(h, dict):
        raise _lib.Error("%s: the safetensors header is not a JSON object" % path, "format_error")
    meta = h.pop("__metadata__", None) or {}
    out = {}
    with open(path, "rb") as f:
        for name, t in h.items():
            try:
                dt, shape, (a, b) = t["dtype"], [int(d) for d in t["shape"]], t["data_offsets"]
                a, b = int(a), int(b)
            except (KeyError, TypeError, ValueError):
                raise _lib.Error("%s: tensor %r has no valid dtype/shape/data_offsets" %
                                 (path, name), "format_error") from None
            width = 2 if dt == "BF16" else np.dtype(_DT[dt]).itemsize if dt in _DT else None
            if width is None:
                raise _lib.Error("%s: tensor %s has dtype %s; accepted: %s, BF16" %
                                 (path, name, dt, ", ".join(_DT)), "format_error")
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if min(shape, default=0) < 0 or not 0 <= a <= b or b - a != n * width or \
                    start + b > size:
                raise _lib.Error("%s: tensor %s: shape %s of %s needs %d bytes; its "
                                 "data_offsets [%d, %d] %s" % (path, name, shape, dt, n * width,
                                                               a, b, "run past the file"
                                                               if start + b > size else
                                                               "disagree"), "format_error")
            f.seek(start + a)
            raw = f.read(b - a)
            if dt == "BF16":
                arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                arr = np.frombuffer(raw, np.dtype(_DT[dt]).newbyteorder("<"))
            out[name] = arr.reshape(shape).copy()
    return out, {str(k): str(v) for k, v in meta.items()}
