"""Build of torch_fl: the C++ core is compiled against the installed torch.

Install with `pip install --no-build-isolation -e .` (or without -e): the core
must be built against the torch that will run it, so the build uses the torch
already installed rather than one pip would fetch into an isolated build.
"""

import os
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pragma: no cover - exercised only on a broken setup
    sys.exit(
        "torch_fl builds its C++ core against the installed PyTorch, and none was found.\n"
        "Install torch first, then build without isolation:\n"
        "    pip install torch\n"
        "    pip install --no-build-isolation -e ."
    )

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("torch_fl", "csrc")
# One translation unit per folder of the core, <folder>/unity_<folder>.cpp
# including the folder's .cpp files (torch_fl/csrc/README.md, Build units).
# Listed in the order they take longest to compile: ninja starts them so.
FOLDERS = ["python", "route", "ops", "runtime", "replay", "tensor", "autograd"]
UNITS = [os.path.join(CSRC, folder, f"unity_{folder}.cpp") for folder in FOLDERS]


def write_build_info():
    """Record the torch the core was compiled against; import checks it."""
    path = os.path.join(HERE, "torch_fl", "_build_info.py")
    text = f'"""Written by setup.py at build time."""\n\nTORCH_VERSION = "{torch.__version__}"\n'
    with open(path, "w") as f:
        f.write(text)


write_build_info()

setup(
    ext_modules=[
        CppExtension(
            name="torch_fl._C",
            sources=UNITS,
            include_dirs=[os.path.join(HERE, CSRC)],
            # Hidden visibility: calls between the core's own functions bind
            # directly instead of through the PLT (an exported function may be
            # interposed, so each call would take an extra jump through a stub
            # on another cache line), and -fno-plt calls into libtorch through
            # the GOT without a stub. Only PyInit__C is exported (pybind11).
            # -g0 drops the debug information Python's own flags ask for: it
            # changes no generated code and was a large part of the compile
            # time (callgrind still names functions from the symbol table).
            extra_compile_args=["-O2", "-g0", "-Wno-unused-parameter", "-fvisibility=hidden", "-fno-plt"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
