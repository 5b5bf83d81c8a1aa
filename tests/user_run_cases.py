"""tests/user_run_cases.py OUTDIR: user data for test_user_run.c, written by NumPy.

spring.npz    a replay buffer of a damped spring-mass system the project does
              not simulate: state (x, v), action u (force), x'' = -k x - c v + u,
              k = 4, c = 0.5, dt = 0.05, semi-implicit Euler; reward
              -(x^2 + 0.1 v^2 + 0.01 u^2); 40 episodes of up to 50 steps with
              unequal lengths (lengths [E], padding zeros after the end)
pred_wm.npz   obs [64, 2], actions [64, 1] to predict on
cls3.safetensors  3 Gaussian blobs in 4-D, x [600, 4] float32, y [600] int64
reg.safetensors   x [500, 5] float64, y [500, 2] = (sin(x0 + x1), x2 * x3 - 0.5 x4)
pred_x.safetensors  x [50, 4] (classifier inputs); pred_r.npz x [50, 5]
"""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(2024)


def st_write(path, arrays):
    names = {np.dtype('float32'): 'F32', np.dtype('float64'): 'F64',
             np.dtype('int32'): 'I32', np.dtype('int64'): 'I64'}
    header, blobs, off = {}, [], 0
    for k, a in arrays.items():
        b = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


E, T = 40, 50
k, c, dt = 4.0, 0.5, 0.05
obs = np.zeros((E, T + 1, 2), np.float32)
act = np.zeros((E, T, 1), np.float32)
rew = np.zeros((E, T), np.float32)
lengths = rng.integers(30, T + 1, E).astype(np.int64)
for e in range(E):
    x, v = rng.uniform(-1, 1), rng.uniform(-1, 1)
    obs[e, 0] = (x, v)
    for t in range(lengths[e]):
        u = rng.uniform(-1, 1)
        v = v + dt * (-k * x - c * v + u)
        x = x + dt * v
        act[e, t, 0] = u
        rew[e, t] = -(obs[e, t, 0] ** 2 + 0.1 * obs[e, t, 1] ** 2 + 0.01 * u * u)
        obs[e, t + 1] = (x, v)
np.savez_compressed(os.path.join(out, "spring.npz"), obs=obs, actions=act, rewards=rew,
                    lengths=lengths)
np.savez(os.path.join(out, "pred_wm.npz"), obs=rng.uniform(-1, 1, (64, 2)).astype(np.float32),
         actions=rng.uniform(-1, 1, (64, 1)).astype(np.float32))

centers = np.array([[2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 0]], np.float32)
y = rng.integers(0, 3, 600)
x = (centers[y] + rng.normal(0, 0.7, (600, 4))).astype(np.float32)
st_write(os.path.join(out, "cls3.safetensors"), {"x": x, "y": y.astype(np.int64)})
st_write(os.path.join(out, "pred_x.safetensors"),
         {"x": rng.normal(0, 1.5, (50, 4)).astype(np.float32)})

xr = rng.uniform(-1, 1, (500, 5))
yr = np.stack([np.sin(xr[:, 0] + xr[:, 1]), xr[:, 2] * xr[:, 3] - 0.5 * xr[:, 4]], 1)
st_write(os.path.join(out, "reg.safetensors"), {"x": xr, "y": yr.astype(np.float32)})
np.savez(os.path.join(out, "pred_r.npz"), x=rng.uniform(-1, 1, (50, 5)))
