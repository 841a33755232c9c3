"""The nightshift package as built from the tree (stubs generated from proto/): mypy --strict
passes on its own code (the generated nightshift.v1 is typed by its .pyi stubs), and every
public module, class, function, method and property has a docstring.

Usage: typing_test.py SOURCE_DIR [MYPY_CACHE_DIR]  (a cache kept between runs makes reruns fast)
"""
import importlib
import inspect
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.abspath(sys.argv.pop(1))
CACHE_DIR = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import build_package  # noqa: E402

TMP = tempfile.TemporaryDirectory(prefix="nightshift-typing-test-")
SITE = build_package(SOURCE_DIR, TMP.name)
MODULES = ["nightshift", "nightshift.client", "nightshift.errors", "nightshift.settings", "nightshift.metrics",
           "nightshift.download", "nightshift.modules", "nightshift.text"]


def undocumented(module):
    """The public names defined in `module` (and their public members) without a docstring."""
    missing = [] if module.__doc__ else [module.__name__]
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if not inspect.getdoc(value):
            missing.append(f"{module.__name__}.{name}")
        if inspect.isclass(value):
            for member, attr in vars(value).items():
                public = not member.startswith("_")
                if public and (inspect.isfunction(attr) or isinstance(attr, property)) and not attr.__doc__:
                    missing.append(f"{module.__name__}.{name}.{member}")
    return missing


class TypingTest(unittest.TestCase):
    def test_mypy_strict_passes(self):
        self.assertTrue(os.path.exists(os.path.join(SITE, "nightshift", "py.typed")))
        self.assertTrue(os.path.exists(os.path.join(SITE, "nightshift", "v1", "jobs_pb2_grpc.pyi")))
        run = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                              os.path.join(SOURCE_DIR, "python", "pyproject.toml"), "--strict",
                              "--cache-dir", CACHE_DIR or os.path.join(TMP.name, "mypy-cache"), "-p", "nightshift"],
                             cwd=SITE, capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("Success", run.stdout)

    def test_every_public_name_has_a_docstring(self):
        sys.path.insert(0, SITE)
        missing = [m for name in MODULES for m in undocumented(importlib.import_module(name))]
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
