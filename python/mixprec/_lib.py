"""mixprec._lib: find and load libmixprec.so, declare the C functions used.

Search order (the first that exists wins):
  1. $MIXPREC_LIB: the library file itself, or the folder holding it;
  2. pkg-config: `pkg-config --variable=libdir mixprec` (an installed build);
  3. installed beside the CLI: <prefix>/lib[64|/<multiarch>] of the `mixprec`
     found on PATH (<prefix>/bin/mixprec: what `cmake --install` lays out),
     then the same folders of this interpreter's prefix, /usr/local and /usr;
  4. the dynamic loader's own search (ld.so.cache, LD_LIBRARY_PATH), through
     ctypes.util.find_library;
  5. the build tree: <repository>/build next to this package's folder, then
     ./build and ../build from the current directory.
When none holds the library, LibraryNotFound names every place tried.

Everything else in the package talks to the library through `lib()`, which
loads once and declares argtypes/restype for the functions it wraps. The
calls go through ctypes.CDLL, so the GIL is released for their duration.
"""
import atexit
import ctypes
import ctypes.util
import itertools
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import weakref

from .errors import Error, LibraryNotFound, LibraryVersionError, error_from

# The library this package is written against (include/mixprec/api.h):
# ABI_VERSION must equal the loaded library's mxp_abi_version(), else the
# struct mirrors of _capi.py and the declarations here do not fit it.
VERSION = "0.1.0"
ABI_VERSION = 3
LIB_NAMES = ("libmixprec.so", "libmixprec.so.%d" % ABI_VERSION)
ERROR_MSG_MAX = 512

c_int, c_int64, c_double, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_int64,
                                                  ctypes.c_double, ctypes.c_char_p,
                                                  ctypes.c_void_p)


class Handle:
    """An owner of a library object: close() releases it (subclasses define
    it); garbage collection and `with` blocks call it. Errors while the
    interpreter shuts down are ignored."""

    def close(self):
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CError(ctypes.Structure):
    """struct mxp_error (mixprec/base.h)."""
    _fields_ = [("status", c_int), ("msg", ctypes.c_char * ERROR_MSG_MAX)]


def _in_dir(d):
    for n in LIB_NAMES:
        p = os.path.join(d, n)
        if os.path.isfile(p):
            return p
    return None


def candidates():
    """[(where, path_or_None)] in search order; path is None when that place
    holds no library (where then says what was looked at)."""
    out = []
    env = os.environ.get("MIXPREC_LIB")
    if env:
        p = env if os.path.isfile(env) else _in_dir(env)
        out.append(("$MIXPREC_LIB=%s" % env, p))
    else:
        out.append(("$MIXPREC_LIB (unset)", None))
    if shutil.which("pkg-config"):
        try:
            r = subprocess.run(["pkg-config", "--variable=libdir", "mixprec"],
                               capture_output=True, text=True, timeout=10)
            libdir = r.stdout.strip() if r.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            out.append(("pkg-config libdir %s" % libdir, _in_dir(libdir)))
        else:
            out.append(("pkg-config (no mixprec.pc on PKG_CONFIG_PATH)", None))
    else:
        out.append(("pkg-config (not installed)", None))
    out.extend(_installed())
    found = ctypes.util.find_library("mixprec")
    out.append(("the dynamic loader (ld.so.cache, LD_LIBRARY_PATH)%s" %
                (": " + found if found else ""), found))
    here = os.path.dirname(os.path.abspath(__file__))
    seen = set()
    for d in (os.path.join(here, "..", "..", "build"), os.path.join(os.getcwd(), "build"),
              os.path.join(os.getcwd(), "..", "build")):
        d = os.path.normpath(d)
        if d in seen:
            continue
        seen.add(d)
        out.append(("build tree %s" % d, _in_dir(d)))
    return out


def _libdirs(prefix):
    multi = sysconfig.get_config_var("MULTIARCH") or ""
    return [os.path.join(prefix, d) for d in
            (["lib/" + multi] if multi else []) + ["lib", "lib64"]]


def _installed():
    """[(where, path_or_None)] of the install prefixes: the CLI's on PATH,
    this interpreter's, /usr/local, /usr."""
    prefixes = []
    cli = shutil.which("mixprec")
    if cli:
        prefixes.append(("beside %s" % cli,
                         os.path.dirname(os.path.dirname(os.path.realpath(cli)))))
    for p in (sys.prefix, sys.base_prefix, "/usr/local", "/usr"):
        prefixes.append(("prefix", p))
    out, seen = [], set()
    for why, prefix in prefixes:
        for d in _libdirs(prefix):
            d = os.path.normpath(d)
            if d in seen:
                continue
            seen.add(d)
            p = _in_dir(d)
            if p or why != "prefix":
                out.append(("%s %s" % (why, d), p))
    if not any(p for _, p in out):
        return [("install prefixes (%s)" % ", ".join(sorted(seen)), None)]
    return out


_lock = threading.Lock()
_lib = None
_path = None


def lib_path():
    """Path of the loaded library (loads it when needed)."""
    lib()
    return _path


def lib():
    """The loaded library, with the wrapped functions declared."""
    global _lib, _path
    with _lock:
        if _lib is not None:
            return _lib
        tried = candidates()
        path = next((p for _, p in tried if p), None)
        if path is None:
            raise LibraryNotFound(
                "libmixprec.so not found; looked in: " + "; ".join(w for w, _ in tried) +
                ". Build it (cmake -S . -B build && cmake --build build), install it "
                "(cmake --install build), or set MIXPREC_LIB to the library file or its folder")
        try:
            L = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFound("could not load %s: %s" % (path, e)) from None
        check_version(L, path)
        _declare(L)
        _install_logger(L)
        _lib, _path = L, path
        return _lib


# The library's log lines go to the Python logger "mixprec" (INFO and up by
# default; warnings such as "FP16 training disabled - using FP32" show
# without any logging set-up, through logging's last-resort handler).
_LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)
_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
logger = logging.getLogger("mixprec")


def _on_log(user, level, msg):
    try:
        logger.log(_LEVELS[level] if 0 <= level < len(_LEVELS) else logging.ERROR,
                   "%s", msg.decode("utf-8", "replace"))
    except Exception:  # never let an exception unwind into C
        pass


_log_cb = _LOG_FN(_on_log)


def _install_logger(L):
    _fn(L, "mxp_log_set_callback", None, _LOG_FN, c_void_p)
    L.mxp_log_set_callback(_log_cb, None)
    atexit.register(_shutdown)


# Objects owning library handles (runs, predictors, datasets) register here;
# at exit they are closed in reverse order of creation while the interpreter
# still works (daemon threads too: a Run still in train() on one is stopped
# at its next step boundary and freed after train() returned), and the log
# callback is removed before it goes away.
_live = weakref.WeakValueDictionary()
_live_n = itertools.count()


def track(obj):
    _live[next(_live_n)] = obj


def _shutdown():
    for k in sorted(list(_live.keys()), reverse=True):
        o = _live.get(k)
        if o is not None:
            try:
                getattr(o, "_close_at_exit", o.close)()
            except Exception:
                pass
    if _lib is not None:
        _lib.mxp_log_set_callback(_LOG_FN(), None)


def set_log_level(level):
    """Library messages below `level` (a logging level) are not even
    formatted; the default is INFO, as the library's."""
    lvl = 0 if level <= logging.DEBUG else 1 if level <= logging.INFO else \
        2 if level <= logging.WARNING else 3
    lib().mxp_log_set_level(lvl)


def _fn(L, name, restype, *argtypes):
    f = getattr(L, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


def check_version(L, path):
    """Refuse a library of another ABI version than ABI_VERSION (raises
    LibraryVersionError naming both versions and the file)."""
    want = "this Python package (mixprec %s) needs libmixprec ABI version %d" % (
        VERSION, ABI_VERSION)
    fix = ("; rebuild libmixprec from the same source tree as the package, or point "
           "MIXPREC_LIB at a build of it")
    try:
        abi, ver = L.mxp_abi_version, L.mxp_version
    except AttributeError:
        raise LibraryVersionError(
            "%s has no mxp_abi_version(): it predates versioned libmixprec builds; %s%s"
            % (path, want, fix)) from None
    abi.restype, abi.argtypes = c_int, []
    ver.restype, ver.argtypes = c_char_p, []
    got = abi()
    if got != ABI_VERSION:
        raise LibraryVersionError(
            "%s is libmixprec %s with ABI version %d; %s%s"
            % (path, (ver() or b"?").decode("utf-8", "replace"), got, want, fix))


def _declare(L):
    P = c_void_p
    PP = ctypes.POINTER(c_void_p)
    E = ctypes.POINTER(CError)
    _fn(L, "mxp_status_name", c_char_p, c_int)
    _fn(L, "mxp_log_set_level", None, c_int)
    _fn(L, "mxp_config_builder_create", c_int, PP, E)
    _fn(L, "mxp_config_builder_destroy", None, P)
    _fn(L, "mxp_config_apply_file", c_int, P, c_char_p, E)
    _fn(L, "mxp_config_apply_env", c_int, P, P, E)
    _fn(L, "mxp_config_apply_override", c_int, P, c_char_p, E)
    _fn(L, "mxp_config_resolve", c_int, P, P, E)
    _fn(L, "mxp_run_resume_config", c_int, c_char_p, P, c_char_p, ctypes.c_size_t, E)
    _fn(L, "mxp_config_num_keys", c_int)
    _fn(L, "mxp_config_key_name", c_char_p, c_int)
    _fn(L, "mxp_config_key_help", c_char_p, c_int)
    _fn(L, "mxp_config_key_find", c_int, c_char_p)
    _fn(L, "mxp_config_key_value", c_int, P, c_int, c_char_p, ctypes.c_size_t)
    _fn(L, "mxp_config_source_name", c_char_p, c_int)
    _fn(L, "mxp_config_print", None, P, P)


def check(status, err, what=None):
    """Raise the exception for a failed call (status != 0) with the
    library's message from err."""
    if status == 0:
        return
    name = lib().mxp_status_name(status)
    name = name.decode() if name else str(status)
    msg = err.msg.decode("utf-8", "replace") if err is not None else ""
    if what and not msg:
        msg = what
    raise error_from(name, python_words(msg) or name)


def python_words(msg):
    """The library's message in Python's words: arrays passed from Python
    are the dataset the library labels "memory", and values set from Python
    reach the library as overrides, whose source it names "cli"."""
    if msg.startswith("memory: "):
        msg = "data arrays: " + msg[len("memory: "):]
    return msg.replace(" (cli)", " (set in Python)").replace("(cli)", "(set in Python)")


__all__ = ["lib", "lib_path", "candidates", "check", "has", "CError", "Error"]
