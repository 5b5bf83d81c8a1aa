"""mixprec: mixed-precision training from Python, over libmixprec (ctypes).

    import mixprec
    cfg = mixprec.Config(training={"precision": "mixed_bf16", "epochs": 2})
    run = mixprec.Run(cfg, data={"x": x, "y": y}, model=["linear:64", "gelu", "linear"])
    run.train()
    print(run.stats["overflow_rate"], run.predict(x[:4]))

See docs/python.md. The library is found through $MIXPREC_LIB, pkg-config
or the build tree (mixprec._lib).
"""
from .errors import ConfigError, Error, GuardStop, LibraryNotFound, LibraryVersionError
from .config import Config
from .run import Run
from .predict import Predictor
from .world_model import WorldModel
from ._lib import VERSION as __version__, set_log_level

__all__ = ["Config", "ConfigError", "Error", "GuardStop", "LibraryNotFound",
           "LibraryVersionError", "Predictor", "Run", "WorldModel", "set_log_level"]
