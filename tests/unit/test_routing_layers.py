"""The import layers of routing: vocab <- backends <- routing, never back.

Read from the source (every import statement, also those inside functions),
not from sys.modules: importing any torch_fl module runs torch_fl/__init__.py,
which imports routing itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torch_fl

pytestmark = pytest.mark.anyplatform

PACKAGE = Path(torch_fl.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every torch_fl module `path` imports, with `from torch_fl import x` as torch_fl.x."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m == "torch_fl" or m.startswith("torch_fl.")}


def modules_of(package: str) -> list[Path]:
    return sorted((PACKAGE / package).glob("*.py"))


def test_imported_modules_reads_every_form_of_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import torch_fl.routing.state\nfrom torch_fl import routing\nfrom torch_fl.vocab.ops import split\n"
        "def f():\n    from torch_fl.routing import planner\n"
    )
    found = imported_modules(src)
    assert {"torch_fl.routing.state", "torch_fl.routing", "torch_fl.routing.planner"} <= found
    assert "torch_fl.vocab.ops" in found


@pytest.mark.parametrize("path", modules_of("backends"), ids=lambda p: p.name)
def test_backends_do_not_import_routing(path):
    routing = sorted(m for m in imported_modules(path) if m == "torch_fl.routing" or m.startswith("torch_fl.routing."))
    assert routing == [], f"{path.name} imports {routing}; routing imports backends, so put what both need in vocab/"
    assert "torch_fl.routing" not in path.read_text(), f"{path.name} reaches torch_fl.routing through an attribute"


@pytest.mark.parametrize("path", modules_of("vocab"), ids=lambda p: p.name)
def test_vocab_is_a_leaf(path):
    others = sorted(m for m in imported_modules(path) if not m.startswith("torch_fl.vocab"))
    assert others == [], f"{path.name} imports {others}; torch_fl.vocab must import nothing else of torch_fl"
