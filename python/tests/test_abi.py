"""The ctypes mirrors (mixprec/_capi.py, predict.py) have the C structs'
sizes and field offsets: abi_layout.c, compiled here against include/,
prints them (skipped without a C compiler)."""
import ctypes
import os
import shutil
import subprocess
import unittest

from mixprec import _capi, _lib, _obs, config, predict
from .util import TmpDirCase

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "include")

MIRRORS = {"mxp_error": _lib.CError, "mxp_nonfinite_site": _capi.NonfiniteSite,
           "mxp_step_result": _capi.StepResult, "mxp_run_progress": _capi.RunProgress,
           "mxp_guard_event": _capi.GuardEvent, "mxp_run_observer": _capi.RunObserver,
           "mxp_run_options": _capi.RunOptions, "mxp_run_eval": _capi.RunEval,
           "mxp_run_info": _capi.RunInfo, "mxp_layer_spec": _capi.LayerSpec,
           "mxp_model_spec": _capi.ModelSpec, "mxp_tensor_info": _capi.TensorInfo,
           "mxp_array": predict._Array, "mxp_obs_settings": _obs.ObsSettings}
RENAMED = {"from": "from_"}


class AbiTest(TmpDirCase):
    def test_struct_layouts_match_the_headers(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc or not os.path.isdir(INCLUDE):
            self.skipTest("no C compiler or no include/ beside python/")
        exe = self.path("abi")
        r = subprocess.run([cc, "-std=c11", "-I", INCLUDE, os.path.join(HERE, "abi_layout.c"),
                            "-o", exe], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        checked = 0
        for line in lines.splitlines():
            name, value = line.split()
            value = int(value)
            if name == "mxp_config":
                self.assertLessEqual(value, config._CONFIG_BUF, "resolve buffer too small")
                continue
            if "." in name:
                struct, field = name.split(".")
                got = getattr(MIRRORS[struct], RENAMED.get(field, field)).offset
            else:
                got = ctypes.sizeof(MIRRORS[name])
            self.assertEqual(got, value, name)
            checked += 1
        self.assertGreater(checked, 40)


if __name__ == "__main__":
    unittest.main()
