"""Shared helpers of the Python package tests."""
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

try:
    import torch
except ImportError:  # the torch oracles are skipped, with the reason
    torch = None

CLI = os.environ.get("MIXPREC_CLI", "")


def need_cli(test):
    if not CLI or not os.access(CLI, os.X_OK):
        raise unittest.SkipTest("MIXPREC_CLI does not name the mixprec executable")


def run_cli(*args, env=None, check=True):
    e = dict(os.environ)
    if env:
        e.update(env)
    r = subprocess.run([CLI] + [str(a) for a in args], capture_output=True, text=True, env=e)
    if check and r.returncode != 0:
        raise AssertionError("mixprec %s: exit %d\n%s" % (" ".join(map(str, args)),
                                                          r.returncode, r.stderr[-3000:]))
    return r


class TmpDirCase(unittest.TestCase):
    """A test case with a fresh temporary directory self.tmp, also the
    current directory while the test runs."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mixprec_py_")
        # runs without output.dir go to ./runs/version_<N>: keep them here
        self._cwd = os.getcwd()
        os.chdir(self.tmp)
        self._env = dict(os.environ)
        for k in ("ENABLE_FP16_TRAINING", "MIXPREC_FORCE_FP32", "FP16_LOSS_SCALE",
                  "FP16_GROWTH_FACTOR", "FP16_BACKOFF_FACTOR", "FP16_GROWTH_INTERVAL"):
            os.environ.pop(k, None)

    def tearDown(self):
        os.chdir(self._cwd)
        os.environ.clear()
        os.environ.update(self._env)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.tmp, *p)


def gelu(x):
    """Exact (erf) GELU, as torch.nn.GELU() (NumPy oracle)."""
    from math import erf, sqrt
    v = np.vectorize(lambda t: 0.5 * t * (1.0 + erf(t / sqrt(2.0))))
    return v(x.astype(np.float64))
