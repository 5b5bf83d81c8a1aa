"""The open-loop error of world models (issue 29, docs/run.md "Open-loop
error") against a rollout written here in NumPy: from every start of every
held-out episode, next states predicted by mixprec.Predictor (its own
standardisation path, in the data's units) fed back with the recorded
actions, compared after k = 1, 5, 10 steps to the recorded states, in
units of the training split's state standard deviation computed here."""
import unittest

import numpy as np

import mixprec
from .test_transitions import S, flat, rollout
from .util import TmpDirCase

KS = (1, 5, 10)


def open_loop_oracle(pred, eps, x_std):
    """pred(obs [n, S], actions [n, A]) -> next_obs [n, S]; eps as rollout()
    makes them; x_std [S]. Returns {k: mean squared error}."""
    starts = [(e, t) for e, (s, a, r, _) in enumerate(eps) for t in range(len(r))]
    cur = np.stack([eps[e][0][t] for e, t in starts]).astype(np.float32)
    se = {k: 0.0 for k in KS}
    cnt = {k: 0 for k in KS}
    for i in range(max(KS)):
        act = [j for j, (e, t) in enumerate(starts) if t + i < len(eps[e][2])]
        if not act:
            break
        a = np.stack([eps[starts[j][0]][1][starts[j][1] + i] for j in act])
        cur[act] = pred(cur[act], a)
        k = i + 1
        if k in KS:
            for j in act:
                e, t = starts[j]
                d = (cur[j].astype(np.float64) - eps[e][0][t + k]) / x_std
                se[k] += float(np.sum(d * d))
                cnt[k] += S
    return {k: se[k] / cnt[k] if cnt[k] else None for k in KS}


class OpenLoopTest(TmpDirCase):
    def test_matches_numpy_rollout(self):
        eps = rollout(24, seed=3, lo=6, hi=16)  # some episodes shorter than 10 steps
        cfg = mixprec.Config(**{"model.layers": "linear:32,gelu,linear",
                                "training.precision": "fp32", "training.epochs": 3,
                                "training.batch_size": 16, "data.val_fraction": 0.25,
                                "output.dir": self.path("run")})
        run = mixprec.Run(cfg, data=flat(eps), store=False)
        run.train()
        ev = run.evaluate()
        ckpt = run.save(self.path("now.safetensors"))
        run.close()
        k = min(max(int(round(0.75 * len(eps))), 1), len(eps) - 1)
        tr_obs = np.concatenate([s[:-1] for s, *_ in eps[:k]]).astype(np.float64)
        x_std = np.maximum(tr_obs.std(axis=0), 1e-6).astype(np.float32).astype(np.float64)
        with mixprec.Predictor(ckpt) as p:
            def pred(o, a):
                return p.predict(obs=o, actions=a)["next_obs"]
            want = open_loop_oracle(pred, eps[k:], x_std)
            # Predictor.evaluate on explicit data: every episode is held out
            got_all = p.evaluate(data=flat(eps))["open_loop"]
            want_all = open_loop_oracle(pred, eps, x_std)
        got = ev["open_loop"]
        self.assertEqual(sorted(got), list(KS))
        for kk in KS:
            # FP32 states, the same model; the difference is rounding in the
            # two standardisation paths, compounded over at most 10 steps
            self.assertTrue(want[kk] > 0)
            self.assertLess(abs(got[kk] - want[kk]), 1e-4 * want[kk] + 1e-12, (kk, got, want))
            self.assertLess(abs(got_all[kk] - want_all[kk]), 1e-4 * want_all[kk] + 1e-12,
                            (kk, got_all, want_all))
        # the error grows with the horizon on this system
        self.assertLess(got[1], got[5])
        self.assertLess(got[5], got[10])

    def test_not_a_world_model(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(256, 4)).astype(np.float32)
        y = (x @ np.ones((4, 2), np.float32)).astype(np.float32)
        cfg = mixprec.Config(**{"model.workload": "regressor", "training.epochs": 1,
                                "output.dir": self.path("reg"), "checkpoint.enabled": False})
        run = mixprec.Run(cfg, data={"x": x, "y": y}, checkpoints=False, store=False)
        run.train()
        self.assertIsNone(run.evaluate()["open_loop"])
        run.close()


if __name__ == "__main__":
    unittest.main()
