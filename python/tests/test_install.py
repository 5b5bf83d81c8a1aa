"""The package installs offline with pip and finds the library through
$MIXPREC_LIB; without it, the error names every place it looked."""
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
        # installed elsewhere: no build tree beside it, no $MIXPREC_LIB, no .pc
        r = self.run_py("import mixprec\nmixprec.Config()",
                        {"PYTHONPATH": target, "MIXPREC_LIB": self.path("nothing"),
                         "PKG_CONFIG_PATH": self.tmp, "PKG_CONFIG_LIBDIR": self.tmp})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        for place in ("$MIXPREC_LIB=" + self.path("nothing"), "pkg-config",
                      "build tree " + os.path.join(self.tmp, "build")):
            self.assertIn(place, r.stderr)

    def test_library_dir_in_mixprec_lib(self):
        r = self.run_py("import mixprec._lib as l; print(l.lib_path())",
                        {"PYTHONPATH": PKG,
                         "MIXPREC_LIB": os.path.dirname(os.environ["MIXPREC_LIB"])})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip().endswith(("libmixprec.so", "libmixprec.so.0")))


if __name__ == "__main__":
    unittest.main()
