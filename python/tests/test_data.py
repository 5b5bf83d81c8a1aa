"""Runs on NumPy arrays: classifier, regressor and world model from memory,
arrays vs the same arrays in a file (bit for bit), predict against a NumPy
forward pass, PyTorch (when importable) and `mixprec predict`, state_dict
names and shapes, init from a state_dict, resume with arrays, data errors."""
import os
import unittest

import numpy as np

import mixprec
from mixprec import _ckpt
from .util import TmpDirCase, gelu, need_cli, run_cli, torch

LAYERS = ["linear:32", "gelu", "linear"]


def regression_data(n=768, d=6, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=(d, k)).astype(np.float32) / np.sqrt(d)
    return x, np.tanh(x @ w).astype(np.float32)


def classification_data(n=1024, d=10, c=4, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=(d, c))
    return x, np.argmax(x @ w, axis=1).astype(np.int64)


def episodes(e=12, t=40, s=3, a=2, seed=2):
    """Linear dynamics next = 0.9 obs + 0.1 A act, reward = -|obs|^2."""
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(a, s)) * 0.1
    obs = np.zeros((e, t + 1, s))
    act = rng.uniform(-1, 1, size=(e, t, a))
    obs[:, 0] = rng.normal(size=(e, s))
    rew = np.zeros((e, t))
    for i in range(t):
        obs[:, i + 1] = 0.9 * obs[:, i] + act[:, i] @ B
        rew[:, i] = -np.sum(obs[:, i] ** 2, axis=1)
    return {"obs": obs.astype(np.float32), "actions": act.astype(np.float32),
            "rewards": rew.astype(np.float32)}


def numpy_forward(sd, layers, x):
    """The MLP of `layers` ("linear:W", "gelu", "relu", "tanh",
    "layernorm") in float64 from state_dict sd (nn.Sequential names)."""
    h = x.astype(np.float64)
    for i, l in enumerate(layers):
        if l.startswith("linear"):
            h = h @ sd["%d.weight" % i].astype(np.float64).T + sd["%d.bias" % i]
        elif l == "gelu":
            h = gelu(h)
        elif l == "relu":
            h = np.maximum(h, 0)
        elif l == "tanh":
            h = np.tanh(h)
        elif l == "layernorm":
            mu = h.mean(axis=1, keepdims=True)
            var = ((h - mu) ** 2).mean(axis=1, keepdims=True)
            h = (h - mu) / np.sqrt(var + 1e-5) * sd["%d.weight" % i] + sd["%d.bias" % i]
    return h


class DataTest(TmpDirCase):
    def cfg(self, workload, out, **kw):
        d = {"model.workload": workload, "output.dir": self.path(out), "training.epochs": 2}
        d.update(kw)
        return mixprec.Config(**d)

    def test_regressor_predict_matches_numpy_and_torch(self):
        x, y = regression_data()
        run = mixprec.Run(self.cfg("regressor", "r"), data={"x": x, "y": y}, model=LAYERS)
        st = run.train()
        self.assertEqual(st["workload"], "regressor")
        self.assertGreater(st["total_steps"], 0)
        sd = run.state_dict()
        self.assertEqual({k: v.shape for k, v in sd.items()},
                         {"0.weight": (32, 6), "0.bias": (32,), "2.weight": (3, 32),
                          "2.bias": (3,)})
        self.assertTrue(all(v.dtype == np.float32 for v in sd.values()))
        p = run.predict(x[:100])
        self.assertEqual(p.shape, (100, 3))
        ref = numpy_forward(sd, LAYERS, x[:100])
        np.testing.assert_allclose(p, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(run.predict(x[7]), p[7])
        ev = run.evaluate()
        self.assertEqual(ev["split"], "val")
        self.assertGreater(ev["loss"], 0.0)
        self.assertIsNone(ev["accuracy"])
        if torch is None:
            self.skipTest("torch is not importable: PyTorch comparison skipped")
        seq = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.GELU(),
                                  torch.nn.Linear(32, 3))
        seq.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
        with torch.no_grad():
            tp = seq(torch.from_numpy(x[:100])).numpy()
        np.testing.assert_allclose(p, tp, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            np.testing.assert_allclose(run.to_torch()(torch.from_numpy(x[:100])).numpy(), tp,
                                       rtol=0, atol=0)

    def test_predict_equals_cli_predict_bit_for_bit(self):
        need_cli(self)
        for prec in ("fp32", "mixed_bf16"):
            with self.subTest(precision=prec):
                x, y = regression_data(seed=3)
                out = self.path("p-" + prec)
                run = mixprec.Run(self.cfg("regressor", "p-" + prec,
                                           **{"training.precision": prec}),
                                  data={"x": x, "y": y}, model=LAYERS)
                run.train()
                mine = run.predict(x)
                _ckpt.write_safetensors(self.path("in.safetensors"), {"x": x})
                run_cli("predict", out, "--input", self.path("in.safetensors"), "--output",
                        self.path("out.safetensors"))
                theirs = _ckpt.read_safetensors(self.path("out.safetensors"))["y"]
                np.testing.assert_array_equal(mine, theirs)
                np.testing.assert_array_equal(mixprec.Predictor(out).predict(x=x), theirs)

    def test_arrays_and_file_give_the_same_run(self):
        x, y = classification_data()
        np.savez(self.path("d.npz"), x=x, y=y)
        kw = {"training.epochs": 6, "training.lr": 1e-2}
        a = mixprec.Run(self.cfg("classifier", "a", **kw), data={"x": x, "y": y}, model=LAYERS)
        b = mixprec.Run(self.cfg("classifier", "b", **kw), data=self.path("d.npz"),
                        model=LAYERS)
        sa, sb = a.train(), b.train()
        self.assertEqual(sa["last_loss"], sb["last_loss"])
        self.assertEqual(sa["total_steps"], sb["total_steps"])
        for k, v in a.state_dict().items():
            np.testing.assert_array_equal(v, b.state_dict()[k], err_msg=k)
        ev = a.evaluate()
        self.assertEqual(ev, b.evaluate())
        # separable by a linear map: the classifier must learn it
        self.assertGreater(ev["accuracy"], 0.8)
        logits = a.predict(x[:200])
        acc = np.mean(np.argmax(logits, axis=1) == y[:200])
        self.assertGreater(acc, 0.8)

    def test_world_model_from_arrays(self):
        data = episodes()
        out = self.path("w")
        run = mixprec.Run(self.cfg("world_model", "w"), data=data,
                          model=["linear:32", "tanh", "linear"])
        st = run.train()
        self.assertEqual(st["workload"], "world_model")
        self.assertGreater(st["total_steps"], 0)
        self.assertTrue(np.isfinite(run.evaluate()["loss"]))
        obs, act = data["obs"][:, 0], data["actions"][:, 0]
        res = run.predict(obs=obs, actions=act)
        self.assertEqual(res["next_obs"].shape, obs.shape)
        self.assertEqual(res["reward"].shape, (obs.shape[0],))
        run.save(self.path("w.safetensors"))
        again = mixprec.Predictor(self.path("w.safetensors")).predict(obs=obs, actions=act)
        np.testing.assert_array_equal(again["next_obs"], res["next_obs"])
        self.assertTrue(os.path.isdir(out))

    def test_state_dict_per_mode(self):
        """state_dict reads the parameters of record by one named-tensor get
        (docs/design.md "Who owns memory"): the FP32 master of a mixed mode
        is the init itself; the pure bf16 mode keeps the init rounded to
        BF16 (round to nearest even, computed here on the bits)."""
        x, y = regression_data(d=5, k=2)
        layers = ["linear:16", "tanh", "linear"]
        rng = np.random.default_rng(11)
        shapes = {"0.weight": (16, 5), "0.bias": (16,), "2.weight": (2, 16), "2.bias": (2,)}
        sd = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}

        def bf16_rne(v):
            u = v.view(np.uint32).astype(np.uint64)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            return r.astype(np.uint32).view(np.float32)

        for mode, want in (("mixed_fp16", lambda v: v), ("bf16", bf16_rne)):
            run = mixprec.Run(self.cfg("regressor", "m_" + mode, **{"training.precision": mode}),
                              data={"x": x, "y": y}, model=layers, init=sd)
            got = run.state_dict()
            self.assertEqual(sorted(got), sorted(sd))
            for k, v in sd.items():
                self.assertEqual(got[k].dtype, np.float32)
                np.testing.assert_array_equal(got[k], want(v), err_msg="%s %s" % (mode, k))
            if mode == "bf16":  # the rounding did something: not the init itself
                self.assertFalse(np.array_equal(got["0.weight"], sd["0.weight"]))
            run.close()

    def test_state_dict_names_and_init(self):
        x, y = regression_data(d=5, k=2)
        layers = ["linear:16", "layernorm", "tanh", "linear:8", "relu", "linear"]
        rng = np.random.default_rng(9)
        shapes = {"0.weight": (16, 5), "0.bias": (16,), "1.weight": (16,), "1.bias": (16,),
                  "3.weight": (8, 16), "3.bias": (8,), "5.weight": (2, 8), "5.bias": (2,)}
        sd = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
        run = mixprec.Run(self.cfg("regressor", "i"), data={"x": x, "y": y}, model=layers,
                          init=sd)
        got = run.state_dict()
        self.assertEqual({k: v.shape for k, v in got.items()}, shapes)
        for k in sd:
            np.testing.assert_array_equal(got[k], sd[k], err_msg=k)
        self.assertEqual(sorted(run.state_dict(library_names=True)),
                         sorted("layers." + k for k in shapes))
        np.testing.assert_allclose(run.predict(x[:50]), numpy_forward(sd, layers, x[:50]),
                                   rtol=1e-5, atol=1e-5)
        # a safetensors file under the library's names works the same
        p = self.path("init.safetensors")
        _ckpt.write_safetensors(p, {"layers." + k: v for k, v in sd.items()})
        run2 = mixprec.Run(self.cfg("regressor", "i2"), data={"x": x, "y": y}, model=layers,
                           init=p)
        for k in sd:
            np.testing.assert_array_equal(run2.state_dict()[k], sd[k], err_msg=k)
        run.train(num_epochs=1)
        trained = run.state_dict()
        run.close()  # removes the temporary init file; resume does not need it
        back = mixprec.Run.resume(self.path("i"), data={"x": x, "y": y})
        self.assertTrue(back.stats["resumed"])
        for k, v in trained.items():
            np.testing.assert_array_equal(back.state_dict()[k], v, err_msg=k)
        bad = dict(sd)
        bad["0.weight"] = bad["0.weight"][:, :4]
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg("regressor", "i3"), data={"x": x, "y": y}, model=layers,
                        init=bad)
        self.assertIn("layers.0.weight", str(cm.exception))
        if torch is not None:  # a torch module's state_dict as init
            seq = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.LayerNorm(16),
                                      torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
                                      torch.nn.Linear(8, 2))
            run3 = mixprec.Run(self.cfg("regressor", "i4"), data={"x": x, "y": y},
                               model=layers, init=seq.state_dict())
            with torch.no_grad():
                np.testing.assert_allclose(run3.predict(x[:50]),
                                           seq(torch.from_numpy(x[:50])).numpy(),
                                           rtol=1e-5, atol=1e-5)

    def test_resume_with_arrays_is_bit_exact(self):
        x, y = regression_data(seed=4)
        data = {"x": x, "y": y}
        straight = mixprec.Run(self.cfg("regressor", "s", **{"training.epochs": 3}),
                               data=data, model=LAYERS)
        total = straight.train()["total_steps"]
        k = total // 2
        run = mixprec.Run(self.cfg("regressor", "t", **{"training.epochs": 3}), data=data,
                          model=LAYERS, progress=lambda p: p["step"] == k and run.stop(),
                          progress_every=1)
        self.assertEqual(run.train()["total_steps"], k)
        run.close()
        with self.assertRaises(mixprec.Error) as cm:  # arrays are not in the checkpoint
            mixprec.Run.resume(self.path("t"))
        self.assertIn("data=", str(cm.exception))
        back_cfg = mixprec.Config.from_checkpoint(self.path("t"))
        self.assertEqual(back_cfg["model.layers"], ",".join(LAYERS))
        self.assertEqual(back_cfg["data.path"], "none")  # no placeholder path
        back = mixprec.Run.resume(self.path("t"), data=data)
        st = back.train()
        self.assertEqual(st["total_steps"], total)
        self.assertEqual(st["last_loss"], straight.stats["last_loss"])
        for n, v in straight.state_dict().items():
            np.testing.assert_array_equal(back.state_dict()[n], v, err_msg=n)

    def test_data_errors_name_the_array(self):
        x, y = regression_data()
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg("regressor", "e1"), data={"x": x}, model=LAYERS)
        self.assertIn("y", str(cm.exception))
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg("regressor", "e2"), data={"x": x, "y": y, "z_typo": y},
                        model=LAYERS)
        self.assertIn("z_typo", str(cm.exception))
        bad = x.copy()
        bad[3, 2] = np.nan
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(self.cfg("regressor", "e3"), data={"x": bad, "y": y}, model=LAYERS)
        self.assertEqual(cm.exception.status, "nonfinite")
        with self.assertRaises(mixprec.ConfigError):
            mixprec.Run(self.cfg("regressor", "e4"), data={"x": x, "y": y},
                        model=["linear:abc", "linear"])
        self.cfg("regressor", "e5").check()  # the data may come from memory
        with self.assertRaises(mixprec.ConfigError) as cm:  # regressor without data
            mixprec.Run(self.cfg("regressor", "e5"))
        self.assertIn("data.path", str(cm.exception))
        self.assertIn("data=", str(cm.exception))
        run = mixprec.Run(self.cfg("regressor", "e6"), data={"x": x, "y": y}, model=LAYERS)
        with self.assertRaises(mixprec.Error) as cm:
            run.predict(x[:, :3])
        self.assertIn("[B, 6]", str(cm.exception))

    def test_array_name_with_nul_is_refused(self):
        # issue 30 item 8: 'x\0junk' was taken as 'x' (the C string ends at NUL)
        x, y = regression_data()
        for bad in ("x\0junk", "", 3):
            with self.assertRaises(mixprec.Error) as cm:
                mixprec.Run(self.cfg("regressor", "nul"), data={bad: x, "y": y}, model=LAYERS)
            self.assertIn("NUL", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
