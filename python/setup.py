# SPDX-License-Identifier: Apache-2.0
"""Builds braid_torch, the torch.distributed backend "braid", against Braid's libnccl.so.2.

The build (CMake target braid-torch) runs it as

    BRAID_INCLUDE_DIR=<repo>/include BRAID_LIB_DIR=<build>/lib \\
        /usr/bin/python3 setup.py build --build-base <build>/python/tmp --build-lib <build>/python

Run by hand the same way; then PYTHONPATH=<build>/python. The extension finds
libnccl.so.2 through an rpath to BRAID_LIB_DIR (LD_LIBRARY_PATH can swap another in).
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
include_dir = os.environ.get("BRAID_INCLUDE_DIR", os.path.join(REPO, "include"))
lib_dir = os.path.abspath(os.environ.get("BRAID_LIB_DIR", os.path.join(REPO, "build", "lib")))

ext = CppExtension(
    "braid_torch._C",
    [os.path.join("braid_torch", "csrc", f) for f in ("braid_pg.cpp", "braid_coll.cpp")],
    include_dirs=[include_dir],
    library_dirs=[lib_dir],
    libraries=["nccl"],
    runtime_library_dirs=[lib_dir],
    # No debug information: it doubles the compile time of PyTorch's headers.
    extra_compile_args=["-O2", "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

setup(
    name="braid_torch",
    version="0.1.0",
    description="Braid as a torch.distributed backend for CPU tensors",
    packages=["braid_torch"],
    package_dir={"braid_torch": os.path.join(HERE, "braid_torch")},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
)
