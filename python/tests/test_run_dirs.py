"""Default run directories (issue 30, item 9): without output.dir every new
run, from Python or the CLI, gets runs/version_<N> and runs/latest links to
the newest; an explicit output.dir keeps the one-run rule, and from Python
its message names mixprec.Run.resume. Before: the second run with defaults
was refused (runs/latest held another run), and WorldModel() left a
/tmp/mixprec-world-model-* directory behind (item 14)."""
import glob
import os
import tempfile
import unittest

import numpy as np

import mixprec
from .util import TmpDirCase, need_cli, run_cli, torch

X = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
Y = np.tanh(X[:, :2])
SMALL_CLI = ["data.trajectories=16", "data.episode_length=50", "model.hidden=32",
             "model.depth=2", "training.epochs=1", "--quiet"]


def regressor(**sections):
    return mixprec.Config(model={"workload": "regressor"}, training={"epochs": 1}, **sections)


class RunDirTest(TmpDirCase):
    def latest(self):
        return os.readlink(os.path.join("runs", "latest"))

    def test_python_runs_twice_with_defaults(self):
        dirs = []
        for _ in range(2):
            run = mixprec.Run(regressor(), data={"x": X, "y": Y}, model=["linear:8", "linear"])
            run.train()
            dirs.append(run.output_dir)
            self.assertEqual(self.latest(), os.path.basename(run.output_dir))
            run.close()
        self.assertEqual(dirs, [os.path.join("runs", "version_0"),
                                os.path.join("runs", "version_1")])
        for d in dirs:  # each holds its own run
            self.assertTrue(os.listdir(os.path.join(d, "checkpoints")))
        # runs/latest is the newest run: resume it
        again = mixprec.Run.resume("runs/latest", data={"x": X, "y": Y})
        self.assertEqual(again.stats["run_id"], mixprec.Predictor(dirs[1]).checkpoint and
                         again.stats["run_id"])
        self.assertEqual(os.path.realpath(again.output_dir), os.path.realpath(dirs[1]))

    def test_readme_python_example_runs_twice(self):
        """README.md's Python example, as written, twice in one directory
        (before: the second run was refused). Its last line needs torch."""
        if torch is None:
            self.skipTest("torch is not importable (the example ends with load_torch)")
        import re
        import subprocess
        import sys
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "README.md"), encoding="utf-8") as f:
            code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(sorted(os.listdir("runs")), ["latest", "version_0", "version_1"])

    def test_failed_run_leaves_no_directory_and_latest_in_place(self):
        run = mixprec.Run(regressor(), data={"x": X, "y": Y}, model=["linear:8", "linear"])
        run.close()
        with self.assertRaises(mixprec.Error):  # y of the wrong length
            mixprec.Run(regressor(), data={"x": X, "y": Y[:10]}, model=["linear:8", "linear"])
        self.assertEqual(sorted(os.listdir("runs")), ["latest", "version_0"])
        self.assertEqual(self.latest(), "version_0")

    def test_explicit_output_dir_names_python_resume(self):
        cfg = regressor(output={"dir": "mine"})
        mixprec.Run(cfg, data={"x": X, "y": Y}, model=["linear:8", "linear"]).train()
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Run(cfg, data={"x": X, "y": Y}, model=["linear:8", "linear"])
        msg = str(cm.exception)
        self.assertIn("mixprec.Run.resume('mine')", msg)
        self.assertNotIn("--resume", msg)
        self.assertNotIn("mxp_run_options", msg)
        self.assertFalse(os.path.exists("runs"))

    def test_world_model_leaves_nothing_in_tmp(self):
        pattern = os.path.join(tempfile.gettempdir(), "mixprec-world-model-*")
        before = set(glob.glob(pattern))
        m = mixprec.WorldModel(**{"data.trajectories": 16, "data.episode_length": 50,
                                  "model.hidden": 32, "model.depth": 2})
        m.train(num_epochs=1, batch_size=16)
        m2 = mixprec.WorldModel(**{"data.trajectories": 16, "data.episode_length": 50,
                                   "model.hidden": 32, "model.depth": 2})
        m2.train(num_epochs=1, batch_size=16)
        self.assertEqual(set(glob.glob(pattern)), before)
        self.assertEqual([m.output_dir, m2.output_dir],
                         [os.path.join("runs", "version_0"), os.path.join("runs", "version_1")])

    def test_cli_runs_twice_and_resumes_latest(self):
        need_cli(self)
        run_cli("train", *SMALL_CLI)
        run_cli("train", *SMALL_CLI)
        self.assertEqual(self.latest(), "version_1")
        run_cli("train", "--resume", "runs/latest", "training.epochs=2", "--quiet")
        run_cli("train", *SMALL_CLI)
        self.assertEqual(self.latest(), "version_2")
        # the resumed run kept writing into version_1 (its stored output.dir),
        # so resuming its newest checkpoint file lands there, not in latest
        ck = sorted(os.listdir("runs/version_1/checkpoints"))
        self.assertEqual(len(ck), 2, ck)
        run_cli("train", "--resume", os.path.join("runs/version_1/checkpoints", ck[-1]),
                "training.epochs=3", "--quiet")
        self.assertEqual(len(os.listdir("runs/version_1/checkpoints")), 3)
        self.assertEqual(sorted(os.listdir("runs")),
                         ["latest", "version_0", "version_1", "version_2"])

    def test_cli_moves_a_pre_version_latest_directory_aside(self):
        need_cli(self)
        run_cli("train", "output.dir=runs/latest", *SMALL_CLI)  # the old default layout
        with open("runs/latest/run.json") as f:
            old = f.read()
        run_cli("train", *SMALL_CLI)
        self.assertEqual(sorted(os.listdir("runs")), ["latest", "version_0", "version_1"])
        self.assertEqual(self.latest(), "version_1")
        with open("runs/version_0/run.json") as f:  # nothing lost
            self.assertEqual(f.read(), old)

    def test_cli_explicit_output_dir_keeps_the_rule(self):
        need_cli(self)
        run_cli("train", "output.dir=mine", *SMALL_CLI)
        r = run_cli("train", "output.dir=mine", *SMALL_CLI, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--resume mine", r.stderr)
        self.assertFalse(os.path.exists("runs"))


if __name__ == "__main__":
    unittest.main()
