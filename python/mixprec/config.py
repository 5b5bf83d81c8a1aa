"""mixprec.config: the run configuration, through the library's config API.

    Config(training={"precision": "mixed_fp16", "epochs": 2}, model={"hidden": 64})
    Config(**{"training.precision": "mixed_bf16"})          # dotted keys work too
    Config.from_yaml("run.yaml", training={"lr": 3e-4})

The keys, their checks and their messages are the library's (the same as
`mixprec config show --keys`). Precedence is the CLI's: defaults < YAML file
< environment (ENABLE_FP16_TRAINING, FP16_LOSS_SCALE, ...) < the keyword
overrides; the kill switch ENABLE_FP16_TRAINING=false (or
MIXPREC_FORCE_FP32=1) wins over all of them. The environment is read when
the Config is made (and again by with_overrides), as the CLI reads it at
start. A bad key or value raises ConfigError with the library's message,
at construction; a rule across keys is checked at construction too and
raised when the config is used (Config.check(), a Run). The regressor's
need for data is the Run's check (data.path or the Run's data=).
"""
import ctypes
import json
import math
import os

from . import _capi, _lib
from .errors import ConfigError

# sizeof(mxp_config) is 3456 bytes in this version; resolve writes into a
# buffer far larger, so a later, larger struct still fits.
_CONFIG_BUF = 1 << 16


def _text(v):
    """A Python value as the config's value text."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isfinite(v):
            return repr(v)
        raise ConfigError("non-finite value %r: config values are finite numbers" % v, "config_error")
    if isinstance(v, (list, tuple)):
        return ",".join(_text(x) for x in v)
    if v is None:
        return "none"
    return str(v)


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten("%s.%s" % (prefix, k) if prefix else str(k), v, out)
    else:
        out.append((prefix, _text(value)))


class Builder(_lib.Handle):
    """An owned mxp_config_builder with the sources applied (internal)."""

    def __init__(self, yaml_path, overrides, resume=None):
        L = _lib.lib()
        self._L = L
        self.ptr = ctypes.c_void_p()
        self.checkpoint = None
        err = _lib.CError()
        _lib.check(L.mxp_config_builder_create(ctypes.byref(self.ptr), ctypes.byref(err)), err)
        try:
            if resume is not None:  # a checkpoint's config, below everything else
                buf = ctypes.create_string_buffer(_capi.CKPT_PATH_MAX)
                s = L.mxp_run_resume_config(os.fsencode(resume), self.ptr, buf, len(buf),
                                            ctypes.byref(err))
                if s != 0:
                    err.msg = ("resume %s: %s" % (resume, err.msg.decode("utf-8", "replace"))
                               ).encode()[:511]
                _lib.check(s, err)
                self.checkpoint = buf.value.decode()
            if yaml_path is not None:
                _lib.check(L.mxp_config_apply_file(self.ptr, os.fsencode(yaml_path),
                                                   ctypes.byref(err)), err)
            _lib.check(L.mxp_config_apply_env(self.ptr, None, ctypes.byref(err)), err)
            for k, v in overrides:
                kv = ("%s=%s" % (k, v)).encode()
                _lib.check(L.mxp_config_apply_override(self.ptr, kv, ctypes.byref(err)), err)
        except BaseException:
            self.close()
            raise
        # Rules across keys: checked now, raised when the resolved config is
        # used (a Run may add what is missing, e.g. data for the regressor).
        self._resolved, self.error = None, None
        buf = ctypes.create_string_buffer(_CONFIG_BUF)
        try:
            _lib.check(L.mxp_config_resolve(self.ptr, buf, ctypes.byref(err)), err)
            self._resolved = buf
        except ConfigError as e:
            self.error = e

    @property
    def resolved(self):
        """The mxp_config the Run is created from; raises the resolve error."""
        if self.error is not None:
            raise self.error
        return self._resolved

    def close(self):
        if self.ptr:
            self._L.mxp_config_builder_destroy(self.ptr)
            self.ptr = ctypes.c_void_p()



class Config:
    """A validated configuration: YAML file + environment + overrides."""

    def __init__(self, _yaml=None, **sections):
        overrides = []
        for k, v in sections.items():
            _flatten(k, v, overrides)
        self._resume = None
        self._yaml = os.fspath(_yaml) if _yaml is not None else None
        self._overrides = overrides
        self._b = Builder(self._yaml, self._overrides)

    @classmethod
    def _make(cls, resume, yaml_path, overrides):
        c = cls.__new__(cls)
        c._resume, c._yaml, c._overrides = resume, yaml_path, list(overrides)
        c._b = Builder(c._yaml, c._overrides, c._resume)
        return c

    @classmethod
    def from_yaml(cls, path, **sections):
        """The YAML file (nested mappings or dotted keys), then the
        environment, then `sections` on top."""
        return cls(path, **sections)

    @classmethod
    def from_checkpoint(cls, path, _yaml=None, **sections):
        """The configuration a checkpoint was written with, as `mixprec train
        --resume PATH` resolves it: the checkpoint's config and the precision
        it was in when saved (after a fallback: the fallback's), output.dir =
        PATH when PATH is a run directory, then the YAML file, environment
        and `sections` on top. `path`: run directory, checkpoints directory
        or checkpoint file (the newest verified one of a directory). The
        library's mxp_run_resume_config, as the CLI."""
        overrides = []
        for k, v in sections.items():
            _flatten(k, v, overrides)
        c = cls._make(os.fspath(path), os.fspath(_yaml) if _yaml is not None else None,
                      overrides)
        c.checkpoint = c._b.checkpoint
        return c

    def with_overrides(self, **sections):
        """A new Config: this one's sources, then `sections`."""
        extra = []
        for k, v in sections.items():
            _flatten(k, v, extra)
        c = Config._make(self._resume, self._yaml, self._overrides + extra)
        if hasattr(self, "checkpoint"):
            c.checkpoint = self.checkpoint
        return c

    def check(self):
        """Raise the ConfigError of a rule across keys, if any; else self."""
        self._b.resolved
        return self

    @property
    def yaml_path(self):
        return self._yaml

    @property
    def overrides(self):
        """The `key=value` overrides, in the order they apply."""
        return ["%s=%s" % kv for kv in self._overrides]

    @staticmethod
    def keys():
        """Every key the library knows, in its table order."""
        L = _lib.lib()
        return [L.mxp_config_key_name(i).decode() for i in range(L.mxp_config_num_keys())]

    @staticmethod
    def help(key):
        L = _lib.lib()
        i = L.mxp_config_key_find(key.encode())
        if i < 0:
            raise KeyError(key)
        return L.mxp_config_key_help(i).decode()

    def _value(self, key):
        L = _lib.lib()
        i = L.mxp_config_key_find(key.encode())
        if i < 0:
            raise KeyError(key)
        buf = ctypes.create_string_buffer(1024)
        src = L.mxp_config_key_value(self._b.ptr, i, buf, len(buf))
        v = buf.value.decode()
        if len(v) >= 2 and v[0] == v[-1] == '"':  # a quoted string: its text
            try:
                v = json.loads(v)
            except ValueError:
                pass
        return v, L.mxp_config_source_name(src).decode()

    def __getitem__(self, key):
        """The resolved value of a dotted key as the library writes it
        ("mixed_fp16", "0.0003", "true")."""
        return self._value(key)[0]

    def __contains__(self, key):
        return _lib.lib().mxp_config_key_find(str(key).encode()) >= 0

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def source(self, key):
        """Where a key's value came from: default, file, env, cli or
        kill_switch (the library's source names)."""
        return self._value(key)[1]

    def to_dict(self):
        """{key: value text} for every key."""
        return {k: self[k] for k in self.keys()}

    def show(self):
        """`mixprec config show`'s text (mxp_config_print): one
        `key: value  # source` line per key."""
        libc = ctypes.CDLL(None)
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t)]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        f = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        if not f:
            raise MemoryError("open_memstream failed")
        _lib.lib().mxp_config_print(self._b.ptr, f)
        libc.fclose(f)
        try:
            return ctypes.string_at(buf, size.value).decode("utf-8", "replace")
        finally:
            libc.free(buf)

    def args(self):
        """The same configuration as CLI arguments (--config FILE, key=value...);
        the environment is the process's."""
        a = ["--config", self._yaml] if self._yaml else []
        return a + self.overrides

    def __repr__(self):
        parts = (["yaml=%r" % self._yaml] if self._yaml else []) + \
            ["%r" % o for o in self.overrides]
        return "Config(%s)" % ", ".join(parts)
