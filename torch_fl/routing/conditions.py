"""The brackets of a routing rule: a dtype, a size condition (`numel>=N`) or an argument condition (`exponent=2`).

    mm[bfloat16, numel>=1048576] = flaggems
    pow.Tensor_Scalar[float32, exponent=2] = cuda

How one item is read (parse_condition) and written back (format_value), and how an argument condition compares
with a call's value (values_equal: the core's ValueClass in csrc/python/py_route.h makes the same test).
"""

from __future__ import annotations

import math
import re

import torch

from torch_fl.vocab.dtypes import parse_dtype
from torch_fl.vocab.errors import shorten

#: the size condition of a rule: `numel>=N`, N the first tensor argument's element count
SIZE_KEY = "numel"
_SIZE = re.compile(r"^(?P<key>[A-Za-z_]\w*)\s*(?P<cmp>[<>=!]=?)\s*(?P<num>.*)$")


#: an argument condition's value: an integer, a finite float, or a boolean
_INT = re.compile(r"^[-+]?\d+$")
_BOOLS = {"true": True, "false": False, "True": True, "False": False}

#: what parse_condition returns: a dtype, a size threshold, an argument condition (name, value) or a problem
Condition = tuple[torch.dtype | None, int | None, tuple[str, int | float | bool] | None, str | None]


def parse_value(text: str) -> int | float | bool | None:
    """An argument condition's value (`2`, `-0.5`, `1e-3`, `true`), None for anything else."""
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.match(text):
        return int(text)
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def format_value(v: int | float | bool) -> str:
    return str(v).lower() if isinstance(v, bool) else repr(v)


def parse_condition(text: str) -> Condition:
    """One item of a rule's brackets: (dtype, None, None, None), (None, min_numel, None, None),
    (None, None, (argument, value), None) or (None, None, None, problem)."""
    item = text.strip()
    shown = shorten(item)
    m = _SIZE.match(item)
    if m is None:
        try:
            return parse_dtype(item), None, None, None
        except ValueError as e:
            return None, None, None, str(e)
    key, cmp, num = m.group("key"), m.group("cmp"), m.group("num").strip()
    if key != SIZE_KEY and cmp == "=":
        value = parse_value(num)
        if value is None:
            return (
                None,
                None,
                None,
                (
                    f"bad value '{shorten(num)}' in '{shown}': an argument condition compares with a number or "
                    f"true/false, e.g. pow.Tensor_Scalar[exponent=2] = cuda"
                ),
            )
        return None, None, (key, value), None
    if key != SIZE_KEY or cmp != ">=":
        return (
            None,
            None,
            None,
            (
                f"unknown condition '{shown}': the size condition is {SIZE_KEY}>=N (calls whose first tensor "
                f"argument has at least N elements), e.g. mm[bfloat16, {SIZE_KEY}>=1048576] = flaggems; an "
                "argument condition is NAME=VALUE, e.g. pow.Tensor_Scalar[exponent=2] = cuda"
            ),
        )
    if not num.isdigit():
        return (
            None,
            None,
            None,
            f"bad number '{shorten(num)}' in '{shown}': write a whole number of elements, e.g. {SIZE_KEY}>=65536",
        )
    if int(num) < 1:
        return None, None, None, f"'{shown}' holds for every call: drop the condition, or give a threshold of 1 or more"
    if int(num) >= 2**63:
        # element counts are int64: a larger threshold could never hold
        return None, None, None, f"'{shown}' can never hold: give a threshold below 2**63 elements, or drop the rule"
    return None, int(num), None, None


#: Rule.applies' `value` for a call whose condition argument has a value no argument rule names
NO_VALUE = object()


def values_equal(a: object, b: object) -> bool:
    """An argument condition's test, as the core makes it: numbers (and booleans, as 0 and 1) compare by value,
    so `exponent=2` holds for 2 and 2.0; anything else (None, a complex number, NO_VALUE) matches nothing."""
    ok = (int, float, bool)
    return isinstance(a, ok) and isinstance(b, ok) and a == b
