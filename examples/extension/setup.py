"""Builds the example accel extension (docs/extensions.md): `make example-extension`.

ACCEL_EXAMPLE_CUDA=1 builds its CUDA variant (ops_cuda.cu, for the CUDA runtime)
with nvcc; otherwise the C++ variant (for the host runtime).
"""

import os

from setuptools import setup

from torch_accel.utils.cpp_extension import AccelExtension, BuildExtension

HERE = os.path.dirname(os.path.abspath(__file__))
cuda = os.environ.get("ACCEL_EXAMPLE_CUDA", "0") == "1"
sources = [os.path.join(HERE, "ops.cpp")] + ([os.path.join(HERE, "ops_cuda.cu")] if cuda else [])

setup(
    name="accel-example",
    ext_modules=[AccelExtension("accel_example", sources, cuda=cuda, extra_compile_args={"cxx": ["-O2"]})],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
