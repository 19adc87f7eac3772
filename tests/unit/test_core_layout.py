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
# What each folder may include from the others: python/ -> ops/ -> route/ -> tensor/ -> runtime/, and
# python/ -> replay/ -> tensor/ -> runtime/.
MAY_INCLUDE = {
    "runtime": {"runtime"},
    "tensor": {"runtime", "tensor"},
    "replay": {"runtime", "tensor", "replay"},
    "route": {"runtime", "tensor", "route"},
    "ops": {"runtime", "tensor", "route", "ops"},
    "python": {"runtime", "tensor", "route", "ops", "replay", "python"},
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
def test_every_cpp_file_is_in_exactly_one_build_unit():
    units = {CSRC / "unity_route.cpp", CSRC / "unity_core.cpp", CSRC / "python" / "unity_python.cpp"}
    # included by their path from csrc/ (setup.py puts csrc/ on the include path)
    included = [CSRC / name for unit in units for name in INCLUDE.findall(unit.read_text())]
    parts = sorted(p for p in CSRC.rglob("*.cpp") if p not in units)
    assert sorted(set(included)) == parts and len(included) == len(parts)
    # the core's units hold nothing of the Python layer
    for unit in ("unity_route.cpp", "unity_core.cpp"):
        assert all(folder_of(CSRC / n) != "python" for n in INCLUDE.findall((CSRC / unit).read_text()))


def _registered_by_core_in_dispatch_dump() -> set[str]:
    """The operators whose PrivateUse1 kernel a csrc file registered, other than the native route
    (route/native_route.cpp) and Python routes (csrc/python/): what _dispatch_dump() shows."""
    found = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::") or not torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "PrivateUse1"
        ):
            continue
        for line in torch._C._dispatch_dump(qualified).splitlines():
            if line.startswith("PrivateUse1:"):
                if "torch_fl/csrc/" in line and "native_route.cpp" not in line and "csrc/python/" not in line:
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
