"""Run.predict and Run.to_torch on a built-in workload (no user data): one
MLP and a 3-member ensemble. The oracle is torch: the module to_torch builds
from state_dict(), run in FP32 on the same rows, against the library's
predict (fp32 run). Rows past the model's max_batch exercise predict's
chunking; an ensemble's outputs are [E, B, K], member-major."""
import unittest

import numpy as np

import mixprec
from .util import TmpDirCase, torch

SMALL = {"model.workload": "world_model", "model.hidden": 32, "model.depth": 2,
         "data.trajectories": 8, "data.episode_length": 20, "training.batch_size": 16,
         "training.precision": "fp32"}


class BuiltinTorchTest(TmpDirCase):
    def run_of(self, ensemble):
        cfg = dict(SMALL, **{"model.ensemble": ensemble, "output.dir": self.path("r%d" % ensemble)})
        run = mixprec.Run(mixprec.Config(**cfg), checkpoints=False, store=False)
        run.train(num_epochs=1)
        return run

    def rows(self, run, n):
        d = run.state_dict(library_names=True)
        first = next(v for k, v in d.items() if k.endswith("weight"))
        return np.random.RandomState(7).randn(n, first.shape[1]).astype(np.float32)

    def check(self, ensemble):
        if torch is None:
            self.skipTest("torch is not importable (the oracle)")
        with self.run_of(ensemble) as run:
            x = self.rows(run, 70)  # more than max_batch (16): several chunks
            got = run.predict(x)
            one = run.predict(x[3])
            module = run.to_torch()
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        self.assertEqual(got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
        np.testing.assert_array_equal(one, got[..., 3, :])
        return got

    def test_one_model(self):
        got = self.check(1)
        self.assertEqual(got.ndim, 2)

    def test_ensemble_members_stacked(self):
        got = self.check(3)
        self.assertEqual(got.shape[0], 3)
        # the members differ (independent initialisation): not one output copied
        self.assertGreater(float(np.abs(got[0] - got[1]).max()), 1e-4)


if __name__ == "__main__":
    unittest.main()
