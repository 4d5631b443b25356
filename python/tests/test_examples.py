# SPDX-License-Identifier: MIT
"""The examples run: translating a file with an imported Marian model (the translations of
`qkv translate`), and d2l's example trained from Python for a few epochs."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PARITY, run_qkv

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def test_translate_a_file_with_marian(tmp_path):
    hf = tmp_path / "opus-mt"
    shutil.copytree(os.path.join(PARITY, "marian_shared_swish"), hf)
    src = tmp_path / "in.txt"
    src.write_text("Hello world.\nThe quick brown fox.\n\nA B C\n")
    out = tmp_path / "out.txt"
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "python_translate.py"), str(hf),
                        str(src), "--out", str(out), "--beam", "2", "--ref", str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "BLEU|nrefs:1" in r.stderr
    cli = run_qkv("translate", "--model", f"{hf}.qkv", "--input", src, "--beam", 2)
    assert out.read_text() == cli


def test_d2l_from_python(tmp_path):
    data = os.path.join(os.environ.get("QKV_DATA_DIR", os.path.join(EXAMPLES, "..", "..",
                                                                     "shared", "data")),
                        "fra-eng", "fra.txt")
    if not os.path.exists(data):
        pytest.skip(f"no {data}")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "python_d2l.py"), "--data", data,
                        "--out", str(tmp_path / "m"), "--epochs", "2"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "epoch 2/2" in r.stdout and r.stdout.count(" => ") == 4
    assert (tmp_path / "m" / "model.safetensors").exists()
