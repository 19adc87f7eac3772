"""Shared routing test fixtures: isolated routing state and a fake flag_gems.

The fake has the shape FlagGems 5.0.2 uses to register its kernels: a
`_FULL_CONFIG` tuple of (aten overload, function[, condition]) entries and an
`enable(lib=...)` that calls `lib.impl(op, fn, "CUDA")` for each enabled one.
Its functions compute with torch on the native (here: CPU) aliases they get.
"""

from __future__ import annotations

import sys
import types
from array import array

import pytest
import torch

import torch_fl
from torch_fl.backends import flaggems
from torch_fl.routing import planner, state
from torch_fl.routing.types import CoreTarget


def make_fake_flag_gems(calls: list | None = None):
    calls = [] if calls is None else calls

    def add(A, B, *, alpha=1):
        calls.append(("add", A.device.type, A.dtype))
        if A.dtype == torch.float64:
            raise ValueError("fake FlagGems has no float64 add")
        return torch.add(A, B, alpha=alpha)

    def add_(A, B, *, alpha=1):
        calls.append(("add_", A.device.type, A.dtype))
        A.fill_(-1.0)  # partially written, then fails
        raise TypeError("fake in-place failure")

    def mul_(A, B):
        calls.append(("mul_", A.device.type, A.dtype))
        return A.mul_(B)

    def cat(tensors, dim=0):
        calls.append(("cat", tensors[0].device.type, tensors[0].dtype))
        return torch.cat(tensors, dim)

    def abs_out(A, *, out):
        calls.append(("abs.out", A.device.type, A.dtype))
        return torch.abs(A, out=out)

    def neg(A):
        calls.append(("neg", A.device.type, A.dtype))
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def sub(A, B, *, alpha=1):
        return torch.sub(A, B, alpha=alpha)

    mod = types.ModuleType("flag_gems")
    mod.__version__ = "5.0.2+fake"
    mod._FULL_CONFIG = (
        ("add.Tensor", add),
        ("add_.Tensor", add_),
        ("mul_.Tensor", mul_),
        ("cat", cat),
        ("abs.out", abs_out),
        ("neg", neg),
        ("sub.Tensor", sub, lambda: False),  # a condition that is off: not registered
    )

    def enable(lib=None, unused=None, registrar=None, record=False, once=False, path=None):
        for item in mod._FULL_CONFIG:
            if len(item) < 3 or item[2]():
                lib.impl(item[0], item[1], "CUDA")

    mod.enable = enable
    mod.calls = calls
    return mod


def flag_gems_with(table: dict):
    """A flag_gems stand-in whose table is exactly `table` (aten overload -> function)."""
    mod = types.ModuleType("flag_gems")
    mod.__version__ = "0+fake"
    mod._FULL_CONFIG = tuple(table.items())

    def enable(lib=None, **kwargs):
        for op, fn in mod._FULL_CONFIG:
            lib.impl(op, fn, "CUDA")

    mod.enable = enable
    return mod


def bare_route(op: str, fn, on_error=None) -> torch_fl._C.PyRoute:
    """aten::op on flagos runs `fn` on native aliases through the operator's PyRoute, without routing's
    policy (`on_error(exc, dtype, args, kwargs)`, default: re-raise); `.set_native()` ends it."""

    def reraise(exc, dtype, args, kwargs):
        raise exc

    route = torch_fl._C.PyRoute(op)
    route.update(CoreTarget("kernel", "test", fn, on_error or reraise, None, array("q", [0, 0, 0])))
    return route


@pytest.fixture
def routing_state():
    """Run a test with the routing state it finds restored afterwards (runtime routes, flags, failures)."""
    s = state.STATE
    saved = (
        list(s.file_rules),
        list(s.env_rules),
        dict(s.runtime_rules),
        s.config_file,
        s.log_dispatch,
        s.log_fallback,
        s.strict,
    )
    yield s
    with state.LOCK:
        s.file_rules, s.env_rules, s.runtime_rules, s.config_file = saved[0], saved[1], saved[2], saved[3]
        s.failed.clear()
        s.warned.clear()
        planner.set_flags(log_dispatch=saved[4], log_fallback=saved[5], strict=saved[6])
    flaggems.LOADER.reset()


@pytest.fixture
def no_flag_gems(routing_state, monkeypatch):
    """flag_gems cannot be imported (as on a machine without it), whether or not this one has it."""
    monkeypatch.setitem(sys.modules, "flag_gems", None)  # import_module then raises ModuleNotFoundError
    flaggems.LOADER.reset()  # forget a flag_gems already loaded (routing_state resets it again afterwards)


@pytest.fixture
def fake_gems(routing_state):
    mod = make_fake_flag_gems()
    flaggems.LOADER.use_module(mod)
    yield mod
    flaggems.LOADER.reset()
