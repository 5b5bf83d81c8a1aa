"""tests/ep_flag_cases.py OUTDIR: the episode layout with terminals and
timeouts [E, T] (docs/data.md "Flags in the episode layout"), for
test_ep_flags.c: written by NumPy (.npz), by hand (safetensors, per the
README "Format" of github.com/huggingface/safetensors) and by Debian's
h5py (HDF5, top-level datasets), beside the same episodes as flat
transitions (flat.npz: the oracle, read by the flat path of
transitions.c, which test_transitions.c checks on its own).

One buffer of a damped 3-state system with 2 actions: 12 episodes of
6..20 steps; episodes 0, 3, 6, 9 end by a true termination (episode 3
also by the time limit at the same step: the termination counts, as in
the flat layout), the others by a timeout, the last cut off by the end
of the buffer (no flag). Also a fixed-length buffer (every episode T
steps, no lengths) and its flat twin. Malformed files (bad_*) carry one
defect each; the C test expects the error text listed next to each.
Exit 3 when h5py is missing (scripts/install-deps.sh installs
python3-h5py).
"""
import json
import os
import sys

import numpy as np

from dataset_writers import need_h5py, st_write, write_bad

h5py = need_h5py("ep_flag_cases.py")

out = sys.argv[1]
S, A = 3, 2
rng = np.random.default_rng(2929)


def p(name):
    return os.path.join(out, name)


M = rng.normal(size=(S, S)) * 0.2 + np.eye(S) * 0.85
B = rng.normal(size=(A, S)) * 0.3


def rollout(n_ep, lo, hi):
    """(states [L+1, S], actions [L, A], rewards [L], terminal?, timeout?)."""
    eps = []
    for e in range(n_ep):
        L = int(rng.integers(lo, hi + 1))
        s = np.zeros((L + 1, S))
        s[0] = rng.normal(size=S)
        a = rng.uniform(-1, 1, size=(L, A))
        for t in range(L):
            s[t + 1] = s[t] @ M + a[t] @ B
        r = -np.sum(s[:-1] ** 2, axis=1) - 0.1 * np.sum(a ** 2, axis=1)
        last = e == n_ep - 1
        term = not last and e % 3 == 0
        tmo = not last and (e % 3 != 0 or e == 3)
        eps.append((s.astype(np.float32), a.astype(np.float32), r.astype(np.float32), term, tmo))
    return eps


def episode_arrays(eps, T=None, lengths=True):
    E = len(eps)
    T = T or max(len(r) for _, _, r, _, _ in eps)
    obs = rng.normal(size=(E, T + 1, S)).astype(np.float32)  # padding: any finite value
    act = rng.normal(size=(E, T, A)).astype(np.float32)
    rew = rng.normal(size=(E, T)).astype(np.float32)
    term = np.zeros((E, T), bool)
    tmo = np.zeros((E, T), bool)
    for e, (s, a, r, te, to) in enumerate(eps):
        L = len(r)
        obs[e, :L + 1], act[e, :L], rew[e, :L] = s, a, r
        term[e, L - 1], tmo[e, L - 1] = te, to
    d = {"obs": obs, "actions": act, "rewards": rew, "terminals": term, "timeouts": tmo}
    if lengths:
        d["lengths"] = np.array([len(r) for _, _, r, _, _ in eps], np.int64)
    return d


def flat_arrays(eps):
    cat = np.concatenate
    last = [np.arange(len(r)) == len(r) - 1 for _, _, r, _, _ in eps]
    return {"obs": cat([s[:-1] for s, *_ in eps]), "next_obs": cat([s[1:] for s, *_ in eps]),
            "actions": cat([a for _, a, *_ in eps]), "rewards": cat([r for _, _, r, *_ in eps]),
            "terminals": cat([f & e[3] for f, e in zip(last, eps)]),
            "timeouts": cat([f & e[4] for f, e in zip(last, eps)])}


eps = rollout(12, 6, 20)
ep = episode_arrays(eps)
fl = flat_arrays(eps)
# the flat twin holds exactly the episodes (next_obs[i] == obs[i+1] inside
# an episode, a flag or a state jump between them; the cut-off last one ends
# at the last row)
np.savez(p("flat.npz"), **fl)
np.savez(p("ep.npz"), **ep)
noflags = {k: v for k, v in ep.items() if k not in ("terminals", "timeouts")}
np.savez(p("ep_noflags.npz"), **noflags)
np.savez(p("ep_timeouts.npz"), **{k: v for k, v in ep.items() if k != "terminals"})
# aliases, int64 / float32 flags, float64 data
st_write(p("ep64.safetensors"),
         {"obs": ep["obs"].astype(np.float64), "actions": ep["actions"].astype(np.float64),
          "rewards": ep["rewards"].astype(np.float64), "lengths": ep["lengths"],
          "terminations": ep["terminals"].astype(np.int64),
          "truncations": ep["timeouts"].astype(np.float32)})
with h5py.File(p("ep.hdf5"), "w") as f:
    for k, v in ep.items():
        f.create_dataset(k, data=v.astype(np.uint8) if v.dtype == bool and k == "timeouts" else v,
                         compression="gzip")

# fixed length: every episode T = 9 steps, no lengths
feps = rollout(8, 9, 9)
np.savez(p("ep_fixed.npz"), **episode_arrays(feps, lengths=False))
np.savez(p("flat_fixed.npz"), **flat_arrays(feps))

E, T = ep["rewards"].shape
L = ep["lengths"]
with open(p("expect.json"), "w") as f:
    json.dump({"episodes": int(E), "transitions": int(L.sum()),
               "terminals": int(ep["terminals"].sum())}, f)


# ---- malformed --------------------------------------------------------------------
def bad(name, **change):
    write_bad(p(name), ep, **change)


t = ep["terminals"].copy()
t[1, 2] = True                                   # mid-episode (episode 1 runs past t = 2)
assert L[1] > 3
bad("bad_mid.npz", terminals=t)                  # terminals[1, 2] = 1 but episode 1 has
t = ep["terminals"].copy()
e_pad = int(np.flatnonzero(L < T)[0])
t[e_pad, L[e_pad]] = True                        # off by one: the final state's index
bad("bad_pad.npz", terminals=t)                  # lies in the padding
bad("bad_shape.npz", terminals=np.zeros((E, T + 1), bool))   # has shape [12, T+1]
bad("bad_rank.npz", timeouts=np.zeros(E, bool))              # has shape [12]
v = ep["timeouts"].astype(np.float32)
v[1, 4] = 2
bad("bad_value.npz", timeouts=v)                 # timeouts[1, 4] = 2
bad("bad_dones.npz", dones=ep["terminals"])      # 'dones' belongs to flat transitions
bad("bad_next.npz", next_obs=ep["obs"])          # 'next_obs' belongs to flat transitions
bad("bad_twice.npz", terminations=ep["terminals"])  # both give terminals
fx = episode_arrays(feps, lengths=False)
fx["terminals"][2, 4] = True
np.savez(p("bad_fixed_mid.npz"), **fx)           # T, no lengths
with h5py.File(p("bad_h5_mid.hdf5"), "w") as f:
    t = ep["terminals"].copy()
    t[1, 2] = True
    for k, v in dict(ep, terminals=t).items():
        f.create_dataset(k, data=v)
