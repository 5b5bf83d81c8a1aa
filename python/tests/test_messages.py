"""Messages (issue 30, item 13): other frameworks' key names get "did you
mean", PyTorch Lightning's precision names are accepted, a shape key beside
model.layers is refused instead of ignored, time-major world-model arrays
are named as such, Python errors speak Python ("data arrays:", "(set in
Python)", not "memory:" and "(cli)"), eval of an array-trained run names
--data, and Predictor.evaluate takes a file. Each failed before: no
suggestion, "must be one of", silently ignored, "array 'actions' ... must
be 21", "memory: ... (cli)", "pass the data", AttributeError."""
import os

import numpy as np

import mixprec
from .util import TmpDirCase, need_cli, run_cli

R = np.random.default_rng(5)


class MessageTest(TmpDirCase):
    def test_other_frameworks_key_names_get_a_suggestion(self):
        need_cli(self)
        for bad, good in (("training.learning_rate=1e-3", "training.lr"),
                          ("learning_rate=1e-3", "training.lr"),
                          ("gradient_accumulation_steps=2", "training.grad_accum_steps"),
                          ("training.max_epochs=2", "training.epochs"),
                          ("optim.lr=0.1", "training.lr")):
            r = run_cli("config", "show", bad, check=False)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("did you mean '%s'?" % good, r.stderr, bad)
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(training={"learning_rate": 1e-3})
        self.assertIn("did you mean 'training.lr'?", str(cm.exception))

    def test_lightning_precision_names(self):
        for name, mode in (("bf16-mixed", "mixed_bf16"), ("16-mixed", "mixed_fp16"),
                           ("32-true", "fp32"), ("bf16-true", "bf16"), ("16-true", "fp16"),
                           ("32", "fp32"), ("16", "mixed_fp16")):
            self.assertEqual(mixprec.Config(training={"precision": name})["training.precision"],
                             mode, name)
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(training={"precision": "bf16-mix"})
        self.assertIn("bf16-mixed", str(cm.exception))

    def test_shape_keys_beside_model_layers_are_refused(self):
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(model={"layers": "linear:8,gelu,linear", "hidden": 128}).check()
        msg = str(cm.exception)
        self.assertIn("model.hidden=128 (set in Python) has no effect beside model.layers", msg)
        self.assertNotIn("(cli)", msg)
        need_cli(self)
        r = run_cli("train", "model.layers=[linear:8, gelu, linear]", "model.depth=2",
                    "output.dir=x", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("model.depth=2 (cli) has no effect beside model.layers", r.stderr)
        self.assertFalse(os.path.exists("x"))
        # the defaults beside model.layers are fine, and so is resuming such a run
        x = R.normal(size=(128, 3)).astype(np.float32)
        run = mixprec.Run(mixprec.Config(model={"workload": "regressor"},
                                         training={"epochs": 1}, output={"dir": "ok"}),
                          data={"x": x, "y": x[:, :1]}, model=["linear:8", "gelu", "linear"])
        run.train()
        run.close()
        mixprec.Run.resume("ok", data={"x": x, "y": x[:, :1]}).close()

    def test_python_errors_speak_python(self):
        x = R.normal(size=(40, 3)).astype(np.float32)
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(mixprec.Config(model={"workload": "regressor"}),
                        data={"x": x, "y": x[:7, :1]})
        msg = str(cm.exception)
        self.assertTrue(msg.startswith("data arrays: "), msg)
        self.assertIn("'y'", msg)
        self.assertNotIn("memory", msg)
        self.assertFalse(os.path.exists("runs/version_0"))  # the failed run left nothing

    def test_time_major_world_model_arrays_are_named(self):
        obs = R.normal(size=(21, 16, 3)).astype(np.float32)  # [T+1, E, S]
        act = R.normal(size=(20, 16, 2)).astype(np.float32)
        rew = R.normal(size=(20, 16)).astype(np.float32)
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(mixprec.Config(), data={"obs": obs, "actions": act, "rewards": rew})
        msg = str(cm.exception)
        self.assertIn("look time-major", msg)
        self.assertIn("obs.transpose(1, 0, 2)", msg)
        # the transposed arrays train
        run = mixprec.Run(mixprec.Config(training={"epochs": 1, "batch_size": 16}),
                          data={"obs": obs.transpose(1, 0, 2), "actions": act.transpose(1, 0, 2),
                                "rewards": rew.T}, model=["linear:8", "linear"])
        run.train()
        run.close()

    def test_evaluate_array_trained_run(self):
        x = R.normal(size=(300, 4)).astype(np.float32)
        y = np.tanh(x[:, :2])
        run = mixprec.Run(mixprec.Config(model={"workload": "regressor"},
                                         training={"epochs": 1}, output={"dir": "r"}),
                          data={"x": x, "y": y}, model=["linear:8", "gelu", "linear"])
        run.train()
        run.close()
        np.savez("val.npz", x=x[:64], y=y[:64])
        with mixprec.Predictor("r") as p:
            from_file = p.evaluate(data="val.npz")
            from_arrays = p.evaluate(data={"x": x[:64], "y": y[:64]})
            pred = p.predict(x=x[:64])
            with self.assertRaises(mixprec.Error) as cm:
                p.evaluate()
            self.assertIn("--data FILE", str(cm.exception))
            with self.assertRaises(mixprec.Error) as cm:
                p.evaluate(data=[x, y])
            self.assertIn("accepted: a dict of arrays", str(cm.exception))
        self.assertEqual(from_file, from_arrays)
        # NumPy oracle: the regressor's loss is the mean squared error
        self.assertAlmostEqual(from_file["loss"], float(np.mean((pred - y[:64]) ** 2)),
                               delta=1e-5 * max(1.0, from_file["loss"]))
        need_cli(self)
        r = run_cli("eval", "r", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("mixprec eval RUN --data FILE", r.stderr)
