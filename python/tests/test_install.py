"""The package installs offline with pip and finds the library through
$MIXPREC_LIB, or installed (cmake --install) beside the mixprec CLI on PATH;
without either, the error names every place it looked. Without NumPy the
import error names the interpreter and the Python to use."""
import ctypes
import os
import shutil
import subprocess
import sys
import unittest

from .util import TmpDirCase

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def have_pip():
    return subprocess.run([sys.executable, "-m", "pip", "--version"],
                          capture_output=True).returncode == 0


def system_library():
    """True when a libmixprec is installed where the package looks by itself."""
    from mixprec import _lib
    return any(p for _, p in _lib._installed())


class InstallTest(TmpDirCase):
    def run_py(self, code, env):
        e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MIXPREC_LIB")}
        e.update(env)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=e, cwd=self.tmp)

    @unittest.skipUnless(have_pip(), "pip is not installed (Debian python3-pip)")
    def test_pip_install_offline(self):
        target = self.path("site")
        # from a copy: setuptools writes build/ and *.egg-info beside the source
        src = self.path("src")
        shutil.copytree(PKG, src, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", "tests"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                            "--no-index", "--no-deps", "--target", target, src],
                           capture_output=True, text=True, cwd=self.tmp,
                           env=dict(os.environ, PIP_NO_CACHE_DIR="1"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.run_py("import mixprec, mixprec._lib as l; print(mixprec.__file__);"
                        "print(l.lib_path()); print(mixprec.Config()['training.precision'])",
                        {"PYTHONPATH": target, "MIXPREC_LIB": os.environ["MIXPREC_LIB"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        f, lib, prec = r.stdout.split()
        self.assertTrue(f.startswith(target), f)
        self.assertEqual(os.path.realpath(lib), os.path.realpath(os.environ["MIXPREC_LIB"]))
        self.assertEqual(prec, "fp32")
        # installed elsewhere: no build tree beside it, no $MIXPREC_LIB, no .pc,
        # no mixprec on PATH (a library installed system-wide would be found)
        if system_library():
            return
        r = self.run_py("import mixprec\nmixprec.Config()",
                        {"PYTHONPATH": target, "MIXPREC_LIB": self.path("nothing"),
                         "PKG_CONFIG_PATH": self.tmp, "PKG_CONFIG_LIBDIR": self.tmp,
                         "PATH": "/usr/bin:/bin"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        for place in ("$MIXPREC_LIB=" + self.path("nothing"), "pkg-config",
                      "build tree " + os.path.join(self.tmp, "build")):
            self.assertIn(place, r.stderr)

    @unittest.skipUnless(have_pip(), "pip is not installed (Debian python3-pip)")
    @unittest.skipUnless(shutil.which("cmake"), "no cmake to install the build with")
    def test_installed_package_finds_installed_library(self):
        """Issue 30 item 10: `cmake --install` + the pip-installed package find
        each other with no MIXPREC_LIB and no pkg-config (before: LibraryNotFound)."""
        build = os.path.dirname(os.path.realpath(os.environ["MIXPREC_LIB"]))
        prefix, target = self.path("prefix"), self.path("site")
        r = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        src = self.path("src")
        shutil.copytree(PKG, src, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", "tests"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                            "--no-index", "--no-deps", "--target", target, src],
                           capture_output=True, text=True, cwd=self.tmp,
                           env=dict(os.environ, PIP_NO_CACHE_DIR="1"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # the user's shell after the install: the CLI on PATH, nothing else set
        r = self.run_py("import mixprec, mixprec._lib as l; print(l.lib_path());"
                        "print(mixprec.Config()['training.precision'])",
                        {"PYTHONPATH": target, "PATH": os.path.join(prefix, "bin") +
                         ":/usr/bin:/bin", "PKG_CONFIG_PATH": self.tmp,
                         "PKG_CONFIG_LIBDIR": self.tmp})
        self.assertEqual(r.returncode, 0, r.stderr)
        lib, prec = r.stdout.split()
        self.assertTrue(os.path.realpath(lib).startswith(os.path.realpath(prefix) + os.sep),
                        lib)
        self.assertEqual(prec, "fp32")

    def test_missing_numpy_names_the_interpreter_and_the_fix(self):
        """Issue 30 item 10: a python3 without NumPy (pyenv first on PATH) gets
        a message naming it and Debian's /usr/bin/python3, not a bare
        "No module named 'numpy'"."""
        fake = self.path("fake")
        os.makedirs(os.path.join(fake, "numpy"))
        with open(os.path.join(fake, "numpy", "__init__.py"), "w") as f:
            f.write("raise ImportError(\"No module named 'numpy'\")\n")
        r = self.run_py("import mixprec", {"PYTHONPATH": fake + ":" + PKG})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("mixprec needs NumPy", r.stderr)
        self.assertIn(sys.executable, r.stderr)
        self.assertIn("/usr/bin/python3", r.stderr)

    def test_library_dir_in_mixprec_lib(self):
        r = self.run_py("import mixprec._lib as l; print(l.lib_path())",
                        {"PYTHONPATH": PKG,
                         "MIXPREC_LIB": os.path.dirname(os.environ["MIXPREC_LIB"])})
        self.assertEqual(r.returncode, 0, r.stderr)
        from mixprec import _lib
        self.assertTrue(r.stdout.strip().endswith(("libmixprec.so",
                                                   "libmixprec.so.%d" % _lib.ABI_VERSION)))


INCLUDE = os.path.join(os.path.dirname(PKG), "include")


def header_define(name):
    """The value of #define NAME in include/mixprec/api.h (the oracle: the
    header text, not the library)."""
    with open(os.path.join(INCLUDE, "mixprec", "api.h")) as f:
        for line in f:
            parts = line.split()
            if parts[:2] == ["#define", name]:
                return parts[2].strip('"')
    raise AssertionError("api.h defines no " + name)


class VersionTest(TmpDirCase):
    """The package loads only a library of its own ABI version, and says
    which versions differ."""

    def run_py(self, code, env):
        return InstallTest.run_py(self, code, env)

    def fake_lib(self, body):
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler to build a stand-in library")
        src, so = self.path("fake.c"), self.path("libmixprec.so")
        with open(src, "w") as f:
            f.write(body)
        r = subprocess.run([cc, "-shared", "-fPIC", "-o", so, src], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return so

    def test_the_library_is_the_headers_version(self):
        if not os.path.isdir(INCLUDE):
            self.skipTest("no include/ beside python/")
        import mixprec
        from mixprec import _lib
        abi = int(header_define("MIXPREC_ABI_VERSION"))
        ver = header_define("MIXPREC_VERSION_STRING")
        self.assertEqual(_lib.ABI_VERSION, abi)
        self.assertEqual(mixprec.__version__, ver)
        L = _lib.lib()
        self.assertEqual(L.mxp_abi_version(), abi)
        self.assertEqual(L.mxp_version(), ver.encode())
        major, minor, patch = (int(x) for x in ver.split("."))
        L.mxp_version_number.restype = ctypes.c_int
        self.assertEqual(L.mxp_version_number(), major * 10000 + minor * 100 + patch)

    def test_another_abi_version_is_refused(self):
        from mixprec import _lib
        other = _lib.ABI_VERSION + 1
        so = self.fake_lib("int mxp_abi_version(void) { return %d; }\n"
                           "const char *mxp_version(void) { return \"9.8.7\"; }\n" % other)
        r = self.run_py("import mixprec; mixprec.Config()", {"PYTHONPATH": PKG,
                                                             "MIXPREC_LIB": so})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryVersionError", r.stderr)
        self.assertIn("%s is libmixprec 9.8.7 with ABI version %d" % (so, other), r.stderr)
        self.assertIn("needs libmixprec ABI version %d" % _lib.ABI_VERSION, r.stderr)

    def test_an_unversioned_library_is_refused(self):
        so = self.fake_lib("int mxp_run_create(void) { return 0; }\n")
        r = self.run_py("import mixprec; mixprec.Config()", {"PYTHONPATH": PKG,
                                                             "MIXPREC_LIB": so})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryVersionError", r.stderr)
        self.assertIn("%s has no mxp_abi_version()" % so, r.stderr)


if __name__ == "__main__":
    unittest.main()
