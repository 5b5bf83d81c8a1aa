"""World models on replay buffers (issue 29): flat transitions from memory
against the episode layout converted by hand in NumPy (bit for bit), the
buffer forms WorldModel takes (dict, list of dicts or tuples, a
Stable-Baselines3-like ReplayBuffer), seed 000's validation script with
`await` training on the buffer it sets, and train(1) x 3 == train(3)."""
import asyncio
import os
import unittest

import numpy as np

import mixprec
from .util import TmpDirCase

S, A = 3, 2
SMALL = {"model.layers": "linear:16,gelu,linear", "training.precision": "fp32",
         "checkpoint.enabled": False}


def rollout(n_episodes, seed=0, lo=8, hi=25):
    """Episodes of a damped linear system as a rollout loop records them:
    (states [L+1, S], actions [L, A], rewards [L], terminal?)."""
    rng = np.random.default_rng(seed)
    M = np.eye(S) * 0.9 + rng.normal(size=(S, S)) * 0.05
    Bm = rng.normal(size=(A, S)) * 0.2
    eps = []
    for e in range(n_episodes):
        L = int(rng.integers(lo, hi))
        s = np.zeros((L + 1, S))
        s[0] = rng.normal(size=S)
        a = rng.uniform(-1, 1, size=(L, A))
        for t in range(L):
            s[t + 1] = s[t] @ M + a[t] @ Bm
        r = -np.sum(s[:-1] ** 2, axis=1)
        eps.append((s.astype(np.float32), a.astype(np.float32), r.astype(np.float32),
                    e % 3 == 0))
    return eps


def flat(eps):
    """Flat transitions, SB3/D4RL style, bool flags."""
    cat = np.concatenate
    last = [np.arange(len(r)) == len(r) - 1 for _, _, r, _ in eps]
    return {"obs": cat([s[:-1] for s, *_ in eps]), "next_obs": cat([s[1:] for s, *_ in eps]),
            "actions": cat([a for _, a, *_ in eps]), "rewards": cat([r for _, _, r, _ in eps]),
            "terminals": cat([f & te for f, (*_, te) in zip(last, eps)]),
            "timeouts": cat([f & (not te) for f, (*_, te) in zip(last, eps)])}


def to_episodes(d):
    """The oracle: flat -> episode layout by hand (split after each flag)."""
    ends = np.flatnonzero(d["terminals"] | d["timeouts"]) + 1
    idx = np.split(np.arange(len(d["obs"])), [c for c in ends if c < len(d["obs"])])
    E, T = len(idx), max(len(i) for i in idx)
    obs = np.zeros((E, T + 1, S), np.float32)
    act = np.zeros((E, T, A), np.float32)
    rew = np.zeros((E, T), np.float32)
    for e, i in enumerate(idx):
        obs[e, :len(i)] = d["obs"][i]
        obs[e, len(i)] = d["next_obs"][i[-1]]
        act[e, :len(i)] = d["actions"][i]
        rew[e, :len(i)] = d["rewards"][i]
    return {"obs": obs, "actions": act, "rewards": rew,
            "lengths": np.array([len(i) for i in idx], np.int64)}


def n_train(eps, val_fraction):
    """Training transitions of the split by episode (docs/data.md)."""
    k = min(max(int(round((1 - val_fraction) * len(eps))), 1), len(eps) - 1)
    return sum(len(r) for _, _, r, _ in eps[:k])


class FlatTransitionsTest(TmpDirCase):
    def cfg(self, **extra):
        d = dict(SMALL, **{"output.dir": self.path("run"), "training.epochs": 2,
                           "training.batch_size": 16})
        d.update(extra)
        return mixprec.Config(**d)

    def losses(self, data):
        run = mixprec.Run(self.cfg(), data=data, checkpoints=False, store=False)
        st = run.train()
        out = (st["last_loss"], run.evaluate()["loss"], st["total_steps"])
        run.close()
        return out

    def test_flat_in_memory_equals_episodes(self):
        eps = rollout(12, seed=1)
        d = flat(eps)
        ref = self.losses(to_episodes(d))
        self.assertEqual(self.losses(d), ref)
        # D4RL names and float64 arrays, SB3 names with [N, 1] columns
        d4rl = {"observations": d["obs"].astype(np.float64), "actions": d["actions"],
                "rewards": d["rewards"], "next_observations": d["next_obs"],
                "terminals": d["terminals"], "timeouts": d["timeouts"].astype(np.int32)}
        self.assertEqual(self.losses(d4rl), ref)
        sb3 = {"states": d["obs"], "actions": d["actions"], "rewards": d["rewards"][:, None],
               "next_states": d["next_obs"],
               "dones": (d["terminals"] | d["timeouts"]).astype(np.float32)[:, None]}
        self.assertEqual(self.losses(sb3), ref)

    def test_flat_errors_name_the_accepted_names(self):
        d = flat(rollout(4, seed=2))
        d["reward"] = d.pop("rewards")
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg(), data=d, checkpoints=False, store=False)
        self.assertIn("unexpected array 'reward'", str(cm.exception))
        self.assertIn("next_obs (or next_observations, next_states)", str(cm.exception))
        d = flat(rollout(4, seed=2))
        del d["terminals"], d["timeouts"], d["next_obs"]
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg(), data=d, checkpoints=False, store=False)
        self.assertIn("need their episode ends", str(cm.exception))


class EpisodeFlagsTest(TmpDirCase):
    """terminals/timeouts [E, T] in the episode layout from memory
    (docs/data.md "Flags in the episode layout"): model.termination trains
    as on the flat buffer of the same episodes, bit for bit; a flag before an
    episode's last transition is refused by name."""

    def episodes_with_flags(self, d):
        ep = to_episodes(d)
        E, T = ep["rewards"].shape
        term, tmo = np.zeros((E, T), bool), np.zeros((E, T), bool)
        ends = np.flatnonzero(d["terminals"] | d["timeouts"])
        for e, i in enumerate(ends[:E]):
            term[e, ep["lengths"][e] - 1] = d["terminals"][i]
            tmo[e, ep["lengths"][e] - 1] = d["timeouts"][i]
        return dict(ep, terminals=term, timeouts=tmo)

    def test_termination_from_episode_flags(self):
        d = flat(rollout(12, seed=12))
        ep = self.episodes_with_flags(d)
        self.assertEqual(int(ep["terminals"].sum()), int(d["terminals"].sum()))
        cfg = dict(SMALL, **{"model.termination": True})
        a = mixprec.WorldModel(**cfg, **{"output.dir": self.path("a")}, replay_buffer=d)
        b = mixprec.WorldModel(**cfg, **{"output.dir": self.path("b")}, replay_buffer=ep)
        sa, sb = a.train(num_epochs=2, batch_size=16), b.train(num_epochs=2, batch_size=16)
        self.assertEqual((sa["last_loss"], sa["total_steps"]), (sb["last_loss"], sb["total_steps"]))
        ea, eb = a.run.evaluate(), b.run.evaluate()
        self.assertEqual((ea["loss"], ea["bce"], ea["accuracy"]),
                         (eb["loss"], eb["bce"], eb["accuracy"]))
        bad = dict(ep, terminals=ep["terminals"].copy())
        bad["terminals"][0, 0] = True  # episode 0 runs longer than one step
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.WorldModel(**cfg, **{"output.dir": self.path("c")},
                               replay_buffer=bad).train(num_epochs=1, batch_size=16)
        self.assertIn("terminals[0, 0] = 1 but episode 0 has", str(cm.exception))


class SB3LikeBuffer:
    """The attributes of stable_baselines3.common.buffers.ReplayBuffer that
    the conversion reads: arrays [buffer_size, n_envs, ...], pos, full."""

    def __init__(self, streams, size):
        n_envs = len(streams)
        self.buffer_size, self.n_envs, self.pos, self.full = size, n_envs, 0, False
        self.observations = np.zeros((size, n_envs, S), np.float32)
        self.next_observations = np.zeros((size, n_envs, S), np.float32)
        self.actions = np.zeros((size, n_envs, A), np.float32)
        self.rewards = np.zeros((size, n_envs), np.float32)
        self.dones = np.zeros((size, n_envs), np.float32)
        self.timeouts = np.zeros((size, n_envs), np.float32)
        n = min(len(f["obs"]) for f in streams)
        for i in range(n):  # ReplayBuffer.add, one step of every env
            for k, f in enumerate(streams):
                self.observations[i, k] = f["obs"][i]
                self.next_observations[i, k] = f["next_obs"][i]
                self.actions[i, k] = f["actions"][i]
                self.rewards[i, k] = f["rewards"][i]
                self.dones[i, k] = f["terminals"][i] or f["timeouts"][i]
                self.timeouts[i, k] = f["timeouts"][i]
            self.pos += 1
        self.n = n


class WorldModelBufferTest(TmpDirCase):
    def model(self, **kw):
        return mixprec.WorldModel(**SMALL, **{"output.dir": self.path("wm")}, **kw)

    def test_buffer_forms_train_the_same(self):
        eps = rollout(10, seed=3)
        d = flat(eps)
        ref = mixprec.WorldModel(**SMALL, **{"output.dir": self.path("ref")},
                                 replay_buffer=to_episodes(d))
        st_ref = ref.train(num_epochs=2, batch_size=16)
        tuples = [(d["obs"][i], d["actions"][i], d["rewards"][i], d["next_obs"][i],
                   bool(d["terminals"][i] or d["timeouts"][i])) for i in range(len(d["obs"]))]
        dicts = [{k: v[i] for k, v in d.items()} for i in range(len(d["obs"]))]
        for name, buf in (("dict", d), ("tuples", tuples), ("dicts", dicts)):
            with self.subTest(form=name):
                m = mixprec.WorldModel(**SMALL, **{"output.dir": self.path(name)})
                m.replay_buffer = buf  # set after construction, as seed 000 does
                st = m.train(num_epochs=2, batch_size=16)
                self.assertEqual((st["last_loss"], st["total_steps"]),
                                 (st_ref["last_loss"], st_ref["total_steps"]))
                self.assertEqual(m.training_history[-1]["val_loss"],
                                 ref.training_history[-1]["val_loss"])

    def test_hdf5_file_written_in_this_process(self):
        # D4RL layout by h5py, read by the library's libhdf5 in the same process
        try:
            import h5py
        except ImportError:
            self.fail("h5py is missing (scripts/install-deps.sh installs python3-h5py)")
        d = flat(rollout(9, seed=8))
        path = self.path("d4rl.hdf5")
        with h5py.File(path, "w") as f:
            for k, name in (("obs", "observations"), ("actions", "actions"),
                            ("rewards", "rewards"), ("next_obs", "next_observations"),
                            ("terminals", "terminals"), ("timeouts", "timeouts")):
                f.create_dataset(name, data=d[k], compression="gzip")
        a = mixprec.WorldModel(**SMALL, **{"output.dir": self.path("a")}, replay_buffer=path)
        b = mixprec.WorldModel(**SMALL, **{"output.dir": self.path("b")},
                               replay_buffer=to_episodes(d))
        sa, sb = a.train(num_epochs=2, batch_size=16), b.train(num_epochs=2, batch_size=16)
        self.assertEqual((sa["last_loss"], sa["total_steps"]), (sb["last_loss"], sb["total_steps"]))
        with h5py.File(path, "r") as f:  # h5py still works after the library's read
            self.assertEqual(f["observations"].shape, d["obs"].shape)

    def test_sb3_like_buffer(self):
        # two envs, each its own stream of episodes; the buffer interleaves them
        streams = [flat(rollout(6, seed=10)), flat(rollout(6, seed=11))]
        buf = SB3LikeBuffer(streams, size=400)
        n = buf.n
        # oracle: env 0's first n steps, then env 1's, each cut at its flags
        cut = [{k: v[:n] for k, v in f.items()} for f in streams]
        whole = {k: np.concatenate([f[k] for f in cut]) for k in cut[0]}
        whole["timeouts"] = whole["timeouts"].copy()
        whole["timeouts"][n - 1] = True  # env 0's stream ends at row n-1
        ref = mixprec.WorldModel(**SMALL, **{"output.dir": self.path("ref")},
                                 replay_buffer=to_episodes(whole))
        st_ref = ref.train(num_epochs=2, batch_size=16)
        m = mixprec.WorldModel(**SMALL, **{"output.dir": self.path("sb3")}, replay_buffer=buf)
        st = m.train(num_epochs=2, batch_size=16)
        self.assertEqual((st["last_loss"], st["total_steps"]),
                         (st_ref["last_loss"], st_ref["total_steps"]))

    def test_new_buffer_after_training(self):
        m = self.model(replay_buffer=flat(rollout(8, seed=4)))
        m.train(num_epochs=1, batch_size=16)
        spe1 = m._fp16_stats["samples_per_epoch"]
        eps2 = rollout(20, seed=5)
        m.replay_buffer = flat(eps2)
        st = m.train(num_epochs=1, batch_size=16)
        vf = float(m.run.config["data.val_fraction"])
        self.assertEqual(st["samples_per_epoch"], n_train(eps2, vf) // 16 * 16)
        self.assertNotEqual(st["samples_per_epoch"], spe1)
        self.assertEqual(len(m.training_history), 2)

    def test_bad_buffers(self):
        with self.assertRaises(mixprec.Error) as cm:
            self.model(replay_buffer=42)
        self.assertIn("accepted: a dict of arrays", str(cm.exception))
        with self.assertRaises(mixprec.Error):
            self.model(replay_buffer={"obs": np.zeros((3, S))}, data={"obs": np.zeros((3, S))})
        with self.assertRaises(mixprec.Error) as cm:
            self.model(replay_buffer=[(1, 2, 3)])
        self.assertIn("(obs, action, reward, next_obs, done)", str(cm.exception))


def create_test_replay_buffer(n_episodes):
    """What seed 000's script calls: the team's flat buffer, under the names
    the issue reports (states, next_states, dones)."""
    d = flat(rollout(n_episodes, seed=6))
    return {"states": d["obs"], "actions": d["actions"], "rewards": d["rewards"],
            "next_states": d["next_obs"], "dones": d["terminals"] | d["timeouts"]}


class SeedZeroTest(TmpDirCase):
    def test_seed_000_verify_fp32_mode_with_await(self):
        WorldModel = mixprec.WorldModel

        async def verify_fp32_mode():
            # seed 000, "Phase 4: Validate FP32 Operation", as written
            os.environ["ENABLE_FP16_TRAINING"] = "false"

            model = WorldModel()
            model.replay_buffer = create_test_replay_buffer(50)

            await model.train(num_epochs=1, batch_size=16)

            # Verify FP32 mode
            assert model.fp16_enabled == False, "FP16 should be disabled"  # noqa: E712
            assert model._fp16_stats is None or model._fp16_stats.get("fp16_enabled_runtime") == False  # noqa: E501,E712
            return model

        model = asyncio.run(verify_fp32_mode())
        # it trained on the buffer: the steps of one epoch over its training
        # split (drop-last batches of 16), not the built-in pendulum's
        eps = rollout(50, seed=6)
        vf = float(model.run.config["data.val_fraction"])
        n = n_train(eps, vf)
        st = model._fp16_stats
        self.assertEqual(st["samples_per_epoch"], n // 16 * 16)
        self.assertEqual(st["total_steps"], n // 16)
        self.assertEqual(st["precision"], "fp32")
        self.assertIs(model.fp16_enabled, False)
        # without await it trains too and gives the statistics dict
        st2 = model.train(num_epochs=1, batch_size=16)
        self.assertIsInstance(st2, dict)
        self.assertEqual(st2["total_steps"], 2 * (n // 16))

    def test_fp16_enabled_follows_the_environment(self):
        os.environ["ENABLE_FP16_TRAINING"] = "true"
        m = mixprec.WorldModel(**{"output.dir": self.path("f")})
        self.assertIs(m.fp16_enabled, True)


class ScheduleTest(TmpDirCase):
    def test_three_calls_of_one_epoch_equal_one_call_of_three(self):
        # docs/run.md: the LR schedule is planned over training.epochs
        d = flat(rollout(16, seed=7))
        cfg = dict(SMALL, **{"training.epochs": 3, "training.batch_size": 16})
        one = mixprec.Run(mixprec.Config(**cfg, **{"output.dir": self.path("one")}), data=d,
                          checkpoints=False, store=False)
        st1 = one.train(3)
        loop = mixprec.WorldModel(**cfg, **{"output.dir": self.path("loop")}, replay_buffer=d)
        for _ in range(3):
            st3 = loop.train(num_epochs=1, batch_size=16)
        self.assertEqual(st3["total_steps"], st1["total_steps"])
        self.assertEqual(st3["last_loss"], st1["last_loss"])
        a, b = one.state_dict(), loop.state_dict()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


if __name__ == "__main__":
    unittest.main()
