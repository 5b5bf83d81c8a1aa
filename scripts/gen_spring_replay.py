"""scripts/gen_spring_replay.py OUT.npz [EPISODES] [MAX_STEPS] [SEED]: a replay
buffer of a damped spring-mass system (the system of tests/user_run_cases.py,
not one mixprec simulates) for the user-data world model of docs/data.md:
state (x, v), force u ~ U(-1, 1), x'' = -4 x - 0.5 v + u, dt = 0.05,
semi-implicit Euler; reward -(x^2 + 0.1 v^2 + 0.01 u^2); episode lengths
uniform in [MAX_STEPS/2, MAX_STEPS] (lengths [E], zero padding).
Needs NumPy (/usr/bin/python3 on Debian)."""
import sys

import numpy as np

out = sys.argv[1]
E = int(sys.argv[2]) if len(sys.argv) > 2 else 400
T = int(sys.argv[3]) if len(sys.argv) > 3 else 200
rng = np.random.default_rng(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
k, c, dt = 4.0, 0.5, 0.05
lengths = rng.integers(T // 2, T + 1, E)
obs = np.zeros((E, T + 1, 2), np.float32)
act = np.zeros((E, T, 1), np.float32)
rew = np.zeros((E, T), np.float32)
u = rng.uniform(-1, 1, (E, T))
x, v = rng.uniform(-1, 1, E), rng.uniform(-1, 1, E)
obs[:, 0, 0], obs[:, 0, 1] = x, v
for t in range(T):
    live = t < lengths
    r = -(x * x + 0.1 * v * v + 0.01 * u[:, t] ** 2)
    v = np.where(live, v + dt * (-k * x - c * v + u[:, t]), v)
    x = np.where(live, x + dt * v, x)
    act[:, t, 0] = np.where(live, u[:, t], 0)
    rew[:, t] = np.where(live, r, 0)
    obs[:, t + 1, 0] = np.where(live, x, 0)
    obs[:, t + 1, 1] = np.where(live, v, 0)
np.savez_compressed(out, obs=obs, actions=act, rewards=rew, lengths=lengths.astype(np.int64))
print(f"{out}: {E} episodes, {int(lengths.sum())} transitions")
