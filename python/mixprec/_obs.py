"""mixprec._obs: the run store, metrics and HTTP API of a Python run (the
library's mxp_obs fed by mxp_obs_run_observer, as examples/train_run.c and
the CLI do): output.dir/metrics.db and events.jsonl under the config's
obs.* keys, and the dashboard/API when obs.http.enabled is true."""
import ctypes
import os
from ctypes import POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int, c_int64, c_void_p

from . import _capi, _lib

STR_MAX = 256  # MXP_CONFIG_STR_MAX


class ObsSettings(Structure):
    """struct mxp_obs_settings (config.h)."""
    _fields_ = [("http_enabled", c_bool), ("http_address", c_char * STR_MAX),
                ("http_port", c_int64), ("token_file", c_char * STR_MAX),
                ("http_max_connections", c_int64), ("http_timeout_s", c_int64),
                ("http_linger_s", c_double), ("store_enabled", c_bool),
                ("store_db", c_char * STR_MAX), ("store_events", c_char * STR_MAX),
                ("flush_steps", c_int64), ("flush_seconds", c_double),
                ("history_max", c_int64), ("fp32_baseline_loss", c_double)]


def settings(config):
    """The obs.* keys of a Config as an mxp_obs_settings."""
    s = ObsSettings()
    b = lambda k: config[k] == "true"  # noqa: E731
    s.http_enabled = b("obs.http.enabled")
    s.http_address = config["obs.http.address"].encode()
    s.http_port = int(config["obs.http.port"])
    s.token_file = config["obs.http.token_file"].encode()
    s.http_max_connections = int(config["obs.http.max_connections"])
    s.http_timeout_s = int(config["obs.http.timeout_s"])
    s.http_linger_s = float(config["obs.http.linger_s"])
    s.store_enabled = b("obs.store.enabled")
    s.store_db = config["obs.store.db"].encode()
    s.store_events = config["obs.store.events"].encode()
    s.flush_steps = int(config["obs.store.flush_steps"])
    s.flush_seconds = float(config["obs.store.flush_seconds"])
    s.history_max = int(config["obs.history_max"])
    s.fp32_baseline_loss = float(config["obs.fp32_baseline_loss"])
    return s


class Obs:
    """An owned mxp_obs and its run observer (`observer`, filled by the
    library: its functions are C, so no Python runs per step)."""

    def __init__(self, config):
        L = _capi.declare()
        P, E, f = c_void_p, POINTER(_lib.CError), _lib._fn
        f(L, "mxp_obs_create", c_int, POINTER(ObsSettings), c_char_p, c_char_p, POINTER(P), E)
        f(L, "mxp_obs_destroy", None, P)
        f(L, "mxp_obs_run_observer", c_int, P, POINTER(_capi.RunObserver), E)
        f(L, "mxp_obs_serve", c_int, P, E)
        self._L = L
        self.ptr = P()
        st = settings(config)
        out = config["output.dir"]
        if st.store_enabled:
            os.makedirs(out, exist_ok=True)
        err = _lib.CError()
        _lib.check(L.mxp_obs_create(ctypes.byref(st), os.fsencode(out), None,
                                    ctypes.byref(self.ptr), ctypes.byref(err)), err)
        try:
            self.observer = _capi.RunObserver()
            _lib.check(L.mxp_obs_run_observer(self.ptr, ctypes.byref(self.observer),
                                              ctypes.byref(err)), err)
            if st.http_enabled:
                _lib.check(L.mxp_obs_serve(self.ptr, ctypes.byref(err)), err)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.ptr:
            self._L.mxp_obs_destroy(self.ptr)
            self.ptr = c_void_p()
