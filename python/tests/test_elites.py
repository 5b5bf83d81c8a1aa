"""Elites of an ensemble (model.elites, docs/world_models.md "Elites"):
predict, evaluate and the PyTorch module average over the elite members
only; checked against a NumPy oracle of the documented formulas computed
from the exported per-member weights; the elites survive a resume and a
Predictor load; the Python surfaces (Run.elites, evaluate()'s
member_loss and elites) agree with the C run."""
import json
import os
import unittest

import numpy as np

import mixprec
from mixprec import _ckpt
from .util import TmpDirCase, torch

E, K = 4, 2


def world_arrays():
    R = np.random.default_rng(29)  # the same arrays each call (a resume needs them again)
    obs = R.normal(size=(24, 21, 3)).astype(np.float32) * np.float32([1, 10, 0.1])
    act = R.normal(size=(24, 20, 2)).astype(np.float32)
    obs[:, 1:] = 0.8 * obs[:, :-1] + 0.3 * act[..., :1] + 5.0
    rew = (obs[:, 1:, 0] - act[..., 1]).astype(np.float32) * 3.0 + 7.0
    return {"obs": obs, "actions": act, "rewards": rew}


def softplus(x):
    return np.logaddexp(0.0, x)


def member_forward(w, e, z):
    """Member e of the export (layers [linear:16, tanh, linear], Gaussian
    head): the mean and the bounded log-variance, in float64."""
    p = "members.%d." % e
    f = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.tanh(z @ f[p + "layers.0.weight"].T + f[p + "layers.0.bias"])
    out = h @ f[p + "layers.2.weight"].T + f[p + "layers.2.bias"]
    k = f[p + "max_logvar"].shape[1]
    lv = f[p + "max_logvar"] - softplus(f[p + "max_logvar"] - out[:, k:])
    lv = f[p + "min_logvar"] + softplus(lv - f[p + "min_logvar"])
    return out[:, :k], lv


class ElitesTest(TmpDirCase):
    def train(self, name, **training):
        cfg = mixprec.Config(model={"workload": "world_model", "head": "gaussian",
                                    "ensemble": E, "elites": K},
                             training=dict({"epochs": 3, "batch_size": 16, "eval_every": 1},
                                           **training),
                             output={"dir": self.path(name)})
        return mixprec.Run(cfg, data=world_arrays(), model=["linear:16", "tanh", "linear"])

    def test_predict_uses_the_elites(self):
        data = world_arrays()
        run = self.train("ens")
        run.train()
        elites = run.elites
        ev = run.evaluate()
        stats = run.stats
        run.close()
        self.assertEqual(len(elites), K)
        self.assertEqual(ev["elites"], elites)
        self.assertEqual(len(ev["member_loss"]), E)
        # the elites are the K members of lowest loss at the last validation
        self.assertEqual(sorted(elites),
                         sorted(np.argsort(stats["member_val_loss"], kind="stable")[:K]))
        # the evaluation's loss: the mean of the elites' member losses
        self.assertAlmostEqual(ev["loss"], np.mean([ev["member_loss"][e] for e in elites]),
                               delta=1e-12 * abs(ev["loss"]))
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        with mixprec.Predictor(self.path("ens"), precision="fp32") as p:
            want = p.predict(obs=obs, actions=act)
            pev = p.evaluate(data=data)
            p.export_torch(self.path("ex.safetensors"))
        self.assertEqual(pev["elites"], elites)
        self.assertAlmostEqual(pev["loss"], np.mean([pev["member_loss"][e] for e in elites]),
                               delta=1e-12 * abs(pev["loss"]))
        w, meta = _ckpt.read_checked(self.path("ex.safetensors"))
        self.assertEqual(meta["elites"], ",".join(map(str, elites)))
        # NumPy oracle: standardise, run each elite member, mean and variances
        z = (np.concatenate([obs, act], 1).astype(np.float64) - w["x_mean"]) / w["x_std"]
        outs = [member_forward(w, e, z) for e in elites]
        means = np.stack([o[0] for o in outs])
        mean = means.mean(0)
        s2 = w["y_std"].astype(np.float64) ** 2
        alea = np.exp(np.stack([o[1] for o in outs])).mean(0) * s2
        epi = ((means - mean) ** 2).mean(0) * s2
        y = mean * w["y_std"] + w["y_mean"]
        oracle = {"next_obs": obs + y[:, :3], "reward": y[:, 3],
                  "next_obs_aleatoric": alea[:, :3], "reward_aleatoric": alea[:, 3],
                  "next_obs_epistemic": epi[:, :3], "reward_epistemic": epi[:, 3],
                  "next_obs_var": (alea + epi)[:, :3], "reward_var": (alea + epi)[:, 3]}
        for name, v in oracle.items():
            np.testing.assert_allclose(want[name], v, rtol=1e-4, atol=1e-6, err_msg=name)
        # and not the mean over all members (the oracle can tell them apart)
        all_mean = np.stack([member_forward(w, e, z)[0] for e in range(E)]).mean(0)
        y_all = all_mean * w["y_std"] + w["y_mean"]
        self.assertGreater(np.abs(obs + y_all[:, :3] - want["next_obs"]).max(), 1e-4)
        if torch is not None:
            module = mixprec.load_torch(self.path("ex.safetensors"))
            self.assertEqual(module.elites, elites)
            with torch.no_grad():
                got = module(torch.from_numpy(obs), torch.from_numpy(act))
            for name in want:
                np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-5,
                                           atol=1e-7, err_msg=name)

    def test_resume_keeps_the_elites(self):
        run = self.train("stop", epochs=4)
        run.train(2)
        elites = run.elites
        self.assertEqual(len(elites), K)
        run.close()
        r2 = mixprec.Run.resume(self.path("stop"), data=world_arrays())
        self.assertEqual(r2.elites, elites)
        r2.close()
        with mixprec.Predictor(self.path("stop")) as p:
            self.assertEqual(p.evaluate(data=world_arrays())["elites"], elites)
        # the checkpoint's run_state names them
        ck = sorted(f for f in os.listdir(self.path("stop", "checkpoints"))
                    if f.endswith(".safetensors"))[-1]
        meta = _ckpt.read_header(self.path("stop", "checkpoints", ck))[0]["__metadata__"]
        self.assertEqual(json.loads(meta["run_state"])["elites"], elites)


if __name__ == "__main__":
    unittest.main()
