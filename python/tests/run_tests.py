"""Run the Python package's tests (CTest entry test_python).

Exit 77 (CTest: skipped) when NumPy is missing; else unittest's verdict.
Environment: PYTHONPATH=<repo>/python, MIXPREC_LIB=<build>/libmixprec.so,
MIXPREC_CLI=<build>/mixprec (set by CMakeLists.txt).
"""
import os
import sys
import unittest

try:
    import numpy  # noqa: F401
except ImportError:
    print("numpy is not importable: skipping the Python package tests")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py",
                                            top_level_dir=os.path.dirname(here))
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
