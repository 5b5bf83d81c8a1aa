"""tests/data_cases.py OUTDIR: user-data files for test_dataset.c, written by
NumPy (numpy.savez / savez_compressed) and by hand for safetensors (struct +
json, per github.com/huggingface/safetensors README "Format"), so the reader
is checked against files it did not write.

Good files hold values the C test recomputes: v[i] = i * 0.25 - 1 (flat
index i) for floats, i % 3 for labels. Bad files each carry one defect; the
C test expects the error text listed next to each in test_dataset.c.
"""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1]


def p(name):
    return os.path.join(out, name)


def ramp(shape, dtype=np.float32):
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64) * 0.25 - 1.0).astype(dtype).reshape(shape)


def st_write(path, arrays, dtype_names=None, cut=0, bad_len=None):
    """safetensors by hand; dtype_names overrides the dtype string per name."""
    names = {np.dtype('float32'): 'F32', np.dtype('float64'): 'F64',
             np.dtype('int32'): 'I32', np.dtype('int64'): 'I64',
             np.dtype('float16'): 'F16'}
    header, blobs, off = {"__metadata__": {"by": "numpy"}}, [], 0
    for k, a in arrays.items():
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')).tobytes()
        dt = (dtype_names or {}).get(k, names[a.dtype])
        header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    data = struct.pack('<Q', bad_len if bad_len is not None else len(h)) + h + b''.join(blobs)
    if cut:
        data = data[:-cut]
    with open(path, 'wb') as f:
        f.write(data)


E, T, S, A = 4, 5, 3, 2
wm = {"obs": ramp((E, T + 1, S)), "actions": ramp((E, T, A)), "rewards": ramp((E, T)),
      "lengths": np.array([5, 3, 5, 1], dtype=np.int64)}
np.savez(p("wm.npz"), **wm)
np.savez_compressed(p("wm_z.npz"), **wm)
wm64 = {k: (v.astype(np.float64) if v.dtype == np.float32 else v.astype(np.int32))
        for k, v in wm.items()}
np.savez_compressed(p("wm64.npz"), **wm64)

N, D = 6, 4
cls = {"x": ramp((N, D)), "y": (np.arange(N) % 3).astype(np.int64),
       "x_val": ramp((2, D)), "y_val": np.array([2, 0], dtype=np.int32)}
st_write(p("cls.safetensors"), cls)
reg = {"x": ramp((N, D), np.float64), "y": ramp((N, 2))}
st_write(p("reg.safetensors"), reg)

# ---- malformed ---------------------------------------------------------------
np.savez(p("wm_rank.npz"), obs=ramp((E, S)), actions=wm["actions"], rewards=wm["rewards"])
np.savez(p("wm_shape.npz"), obs=wm["obs"], actions=ramp((E - 1, T, A)), rewards=wm["rewards"])
np.savez(p("wm_steps.npz"), obs=wm["obs"], actions=ramp((E, T + 1, A)), rewards=wm["rewards"])
np.savez(p("wm_missing.npz"), obs=wm["obs"], actions=wm["actions"])
np.savez(p("wm_extra.npz"), obs=wm["obs"], actions=wm["actions"], rewards=wm["rewards"],
         reward=wm["rewards"])
np.savez(p("wm_lengths.npz"), obs=wm["obs"], actions=wm["actions"], rewards=wm["rewards"],
         lengths=np.array([5, 0, 5, 1]))
np.savez(p("wm_lendtype.npz"), obs=wm["obs"], actions=wm["actions"], rewards=wm["rewards"],
         lengths=np.array([5.0, 3.0, 5.0, 1.0]))
nan_obs = wm["obs"].copy()
nan_obs[1, 2, 0] = np.nan
np.savez(p("wm_nan.npz"), obs=nan_obs, actions=wm["actions"], rewards=wm["rewards"])
inf_rew = wm["rewards"].copy()
inf_rew[0, 0] = -np.inf
np.savez_compressed(p("wm_inf.npz"), obs=wm["obs"], actions=wm["actions"], rewards=inf_rew)
np.savez(p("empty.npz"), obs=np.zeros((0, T + 1, S), np.float32), actions=wm["actions"],
         rewards=wm["rewards"])
np.savez(p("f16.npz"), x=ramp((N, D), np.float16), y=cls["y"])
np.savez(p("u8.npz"), x=ramp((N, D)), y=(np.arange(N) % 3).astype(np.uint8))
np.savez(p("bigendian.npz"), x=ramp((N, D)).astype('>f4'), y=cls["y"])
np.savez(p("fortran.npz"), x=np.asfortranarray(ramp((N, D))), y=cls["y"])
with open(p("wm.npz"), 'rb') as f:
    whole = f.read()
with open(p("trunc.npz"), 'wb') as f:
    f.write(whole[:len(whole) * 2 // 3])
# a flipped byte inside obs's data: the member's CRC-32 no longer matches
at = whole.find(wm["obs"].tobytes()) + 40
corrupt = bytearray(whole)
corrupt[at] ^= 0x5a
with open(p("crc.npz"), 'wb') as f:
    f.write(bytes(corrupt))
np.savez(p("cls_float_y.npz"), x=cls["x"], y=cls["y"].astype(np.float32))
np.savez(p("cls_neg.npz"), x=cls["x"], y=np.array([0, 1, -1, 2, 0, 1]))
np.savez(p("cls_rows.npz"), x=cls["x"], y=cls["y"][:5])
np.savez(p("cls_valonly.npz"), x=cls["x"], y=cls["y"], x_val=cls["x_val"])
np.savez(p("cls_vald.npz"), x=cls["x"], y=cls["y"], x_val=ramp((2, D + 1)), y_val=cls["y_val"])
np.savez(p("reg_k.npz"), x=reg["x"], y=reg["y"], x_val=ramp((2, D)), y_val=ramp((2, 3)))
np.savez(p("reg_f64big.npz"), x=np.full((N, D), 1e300), y=reg["y"])
st_write(p("st_trunc.safetensors"), cls, cut=16)
st_write(p("st_hlen.safetensors"), cls, bad_len=1 << 40)
st_write(p("st_bf16.safetensors"), {"x": ramp((N, D), np.float16), "y": cls["y"]},
         dtype_names={"x": "BF16"})
st_write(p("st_nan.safetensors"), {"x": np.where(ramp((N, D)) > 0, np.inf, 0).astype(np.float32),
                                   "y": cls["y"]})
with open(p("garbage.bin"), 'wb') as f:
    f.write(b"hello, this is not data")
with open(p("binary.bin"), 'wb') as f:  # no magic, a u64 length past the file
    f.write(bytes([0x10, 0x27, 0, 0, 0, 0, 0, 0]) + b"\x01\x02")
with open(p("table.csv"), 'wb') as f:
    f.write(b"x0,x1,y\n0.5,1.5,2\n")
np.save(p("one.npy"), np.zeros(3, np.float32))
open(p("empty.bin"), 'wb').close()
