"""The termination head (model.termination, docs/world_models.md
"Termination head") from Python: Run.evaluate reports "bce" and the
termination "accuracy", computed here again in NumPy from
Predictor.predict's terminal_prob on the held-out episodes (the BCE from
the probability, the accuracy at 0.5); WorldModel.predict(obs=, actions=)
returns terminal_prob; to_torch() reproduces it."""
import unittest

import numpy as np

import mixprec
from .util import TmpDirCase, torch


def buffer(n=3000, seed=5):
    """Flat transitions with next_obs, terminal when |next0| > 1, a timeout
    every 20 rows: dict of arrays as a replay buffer holds them."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1.2, 1.2, (n, 2)).astype(np.float32)
    act = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    nxt = np.stack([obs[:, 0] + 0.2 * act[:, 0], obs[:, 1] - 0.2 * obs[:, 0]], 1)
    nxt = (nxt + 0.02 * rng.standard_normal((n, 2))).astype(np.float32)
    term = np.abs(nxt[:, 0]) > 1.0
    tmo = (~term) & (np.arange(n) % 20 == 19)
    return {"obs": obs, "actions": act, "rewards": -nxt[:, 0] ** 2, "next_obs": nxt,
            "terminals": term, "timeouts": tmo}


class TerminationTest(TmpDirCase):
    def test_evaluate_predict_torch(self):
        data = buffer()
        cfg = mixprec.Config(**{"model.layers": "linear:64,tanh,linear:64,tanh,linear",
                                "model.termination": True, "training.epochs": 5,
                                "training.batch_size": 64, "training.lr": 0.005,
                                "data.val_fraction": 0.2, "output.dir": self.path("run")})
        run = mixprec.Run(cfg, data=data, store=False)
        run.train()
        ev = run.evaluate()
        ckpt = run.save(self.path("now.safetensors"))
        run.close()
        self.assertIsNotNone(ev["bce"])
        # the held-out rows: next_obs[i] != obs[i+1] everywhere, so every row
        # is an episode of its own (docs/data.md) and the first round(0.8 N)
        # of them train
        v0 = int(round(0.8 * len(data["obs"])))
        with mixprec.Predictor(ckpt) as p:
            out = p.predict(obs=data["obs"][v0:], actions=data["actions"][v0:])
            module = p.to_torch() if torch is not None else None
        prob = out["terminal_prob"].astype(np.float64)
        t = data["terminals"][v0:].astype(np.float64)
        self.assertEqual(prob.shape, t.shape)
        acc = float(np.mean((prob > 0.5) == (t == 1)))
        self.assertAlmostEqual(ev["accuracy"], acc, places=12)
        # BCE from the probability: equal to the logit's up to FP32 rounding
        p_ = np.clip(prob, 1e-7, 1 - 1e-7)
        bce = float(np.mean(-(t * np.log(p_) + (1 - t) * np.log(1 - p_))))
        self.assertLess(abs(ev["bce"] - bce), 1e-4 + 1e-3 * bce)
        self.assertGreater(acc, 0.9)
        if module is not None:
            with torch.no_grad():
                got = module(data["obs"][v0:], data["actions"][v0:])
            np.testing.assert_allclose(got["terminal_prob"].numpy(), out["terminal_prob"],
                                       rtol=1e-5, atol=1e-6)

    def test_world_model_predict(self):
        wm = mixprec.WorldModel(config={"model.termination": True,
                                        "model.layers": "linear:16,tanh,linear",
                                        "output.dir": self.path("wm")},
                                replay_buffer=buffer(800))
        wm.train(num_epochs=1, batch_size=32)
        out = wm.predict(obs=buffer(800)["obs"][:5], actions=buffer(800)["actions"][:5])
        self.assertEqual(out["terminal_prob"].shape, (5,))
        self.assertTrue(np.all((out["terminal_prob"] >= 0) & (out["terminal_prob"] <= 1)))


if __name__ == "__main__":
    unittest.main()
