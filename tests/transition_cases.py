"""tests/transition_cases.py OUTDIR: flat-transition world-model data for
test_transitions.c, written by NumPy (.npz), by hand (safetensors, per the
README "Format" of github.com/huggingface/safetensors) and by Debian's h5py
(HDF5 in the D4RL and Minari layouts), so the readers are checked against
files they did not write.

One replay buffer of a damped 3-state system with 2 actions: 14 episodes of
5..30 steps ending by a terminal or a timeout, the last one cut off (no
flag), as a rollout loop records it. It is written in every flat layout of
docs/data.md, and converted by hand here (np.split at the flags) into the
episode layout, ep.npz / ep64.npz: the oracle. The C test trains on each
layout and on the oracle and expects the same losses bit for bit.
Malformed files (bad_*) carry one defect each; the C test expects the error
text listed next to each.

Exit 3 when h5py is missing (scripts/install-deps.sh installs
python3-h5py).
"""
import json
import os
import sys

import numpy as np

from dataset_writers import need_h5py, st_write, write_bad

h5py = need_h5py("transition_cases.py")

out = sys.argv[1]
S, A = 3, 2
rng = np.random.default_rng(29)


def p(name):
    return os.path.join(out, name)


# ---- the replay buffer: episodes as a rollout records them ----------------------
M = rng.normal(size=(S, S)) * 0.2 + np.eye(S) * 0.85
B = rng.normal(size=(A, S)) * 0.3
episodes = []  # (states [L+1, S], actions [L, A], rewards [L], terminal?, timeout?)
for e in range(14):
    L = int(rng.integers(5, 31))
    s = np.zeros((L + 1, S))
    s[0] = rng.normal(size=S)
    a = rng.uniform(-1, 1, size=(L, A))
    r = np.zeros(L)
    for t in range(L):
        s[t + 1] = s[t] @ M + a[t] @ B
        r[t] = -np.sum(s[t] ** 2) - 0.1 * np.sum(a[t] ** 2)
    last = e == 13  # cut off by the end of the buffer: no flag
    episodes.append((s.astype(np.float32), a.astype(np.float32), r.astype(np.float32),
                     not last and e % 2 == 0, not last and e % 2 == 1))

# flat with next_obs: one row per transition (SB3, CleanRL, D4RL's next_observations)
obs = np.concatenate([s[:-1] for s, *_ in episodes])
nxt = np.concatenate([s[1:] for s, *_ in episodes])
act = np.concatenate([a for _, a, *_ in episodes])
rew = np.concatenate([r for _, _, r, *_ in episodes])
term = np.concatenate([np.arange(len(r)) == len(r) - 1 if te else np.zeros(len(r), bool)
                       for _, _, r, te, _ in episodes])
tout = np.concatenate([np.arange(len(r)) == len(r) - 1 if to else np.zeros(len(r), bool)
                       for _, _, r, _, to in episodes])
N = len(obs)

# ---- the oracle: flat -> episodes by hand ---------------------------------------
ends = np.flatnonzero(term | tout) + 1
cuts = [c for c in ends if c < N]
idx = np.split(np.arange(N), cuts)
E = len(idx)
T = max(len(i) for i in idx)
ep_obs = np.zeros((E, T + 1, S), np.float32)
ep_act = np.zeros((E, T, A), np.float32)
ep_rew = np.zeros((E, T), np.float32)
lengths = np.array([len(i) for i in idx], np.int64)
for e, i in enumerate(idx):
    ep_obs[e, :len(i)] = obs[i]
    ep_obs[e, len(i)] = nxt[i[-1]]
    ep_act[e, :len(i)] = act[i]
    ep_rew[e, :len(i)] = rew[i]
# the hand conversion gives back the recorded episodes
assert E == len(episodes)
for e, (s, a, r, _, _) in enumerate(episodes):
    assert np.array_equal(ep_obs[e, :len(r) + 1], s) and np.array_equal(ep_act[e, :len(r)], a)
np.savez(p("ep.npz"), obs=ep_obs, actions=ep_act, rewards=ep_rew, lengths=lengths)
np.savez(p("ep64.npz"), obs=ep_obs.astype(np.float64), actions=ep_act.astype(np.float64),
         rewards=ep_rew.astype(np.float64), lengths=lengths)
with open(p("expect.json"), "w") as f:
    json.dump({"episodes": E, "transitions": int(lengths.sum()), "rows": N}, f)

# ---- flat layouts -----------------------------------------------------------------
np.savez(p("flat_next.npz"), obs=obs, actions=act, rewards=rew, next_obs=nxt, terminals=term,
         timeouts=tout)
np.savez_compressed(p("flat_sb3.npz"), states=obs, actions=act, rewards=rew[:, None],
                    next_states=nxt, dones=(term | tout).astype(np.float32)[:, None])
# boundaries from next_obs[i] != obs[i+1] alone (no flags)
np.savez(p("flat_nextonly.npz"), observations=obs, actions=act, rewards=rew,
         next_observations=nxt)


def d4rl_rows():
    """D4RL without next_observations: an episode's rows are its states
    0..L, the last one flagged (its action/reward unused), plus one
    episode of a single row (no transition: dropped)."""
    o, a, r, te, to = [], [], [], [], []
    for e, (s, aa, rr, is_term, is_tout) in enumerate(episodes):
        L = len(rr)
        o.append(s)
        a.append(np.vstack([aa, np.full((1, A), 7.0, np.float32)]))
        r.append(np.append(rr, np.float32(7.0)))
        flag = np.arange(L + 1) == L
        te.append(flag & is_term)
        to.append(flag & (is_tout or not is_term))
        if e == 5:  # reset, then a timeout at once
            o.append(rng.normal(size=(1, S)).astype(np.float32))
            a.append(np.zeros((1, A), np.float32))
            r.append(np.zeros(1, np.float32))
            te.append(np.zeros(1, bool))
            to.append(np.ones(1, bool))
    return [np.concatenate(x) for x in (o, a, r, te, to)]


d_obs, d_act, d_rew, d_term, d_tout = d4rl_rows()
np.savez(p("flat_d4rl.npz"), observations=d_obs, actions=d_act, rewards=d_rew,
         terminals=d_term, timeouts=d_tout)


st_write(p("flat64.safetensors"), {"obs": obs.astype(np.float64), "actions": act.astype(np.float64),
                                   "rewards": rew.astype(np.float64),
                                   "next_obs": nxt.astype(np.float64),
                                   "terminals": term.astype(np.int64), "timeouts": tout})

# ---- HDF5 by h5py: D4RL ------------------------------------------------------------
with h5py.File(p("d4rl.hdf5"), "w") as f:
    kw = {"compression": "gzip", "shuffle": True, "chunks": True}
    f.create_dataset("observations", data=obs, **kw)
    f.create_dataset("next_observations", data=nxt, **kw)
    f.create_dataset("actions", data=act, **kw)
    f.create_dataset("rewards", data=rew, **kw)
    f.create_dataset("terminals", data=term)
    f.create_dataset("timeouts", data=tout)
    f.create_dataset("infos/qpos", data=obs[:, :2])  # groups are not read
    f.create_group("metadata").attrs["algorithm"] = "SAC"
    f.attrs["env"] = "spring-v0"
with h5py.File(p("d4rl_nonext.hdf5"), "w") as f:
    f.create_dataset("observations", data=d_obs.astype(">f4"))  # big-endian: libhdf5 converts
    f.create_dataset("actions", data=d_act)
    f.create_dataset("rewards", data=d_rew.astype(np.float64))
    f.create_dataset("terminals", data=d_term.astype(np.uint8))
    f.create_dataset("timeouts", data=d_tout)

# ---- HDF5 by h5py: Minari (episode_<k> groups, k numeric: episode_10 after episode_9)
with h5py.File(p("minari.hdf5"), "w") as f:
    for e, (s, a, r, te, to) in enumerate(episodes):
        g = f.create_group("episode_%d" % e)
        g.attrs["id"] = e
        g.create_dataset("observations", data=s)
        g.create_dataset("actions", data=a)
        g.create_dataset("rewards", data=r.astype(np.float64))
        L = len(r)
        g.create_dataset("terminations", data=(np.arange(L) == L - 1) & te)
        g.create_dataset("truncations", data=(np.arange(L) == L - 1) & to)
        g.create_group("infos").create_dataset("x", data=np.zeros(L))
    f.attrs["total_episodes"] = len(episodes)

# ---- malformed --------------------------------------------------------------------
base = {"obs": obs, "actions": act, "rewards": rew, "terminals": term, "timeouts": tout}


def bad(name, **change):
    write_bad(p(name), base, **change)


bad("bad_unknown.npz", reward_typo=rew)                # unexpected array 'reward_typo'
bad("bad_twice.npz", observations=obs)                  # both give obs
bad("bad_rows.npz", rewards=rew[:-1])                   # shape mismatch: array 'rewards'
flag2 = term.astype(np.int64)
flag2[3] = 2
bad("bad_flag.npz", terminals=flag2)                    # terminals[3] = 2
bad("bad_next.npz", next_obs=np.zeros((N, S + 1), np.float32))  # shape mismatch: 'next_obs'
bad("bad_noends.npz", terminals=None, timeouts=None)    # need their episode ends
one = np.zeros(N, bool)
one[-1] = True
bad("bad_one.npz", terminals=one, timeouts=None)        # 1 episode(s)
bad("bad_lengths.npz", lengths=np.array([N]))           # 'lengths' belongs to the episode layout
bad("bad_rew.npz", rewards=np.zeros((N, 2), np.float32))  # array 'rewards' has shape
bad("bad_dtype.npz", actions=act.astype(np.int32))      # array 'actions' has dtype int32
bad("bad_missing.npz", actions=None)                    # missing array 'actions'
bad("bad_f64.npz", obs=np.full((N, S), 1e300))          # beyond float32's range
st_write(p("bad_bool.safetensors"), {"obs": obs, "actions": act, "rewards": rew,
                                     "terminals": term.view(np.uint8) * 2})  # holds the byte 2
with h5py.File(p("bad_h5_string.hdf5"), "w") as f:
    f.create_dataset("observations", data=np.array([b"a", b"b"]))  # HDF5 type class string
with h5py.File(p("bad_h5_missing.hdf5"), "w") as f:
    for k, v in (("observations", obs), ("actions", act), ("terminals", term)):
        f.create_dataset(k, data=v)                     # missing array 'rewards'
with h5py.File(p("bad_h5_u64.hdf5"), "w") as f:
    f.create_dataset("terminals", data=term.astype(np.uint64))  # uint64
with h5py.File(p("bad_h5_nan.hdf5"), "w") as f:
    o = obs.copy()
    o[4, 1] = np.nan
    for k, v in (("observations", o), ("actions", act), ("rewards", rew), ("terminals", term)):
        f.create_dataset(k, data=v)                     # holds NaN or Inf
with h5py.File(p("bad_h5_external.hdf5"), "w") as f:
    f["observations"] = h5py.ExternalLink("d4rl.hdf5", "/observations")  # external link
with open(p("d4rl.hdf5"), "rb") as f:
    whole = f.read()
with open(p("bad_h5_trunc.hdf5"), "wb") as f:
    f.write(whole[:len(whole) // 2])                    # truncated
with h5py.File(p("bad_minari_dict.hdf5"), "w") as f:
    g = f.create_group("episode_0")
    g.create_group("observations").create_dataset("pos", data=np.zeros((4, 2)))  # is a group
    g.create_dataset("actions", data=np.zeros((3, A)))
with h5py.File(p("bad_minari_len.hdf5"), "w") as f:
    g = f.create_group("episode_0")
    for k, v in (("observations", np.zeros((3, S))), ("actions", np.zeros((3, A))),
                 ("rewards", np.zeros(3)), ("terminations", np.zeros(3, bool)),
                 ("truncations", np.zeros(3, bool))):
        g.create_dataset(k, data=v)                     # does not fit
