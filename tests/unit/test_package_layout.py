"""The Python package's layout, drawn from its own imports (every import statement, also those inside
functions): the arrows between its folders are the ones written below, once; they form no circle; and no
module that `import torch_fl` loads imports the package back (they reach the device through the leaf
torch_fl._core). The C++ side has its own checks: tests/unit/test_core_layout.py."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import torch_fl

PACKAGE = pathlib.Path(torch_fl.__file__).parent

# What each part of the package may import of the others. "<package>" is torch_fl/__init__.py. Leaves
# first; the application layer (cli, conformance, __main__) sits above the package it runs.
MAY_IMPORT = {
    "_build_info": set(),
    "_loader": {"_build_info"},
    "_core": {"_loader"},
    "_import_hook": set(),
    "vocab": set(),
    "models": set(),
    "flagos": {"_core"},
    "replay": {"_core"},
    "backends": {"_core", "replay", "vocab"},
    "routing": {"_core", "backends", "flagos", "vocab"},
    "compile": {"_core", "_import_hook", "backends", "flagos", "routing", "vocab"},
    "distributed": {"_core", "_import_hook"},
    "integrations": {"_core", "_import_hook"},
    "multiprocessing": {"_core"},
    "native_backward": set(),
    "calibration": {"_core", "backends", "models", "routing", "vocab"},
    "<package>": {"_core", "_loader", "flagos", "routing", "compile", "distributed", "integrations",
                  "multiprocessing", "native_backward", "calibration"},
    "conformance": {"<package>", "_core", "backends", "routing", "vocab"},
    "cli": {"<package>", "_core", "backends", "calibration", "models", "routing", "vocab", "conformance"},
    "__main__": {"cli"},
}  # fmt: skip
APPLICATION = {"cli", "conformance", "__main__"}


def part_of(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return "<package>" if rel.name == "__init__.py" else rel.stem


def imported_parts(path: pathlib.Path) -> set[str]:
    """The parts of torch_fl that `path` imports ('<package>' for names of torch_fl/__init__.py itself)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torch_fl":
                names = [f"torch_fl.{a.name}" for a in node.names]
            else:
                names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "torch_fl":
                continue
            target = parts[1] if len(parts) > 1 else "<package>"
            # `from torch_fl import X` where X is a name of __init__.py, not a submodule, reaches the package.
            if not ((PACKAGE / target).is_dir() or (PACKAGE / f"{target}.py").exists() or target == "_C"):
                target = "<package>"
            found.add(target)
    return found - {"_C"}


def graph() -> dict[str, set[str]]:
    arrows: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        src = part_of(path)
        arrows.setdefault(src, set()).update(imported_parts(path) - {src})
    return arrows


def test_every_arrow_is_allowed():
    unknown = sorted(set(graph()) - set(MAY_IMPORT))
    assert not unknown, f"add these parts of torch_fl to MAY_IMPORT: {unknown}"
    wrong = {src: sorted(dst - MAY_IMPORT[src]) for src, dst in graph().items() if dst - MAY_IMPORT[src]}
    assert not wrong, f"imports against the layout (part -> what it may not import): {wrong}"


def test_the_allowed_arrows_make_no_circle():
    below = {src: dst - APPLICATION for src, dst in MAY_IMPORT.items() if src not in APPLICATION}
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, "circle: " + " -> ".join((*path, part))
        if part in done:
            return
        for nxt in sorted(below.get(part, ())):
            visit(nxt, (*path, part))
        done.add(part)

    for part in sorted(below):
        visit(part, ())


def test_nothing_import_torch_fl_loads_imports_the_package_back():
    code = "import sys, torch_fl; print('\\n'.join(m for m in sys.modules if m.startswith('torch_fl')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in loaded:
        if name in ("torch_fl", "torch_fl._C", "torch_fl._build_info"):
            continue
        path = PACKAGE.parent.joinpath(*name.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if path.exists() and "<package>" in imported_parts(path):
            offenders.append(name)
    assert not offenders, f"modules below torch_fl/__init__.py that import the package back: {offenders}"


@pytest.mark.parametrize("part", ["_core", "_loader", "_import_hook"])
def test_leaves_import_nothing_upward(part):
    path = PACKAGE / f"{part}.py"
    assert imported_parts(path) <= MAY_IMPORT[part], imported_parts(path)
