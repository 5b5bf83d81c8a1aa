"""tests/dataset_writers.py: the file writers shared by the world-model data
case scripts (tests/transition_cases.py, tests/ep_flag_cases.py), which
import it from their own directory.

- need_h5py(script): h5py, or exit 3 naming the package (Debian's
  python3-h5py; scripts/install-deps.sh installs it);
- st_write(path, arrays): a safetensors file written by hand, per the
  README "Format" of github.com/huggingface/safetensors (8-byte
  little-endian header length, the JSON header padded with spaces to 8
  bytes, the little-endian data); uint8 arrays are written as BOOL;
- write_bad(path, base, **change): base's arrays as .npz with the changes
  (None: the array left out), one defect per malformed file.
"""
import json
import struct
import sys

import numpy as np


def need_h5py(script):
    try:
        import h5py
    except ImportError:
        print(f"{script}: h5py is not importable (apt-get install python3-h5py)")
        sys.exit(3)
    return h5py


def st_write(path, arrays):
    names = {np.dtype('float32'): 'F32', np.dtype('float64'): 'F64', np.dtype('int32'): 'I32',
             np.dtype('int64'): 'I64', np.dtype('bool'): 'BOOL', np.dtype('uint8'): 'BOOL'}
    header, blobs, off = {"__metadata__": {"by": "numpy"}}, [], 0
    for k, a in arrays.items():
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')).tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def write_bad(path, base, **change):
    d = dict(base)
    for k, v in change.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v
    np.savez(path, **d)
