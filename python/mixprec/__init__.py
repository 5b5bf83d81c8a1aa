"""mixprec: mixed-precision training from Python, over libmixprec (ctypes).

    import mixprec
    cfg = mixprec.Config(training={"precision": "mixed_bf16", "epochs": 2})
    run = mixprec.Run(cfg, data={"x": x, "y": y}, model=["linear:64", "gelu", "linear"])
    run.train()
    print(run.stats["overflow_rate"], run.predict(x[:4]))

See docs/python.md. The library is found through $MIXPREC_LIB, pkg-config
or the build tree (mixprec._lib).
"""
import sys as _sys

try:
    import numpy as _np  # noqa: F401
except ImportError as _e:
    raise ImportError(
        "mixprec needs NumPy, which this interpreter (%s) cannot import: %s. On Debian 12 "
        "run Debian's /usr/bin/python3 (NumPy from apt: python3-numpy), or a venv made "
        "from it with --system-site-packages (docs/python.md, \"Which Python\"); a "
        "python3 that comes first on PATH from pyenv or conda has packages of its own "
        "and needs NumPy installed there" % (_sys.executable, _e)) from None

from .errors import ConfigError, Error, GuardStop, LibraryNotFound, LibraryVersionError
from .config import Config
from .run import Run
from .predict import Predictor
from .torch_load import load_torch
from .world_model import WorldModel
from ._lib import VERSION as __version__, set_log_level

__all__ = ["Config", "ConfigError", "Error", "GuardStop", "LibraryNotFound",
           "LibraryVersionError", "Predictor", "Run", "WorldModel", "load_torch", "set_log_level"]
