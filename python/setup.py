# SPDX-License-Identifier: MIT
"""Builds qkv's extension module, qkv._qkv, over the static libqkv.

Why setuptools: the library has one build, the repository's Makefile; the extension is a few
C files over its public API. setuptools compiles those against CPython's limited API and tags
the wheel abi3 (one wheel for Python 3.11 and later) with nothing more than this file, where
meson-python or scikit-build-core would want the library's build rewritten in their language.

The extension links build/libqkv.a (made here with `make`, -fPIC like every object of the
library), so the wheel runs without the build tree. libqkv's own dependencies stay shared
libraries from the system, as for the qkv command: OpenBLAS's OpenMP build (found through a
RUNPATH to its directory, as the Makefile links the command), SentencePiece, utf8proc, cJSON
and zlib (the figures' libpng and FreeType are libqkv-viz's, which the package does not use).
QKV_ROOT names the repository when this file is not in its python/.
"""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("QKV_ROOT", os.path.dirname(HERE))
PKGS = ["openblas", "libcjson", "sentencepiece", "libutf8proc", "zlib"]  # the Makefile's PKGS
LIMITED_API = 0x030B0000  # Python 3.11: the buffer protocol joined the limited API there


def run(cmd, **kw):
    print(" ".join(shlex.quote(c) for c in cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def pkg_config(*args):
    """pkg-config's answer with OpenBLAS's OpenMP build first, as the Makefile asks it."""
    multiarch = subprocess.run(["cc", "-print-multiarch"], capture_output=True, text=True,
                               check=True).stdout.strip()
    env = dict(os.environ)
    pc = f"/usr/lib/{multiarch}/openblas-openmp/pkgconfig"
    env["PKG_CONFIG_PATH"] = pc + (":" + env["PKG_CONFIG_PATH"] if env.get("PKG_CONFIG_PATH") else "")
    out = subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"qkv: pkg-config does not find {' '.join(PKGS)}: run `make deps` in {ROOT} "
                 f"(scripts/install-deps.sh)\n{out.stderr}")
    return out.stdout.strip()


class BuildWithLibrary(build_ext):
    """Builds build/libqkv.a with the repository's Makefile, then the extension over it."""

    def build_extensions(self):
        if not os.path.isfile(os.path.join(ROOT, "include", "qkv.h")):
            sys.exit(f"qkv: {ROOT} is not the qkv repository (no include/qkv.h); set QKV_ROOT")
        jobs = os.environ.get("QKV_MAKE_JOBS", "2")
        run(["make", "-C", ROOT, f"-j{jobs}", "build/libqkv.a"])
        openblas_dir = pkg_config("--variable=libdir", "openblas").rstrip("/")
        for ext in self.extensions:
            ext.include_dirs += [os.path.join(ROOT, "include")]
            ext.extra_compile_args += shlex.split(pkg_config("--cflags", *PKGS))
            # libqkv.a whole, its symbols kept inside the module (only PyInit__qkv leaves it)
            ext.extra_link_args += [os.path.join(ROOT, "build", "libqkv.a"),
                                    "-Wl,--exclude-libs,ALL",
                                    f"-Wl,-rpath,{openblas_dir}",
                                    *shlex.split(pkg_config("--libs", *PKGS)),
                                    "-lstdc++", "-fopenmp", "-lm"]
            ext.depends += [os.path.join(ROOT, "build", "libqkv.a")]
        super().build_extensions()


SOURCES = sorted(os.path.join("src", f) for f in os.listdir(os.path.join(HERE, "src"))
                 if f.endswith(".c"))

setup(
    ext_modules=[Extension(
        "qkv._qkv",
        sources=SOURCES,
        depends=[os.path.join("src", "module.h")],
        define_macros=[("Py_LIMITED_API", hex(LIMITED_API))],
        py_limited_api=True,
        extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror=implicit-function-declaration",
                            "-fopenmp", "-D_POSIX_C_SOURCE=200809L"],
    )],
    cmdclass={"build_ext": BuildWithLibrary},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
