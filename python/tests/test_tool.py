"""The simil command that comes with the package: python -m simil, and the
installed simil script, run the same tool."""
import os
import shutil
import subprocess
import sys

import numpy as np

import simil


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_python_m_simil(tmp_path):
    r = run(sys.executable, "-m", "simil", "--help")
    assert r.returncode == 0 and "usage: simil COMMAND" in r.stdout, r.stderr
    simil.write(tmp_path / "base.npy", np.random.default_rng(0).random((50, 4), np.float32))
    r = run(sys.executable, "-m", "simil", "build", "--data", str(tmp_path / "base.npy"),
            "--index", "Flat", "--device", "cpu", "--out", str(tmp_path / "flat.simil"))
    assert r.returncode == 0, r.stderr
    assert simil.load(tmp_path / "flat.simil", device="cpu").ntotal == 50
    r = run(sys.executable, "-m", "simil", "build", "--bogus")
    assert r.returncode == 2 and "--bogus" in r.stderr


def test_simil_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "simil")
    assert os.access(script, os.X_OK) or shutil.which("simil"), "no simil script beside python"
    r = run(script if os.access(script, os.X_OK) else "simil", "info", "--help")
    assert r.returncode == 0 and "usage: simil info" in r.stdout, r.stderr
