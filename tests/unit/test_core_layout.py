"""The C++ core's layout (torch_fl/csrc): folders that depend one way, no Python below csrc/python/, no
file over 500 lines, every file in a build unit; and torch_fl._C._core_ops(), the operators the core
implements itself."""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

import torch_fl

CSRC = pathlib.Path(torch_fl.__file__).parent / "csrc"
# What each folder may include from the others: python/ -> ops/ -> route/ -> tensor/ -> runtime/,
# python/ -> autograd/ -> route/, and python/ -> replay/ -> tensor/.
MAY_INCLUDE = {
    "runtime": {"runtime"},
    "tensor": {"runtime", "tensor"},
    "replay": {"runtime", "tensor", "replay"},
    "route": {"runtime", "tensor", "route"},
    "autograd": {"runtime", "tensor", "route", "autograd"},
    "ops": {"runtime", "tensor", "route", "ops"},
    "python": {"runtime", "tensor", "route", "autograd", "ops", "replay", "python"},
}
PYTHON_HEADER = re.compile(
    r'#\s*include\s*[<"](Python\.h|pybind11/|torch/extension\.h|torch/python\.h|'
    r"torch/csrc/(utils/pybind|utils/python_|autograd/python_|jit/python/|Dtype\.h|python_headers\.h))"
)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def sources():
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".h", ".cpp"))


def folder_of(path: pathlib.Path) -> str:
    return path.relative_to(CSRC).parts[0] if len(path.relative_to(CSRC).parts) > 1 else ""


@pytest.mark.anyplatform
def test_the_core_has_its_folders_each_with_a_readme():
    assert {p.name for p in CSRC.iterdir() if p.is_dir() and not p.name.startswith("__")} == set(MAY_INCLUDE)
    for folder in MAY_INCLUDE:
        assert (CSRC / folder / "README.md").is_file(), f"csrc/{folder}/ has no README.md"


@pytest.mark.anyplatform
def test_no_python_header_below_csrc_python():
    offenders = [
        str(p.relative_to(CSRC)) for p in sources() if folder_of(p) != "python" and PYTHON_HEADER.search(p.read_text())
    ]
    assert offenders == [], f"these files include Python or pybind11 headers outside csrc/python/: {offenders}"


@pytest.mark.anyplatform
def test_folders_include_only_the_folders_below_them():
    wrong = []
    for p in sources():
        folder = folder_of(p)
        if folder not in MAY_INCLUDE:
            continue
        for included in INCLUDE.findall(p.read_text()):
            target = included.split("/")[0]
            if target in MAY_INCLUDE and target not in MAY_INCLUDE[folder]:
                wrong.append(f"{p.relative_to(CSRC)} includes {included}")
    assert wrong == []


@pytest.mark.anyplatform
def test_no_csrc_file_over_500_lines():
    long = {str(p.relative_to(CSRC)): n for p in sources() if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


@pytest.mark.anyplatform
def test_every_cpp_file_is_in_its_folders_build_unit():
    # one unit per folder, <folder>/unity_<folder>.cpp, including exactly the folder's .cpp files
    units = {CSRC / folder / f"unity_{folder}.cpp" for folder in MAY_INCLUDE}
    assert all(u.is_file() for u in units)
    assert sorted(CSRC.glob("**/unity_*.cpp")) == sorted(units)
    for unit in units:
        # included by their path from csrc/ (setup.py puts csrc/ on the include path)
        included = [CSRC / name for name in INCLUDE.findall(unit.read_text())]
        own = sorted(p for p in unit.parent.glob("*.cpp") if p != unit)
        assert sorted(set(included)) == own and len(included) == len(own), f"{unit.relative_to(CSRC)}"
    setup = CSRC.parent.parent / "setup.py"  # a source checkout's (an installed package has none)
    if setup.is_file():
        assert all(f'"{folder}"' in setup.read_text() for folder in MAY_INCLUDE), "setup.py's FOLDERS lists each"


def _registered_by_core_in_dispatch_dump() -> set[str]:
    """The operators whose PrivateUse1 kernel a csrc file registered, other than the native route
    (registered by route/register.cpp) and Python routes (csrc/python/): what _dispatch_dump() shows."""
    found = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::") or not torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "PrivateUse1"
        ):
            continue
        for line in torch._C._dispatch_dump(qualified).splitlines():
            if line.startswith("PrivateUse1:"):
                if "torch_fl/csrc/" in line and "csrc/route/register.cpp" not in line and "csrc/python/" not in line:
                    found.add(qualified.removeprefix("aten::"))
    return found


@pytest.mark.anyplatform
def test_core_ops_names_the_metadata_operations_and_not_routed_ones():
    core = torch_fl._C._core_ops()
    assert "empty.memory_format" in core and "view" in core and "set_.source_Storage" in core
    assert "add.Tensor" not in core and "mm" not in core
    assert len(core) == len(set(core))


@pytest.mark.anyplatform
def test_core_ops_agrees_with_the_dispatch_dump():
    assert set(torch_fl._C._core_ops()) == _registered_by_core_in_dispatch_dump()
