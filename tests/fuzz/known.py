"""The differences between flagos and the CPU the fuzzer knows about: each names its strict-xfail regression
test (tests/integration/test_fuzz_regressions.py), so that a run reports it as known and goes on to find others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.fuzz.difference import Diff
from tests.fuzz.runner import Record
from tests.fuzz.steps import Step


@dataclass(frozen=True)
class Known:
    """A difference the fuzzer knows: `name`, the regression test that reproduces it (a strict xfail until
    it is fixed) and `matches(program, diff, want, got)`, which recognises it as a program's first
    difference (the reference run made with calls=True)."""

    name: str
    test: str
    matches: Callable[[list[Step], Diff, list[Record], list[Record]], bool]

    def __post_init__(self):
        # checked where an entry is made: the test it names exists and is a strict xfail
        import ast
        import pathlib

        path, name = self.test.split("::")
        tree = ast.parse(pathlib.Path(__file__).parents[2].joinpath(path).read_text())
        test = next((f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == name), None)
        assert test is not None, f"{self.test} does not exist"
        marks = [ast.unparse(d) for d in test.decorator_list]
        assert any("xfail" in m and "strict=True" in m for m in marks), f"{self.test} is not a strict xfail"


KNOWN: tuple[Known, ...] = ()  # none open


def known(program: list[Step], diff: Diff, want: list[Record], got: list[Record]) -> Known | None:
    """The known issue `diff` is, or None."""
    return next((k for k in KNOWN if k.matches(program, diff, want, got)), None)
