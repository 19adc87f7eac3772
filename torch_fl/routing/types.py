"""The named values routing passes around: a resolved route, a target, a plan, a registration."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from torch_fl._core import _C
from torch_fl.routing.config import Rule

#: Per (op, backend as stats name it): array('q', [calls, fallbacks, failures]). Kernels increment it in
#: place (the C++ PyRoute through the array's buffer), so it is made once and never replaced.
Counters = array


@dataclass(frozen=True)
class OpRoute:
    """The winning rules for one operator: a dtype-less default and per-dtype exceptions."""

    op: str
    default: Rule | None  # None: no dtype-less rule, the platform's native route
    by_dtype: tuple[tuple[torch.dtype, Rule], ...] = ()
    # Size classes: (dtype, or None for every dtype without an entry of its own, ((min_numel, rule), ...)):
    # a call whose first tensor has at least min_numel elements takes the rule of the largest such threshold.
    by_size: tuple[tuple[torch.dtype | None, tuple[tuple[int, Rule], ...]], ...] = ()
    # Argument rules (`pow.Tensor_Scalar[exponent=2]`): the argument they test, and per dtype (None as above) the
    # values whose calls route otherwise: (value, rule below every size threshold or None, size classes).
    arg: str | None = None
    by_value: tuple[tuple[torch.dtype | None, tuple[tuple[object, Rule | None, tuple], ...]], ...] = ()


@dataclass(frozen=True)
class Target:
    """What runs for one (op, rule, dtype): native, a backend kernel, or a fallback to native."""

    kind: Literal["native", "kernel", "fallback"]
    backend: str  # as written
    reason: str | None = None  # why it falls back


@dataclass(frozen=True)
class Plan:
    """What an operator's kernel must do; an equal plan needs no new kernel."""

    default: Target
    by_dtype: tuple[tuple[torch.dtype, Target], ...]
    failures: tuple[tuple[str, str], ...]  # (backend, dtype name) whose kernel raised in this process
    strict: bool
    by_size: tuple[tuple[torch.dtype | None, tuple[tuple[int, Target], ...]], ...] = ()  # as OpRoute.by_size
    arg: str | None = None  # as OpRoute.arg
    by_value: tuple = ()  # as OpRoute.by_value, with Targets for rules

    def targets(self) -> list[Target]:
        """Every target of the plan: the default, per dtype, per size class, per value class."""
        valued = [t for _, vcs in self.by_value for _, base, cs in vcs for t in (base, *(t for _, t in cs))]
        return [self.default, *(t for _, t in self.by_dtype), *(t for _, cs in self.by_size for _, t in cs), *valued]

    @property
    def needs_kernel(self) -> bool:
        """False when every target is native: the C++ native route runs the operator, no kernel of ours."""
        return any(t.kind != "native" for t in self.targets())


@dataclass(frozen=True)
class CoreTarget:
    """One target as the C++ kernel of a routed operator (_C.PyRoute) runs it.

    The kernel decides which target a call takes (by its dtype) and whether an
    input is empty; these callables decide what follows.
    """

    kind: Literal["native", "cpu_fallback", "fallback", "kernel"]
    label: str  # the dispatch log's name for the backend that runs (FEP 0025's names)
    fn: Callable | None = None  # kernel: the backend's function, called on native aliases
    on_error: Callable | None = None  # kernel: (exception, dtype, args, kwargs) -> result, or raises
    # fallback: notice(dtype) counts, warns or raises before native runs; kernel: the same for a call with an
    # empty input, which then runs natively (None: the backend takes empty inputs)
    notice: Callable | None = None
    counters: Counters | None = None  # kernel: counters[0] counts its calls
    # kernel: record and replay (torch_fl/replay): fn runs once per input signature, recorded, and replays in
    # C++ afterwards
    replay: bool = False


@dataclass(frozen=True)
class Registration:
    """An operator's plan and the C++ kernel that runs it."""

    plan: Plan
    handle: _C.PyRoute
