"""mixprec.load_torch / Predictor.to_torch (issue 30, item 11): the export
loads into PyTorch without the safetensors package, and the module
reproduces `mixprec predict` on raw inputs, standardisation included.
Oracles: the library's predict (Predictor.predict and the CLI's `mixprec
predict`, FP32) on the same raw inputs, and a NumPy forward of the exported
tensors. Skipped without torch (Debian python3-torch, 1.13 here). Before:
no load_torch, no to_torch, and docs/data.md's recipe needed
`from safetensors.torch import load_file`, which Debian 12 lacks."""
import os
import sys
import unittest

import numpy as np

import mixprec
from mixprec import _ckpt
from .util import TmpDirCase, gelu, need_cli, run_cli, torch

R = np.random.default_rng(3)


def world_arrays():
    obs = R.normal(size=(24, 21, 3)).astype(np.float32) * np.float32([1, 10, 0.1])
    act = R.normal(size=(24, 20, 2)).astype(np.float32)
    obs[:, 1:] = 0.8 * obs[:, :-1] + 0.3 * act[..., :1] + 5.0
    rew = (obs[:, 1:, 0] - act[..., 1]).astype(np.float32) * 3.0 + 7.0
    return {"obs": obs, "actions": act, "rewards": rew}


@unittest.skipIf(torch is None, "torch is not importable (Debian python3-torch)")
class TorchLoadTest(TmpDirCase):
    def train(self, workload, data, layers, **extra):
        cfg = mixprec.Config(model={"workload": workload},
                             training={"epochs": 2, "batch_size": 16},
                             output={"dir": self.path(workload)}, **extra)
        run = mixprec.Run(cfg, data=data, model=layers)
        run.train()
        run.close()
        return self.path(workload)

    def test_world_model_reproduces_predict_on_raw_inputs(self):
        data = world_arrays()
        d = self.train("world_model", data, ["linear:32", "layernorm", "gelu", "linear:32",
                                             "tanh", "linear"])
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        with mixprec.Predictor(d, precision="fp32") as p:
            want = p.predict(obs=obs, actions=act)
            module = p.to_torch()
        self.assertIsInstance(module, torch.nn.Module)
        with torch.no_grad():
            next_obs, reward = module(torch.from_numpy(obs), torch.from_numpy(act))
        np.testing.assert_allclose(next_obs.numpy(), want["next_obs"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(reward.numpy(), want["reward"], rtol=1e-5, atol=1e-5)
        # the statistics are buffers: they travel with state_dict()
        self.assertEqual(sorted(k for k in module.state_dict() if not k.startswith("layers.")),
                         ["x_mean", "x_std", "y_mean", "y_std"])
        # and the safetensors package played no part
        self.assertNotIn("safetensors", sys.modules)

    def test_gaussian_world_model_returns_variances(self):
        """model.head=gaussian (docs/world_models.md): the bounds load as
        parameters and forward returns predict's four arrays."""
        data = world_arrays()
        cfg = mixprec.Config(model={"workload": "world_model", "head": "gaussian"},
                             training={"epochs": 2, "batch_size": 16},
                             output={"dir": self.path("gauss")})
        run = mixprec.Run(cfg, data=data, model=["linear:32", "gelu", "linear"])
        run.train()
        ev = run.evaluate()
        run.close()
        self.assertTrue(ev["mse"] is not None and ev["mse"] > 0 and ev["loss"] is not None)
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        with mixprec.Predictor(self.path("gauss"), precision="fp32") as p:
            want = p.predict(obs=obs, actions=act)
            module = p.to_torch()
        self.assertEqual(sorted(k for k in module.state_dict() if not k.startswith("layers.")),
                         ["max_logvar", "min_logvar", "x_mean", "x_std", "y_mean", "y_std"])
        with torch.no_grad():
            got = module(torch.from_numpy(obs), torch.from_numpy(act))
        for name, g in zip(("next_obs", "reward", "next_obs_var", "reward_var"), got):
            np.testing.assert_allclose(g.numpy(), want[name], rtol=1e-5, atol=1e-6,
                                       err_msg=name)
        self.assertTrue((want["next_obs_var"] > 0).all() and (want["reward_var"] > 0).all())

    def test_gaussian_ensemble_returns_predicts_arrays(self):
        """model.ensemble=3 with Gaussian heads: members.<e>.* load, forward
        returns predict's arrays (mean, total, aleatoric, epistemic)."""
        data = world_arrays()
        cfg = mixprec.Config(model={"workload": "world_model", "head": "gaussian",
                                    "ensemble": 3},
                             training={"epochs": 2, "batch_size": 16},
                             output={"dir": self.path("ens")})
        run = mixprec.Run(cfg, data=data, model=["linear:16", "tanh", "linear"])
        run.train()
        run.close()
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        with mixprec.Predictor(self.path("ens"), precision="fp32") as p:
            want = p.predict(obs=obs, actions=act)
            module = p.to_torch()
        self.assertIn("members.2.max_logvar", module.state_dict())
        with torch.no_grad():
            got = module(torch.from_numpy(obs), torch.from_numpy(act))
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-5, atol=1e-7,
                                       err_msg=name)
        self.assertTrue((want["next_obs_epistemic"] > 0).all())

    def test_run_to_torch_gaussian_ensemble_matches_run_predict(self):
        """Run.to_torch (issue 29) on a 3-member ensemble with Gaussian heads:
        the module mixprec.load_torch gives for the run's latest checkpoint
        (the same state_dict bit for bit, the same elites), and its forward
        gives the run's own predict(obs=, actions=) arrays (mean, total,
        aleatoric and epistemic variances) on the same raw inputs, FP32.
        Tolerance: both sides are FP32 forwards of the same weights that
        differ only in summation order and FMA in the GEMMs (dot products of
        at most 17 terms: <= 17 u sum|w x|, about 1e-6 of the activations'
        scale, u = 2^-24) and in glibc's vs torch's exp/softplus/tanh (a few
        ulp), then scaled by y_std and shifted by obs: rtol 1e-5 and an
        absolute 1e-6 of each array's largest magnitude (the epistemic
        variance is a difference of nearly equal member means, so its
        small entries are only accurate relative to that scale).
        Negative controls, run by hand: the Run.to_torch before this change
        (an nn.Sequential of one MLP) fails (it cannot load members.*);
        torch_load's `lv - min_logvar` changed to `lv + min_logvar`: the
        variances fail here by orders of magnitude."""
        data = world_arrays()
        cfg = mixprec.Config(model={"workload": "world_model", "head": "gaussian",
                                    "ensemble": 3},
                             training={"epochs": 2, "batch_size": 16, "precision": "fp32"},
                             output={"dir": self.path("run-ens")})
        run = mixprec.Run(cfg, data=data, model=["linear:16", "tanh", "linear"])
        run.train()
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        try:
            module = run.to_torch()
            want = run.predict(obs=obs, actions=act)
        finally:
            run.close()
        ref = mixprec.load_torch(self.path("run-ens"))  # the latest checkpoint
        self.assertIsInstance(module, type(ref))
        self.assertEqual((len(module.members), module.elites), (3, ref.elites))
        sd, rsd = module.state_dict(), ref.state_dict()
        self.assertEqual(sorted(sd), sorted(rsd))
        self.assertIn("members.2.max_logvar", sd)
        for k in sd:
            self.assertTrue(torch.equal(sd[k], rsd[k]), k)
        self.assertFalse(module.training)
        with torch.no_grad():
            got = module(torch.from_numpy(obs), torch.from_numpy(act))
        self.assertEqual(sorted(got), sorted(want))
        for name in ("next_obs_aleatoric", "next_obs_epistemic", "reward_var"):
            self.assertIn(name, want)
        for name in want:
            scale = float(np.abs(want[name]).max())
            np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-5,
                                       atol=1e-6 * scale, err_msg=name)
        self.assertTrue((want["next_obs_epistemic"] > 0).all())

    def test_residual_blocks_and_dropout(self):
        """model.layers with residual:N and dropout:P (docs/world_models.md
        "Residual blocks and dropout"): the export rebuilds Residual(N)
        items in a Layers sequential and dropout as nn.Dropout(P); in eval
        mode the module gives predict's arrays (a Gaussian ensemble), and
        Run.to_torch builds the same layers."""
        data = world_arrays()
        layers = ["linear:16", "tanh", "linear:32", "gelu", "linear:16", "residual:3",
                  "dropout:0.25", "tanh", "linear"]
        run = mixprec.Run(mixprec.Config(model={"workload": "world_model"},
                                         training={"epochs": 1, "batch_size": 16},
                                         output={"dir": self.path("one")}),
                          data=data, model=layers)
        run.train()
        seq = run.to_torch().layers  # the module load_torch gives: its MLP
        run.close()
        cfg = mixprec.Config(model={"workload": "world_model", "head": "gaussian",
                                    "ensemble": 2},
                             training={"epochs": 2, "batch_size": 16},
                             output={"dir": self.path("skip")})
        run = mixprec.Run(cfg, data=data, model=layers)
        run.train()
        run.close()
        from mixprec._torch import Layers, Residual
        self.assertIsInstance(seq, Layers)
        self.assertEqual([type(m).__name__ for m in seq][5:7], ["Residual", "Dropout"])
        self.assertEqual((seq[5].n, seq[6].p), (3, 0.25))
        obs, act = data["obs"][:, 3] + 0.5, data["actions"][:, 3]
        with mixprec.Predictor(self.path("skip"), precision="fp32") as p:
            want = p.predict(obs=obs, actions=act)
            module = p.to_torch()
        member = module.members[1].layers
        self.assertIsInstance(member, Layers)
        self.assertIsInstance(member[5], Residual)
        self.assertIsInstance(member[6], torch.nn.Dropout)
        self.assertFalse(module.training)
        with torch.no_grad():
            got = module(torch.from_numpy(obs), torch.from_numpy(act))
        for name in want:
            np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-5, atol=1e-7,
                                       err_msg=name)

    def test_export_file_and_cli_predict(self):
        need_cli(self)
        data = world_arrays()
        np.savez(self.path("wm.npz"), **data)
        np.savez(self.path("in.npz"), obs=data["obs"][:7, 0], actions=data["actions"][:7, 0])
        run_cli("train", "data.path=" + self.path("wm.npz"),
                "model.layers=[linear:16, gelu, linear]",
                "training.epochs=1", "output.dir=" + self.path("run"), "--quiet")
        r = run_cli("ckpt", "export", self.path("run"), "--torch", "-o",
                    self.path("ex.safetensors"))
        # item 12: export and predict say what they wrote (before: nothing)
        self.assertIn("wrote %s: FP32 weights" % self.path("ex.safetensors"), r.stdout)
        self.assertIn("mixprec.load_torch", r.stdout)
        r = run_cli("predict", self.path("run"), "--input", self.path("in.npz"), "--output",
                    self.path("out.safetensors"))  # trained in fp32: predicts in fp32
        self.assertIn("wrote %s: next_obs [7, 3], reward [7] (from " %
                      self.path("out.safetensors"), r.stdout)
        want = _ckpt.read_safetensors(self.path("out.safetensors"))
        module = mixprec.load_torch(self.path("ex.safetensors"))
        with torch.no_grad():
            next_obs, reward = module(data["obs"][:7, 0], data["actions"][:7, 0])
        np.testing.assert_allclose(next_obs.numpy(), want["next_obs"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(reward.numpy(), want["reward"], rtol=1e-5, atol=1e-5)
        # NumPy oracle of the documented formula, from the exported tensors
        w = _ckpt.read_safetensors(self.path("ex.safetensors"))
        z = (np.concatenate([data["obs"][:7, 0], data["actions"][:7, 0]], 1) - w["x_mean"]) \
            / w["x_std"]
        h = gelu(z @ w["layers.0.weight"].T + w["layers.0.bias"])
        y = (h @ w["layers.2.weight"].T + w["layers.2.bias"]) * w["y_std"] + w["y_mean"]
        np.testing.assert_allclose(next_obs.numpy(), data["obs"][:7, 0] + y[:, :3], rtol=1e-4,
                                   atol=1e-4)

    def test_regressor_and_classifier_take_x_as_is(self):
        x = R.normal(size=(300, 6)).astype(np.float32) * 4 + 2
        cases = (("regressor", {"x": x, "y": np.tanh(x[:, :2])}),
                 ("classifier", {"x": x, "y": (x[:, 0] > 2).astype(np.int64)}))
        for workload, data in cases:
            d = self.train(workload, data, ["linear:16", "relu", "linear"])
            with mixprec.Predictor(d, precision="fp32") as p:
                want = p.predict(x=x[:9])
            module = mixprec.load_torch(d)  # a run directory: exported on the way
            with torch.no_grad():
                got = module(torch.from_numpy(x[:9])).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=workload)
            self.assertEqual(module.kind, workload)

    def test_bad_files_raise_errors_naming_them(self):
        p = self.path("junk.safetensors")
        with open(p, "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{}              ")
        with self.assertRaises(mixprec.Error):
            mixprec.load_torch(p)
        # an export whose tensor runs past the file
        _ckpt.write_safetensors(self.path("t.safetensors"),
                                {"layers.0.weight": np.ones((2, 3), np.float32),
                                 "layers.0.bias": np.ones(2, np.float32)},
                                metadata={"kind": "regressor", "layers": "[linear:2]"})
        good = mixprec.load_torch(self.path("t.safetensors"))
        with torch.no_grad():
            np.testing.assert_array_equal(good(np.ones((1, 3), np.float32)).numpy(), [[4, 4]])
        with open(self.path("t.safetensors"), "rb") as f:
            raw = f.read()
        with open(self.path("cut.safetensors"), "wb") as f:
            f.write(raw[:-4])
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.load_torch(self.path("cut.safetensors"))
        self.assertIn("cut.safetensors", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
