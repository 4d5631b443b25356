# SPDX-License-Identifier: MIT
"""The wheel installs into a fresh virtual environment (no system packages, nothing else
installed) and runs there, from outside the source tree, without the build tree."""
import os
import subprocess
import sys
import venv

import pytest

WHEEL = os.environ.get("QKV_WHEEL")


@pytest.mark.skipif(not WHEEL, reason="QKV_WHEEL names no wheel (tests/python.sh sets it)")
def test_fresh_venv(tmp_path, marian_model):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", WHEEL],
                   check=True)
    code = ("import qkv, sys; t = qkv.Translator(sys.argv[1]); "
            "print(qkv.__file__); print(t.translate_batch(['Hello world.'])[0].hypotheses[0])")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LD_"))}
    r = subprocess.run([py, "-c", code, marian_model], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    where, text = r.stdout.splitlines()
    assert where.startswith(str(env_dir))
    import qkv
    assert text == qkv.Translator(marian_model).translate_batch(["Hello world."])[0].hypotheses[0]
    # nothing of the build tree is needed: the extension holds libqkv itself
    so = [f for f in os.listdir(os.path.dirname(where)) if f.startswith("_qkv")][0]
    ldd = subprocess.run(["ldd", os.path.join(os.path.dirname(where), so)], capture_output=True,
                         text=True).stdout
    assert "libqkv" not in ldd and "not found" not in ldd, ldd
    assert "openblas-openmp" in ldd  # the OpenMP build, through the RUNPATH
    assert so.endswith(".abi3.so")
    # a numpy-free environment imports qkv (qkv.ops alone needs numpy)
    r = subprocess.run([py, "-c", "import qkv; qkv.ops"], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode != 0 and "numpy" in r.stderr


def test_stubs_cover_the_api():
    import qkv
    here = os.path.dirname(qkv.__file__)
    stubs = open(os.path.join(here, "__init__.pyi")).read()
    for name in qkv.__all__:
        if name != "__version__":
            assert name in stubs, name
    assert os.path.exists(os.path.join(here, "py.typed"))
    for name in qkv.__all__:
        obj = getattr(qkv, name)
        if callable(obj):
            assert obj.__doc__, name
