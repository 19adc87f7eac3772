"""The named values routing passes around: a resolved route, a target, a plan, a registration."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

import torch_fl
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
    log_dispatch: bool
    strict: bool

    @property
    def needs_kernel(self) -> bool:
        """False when every target is native: the C++ native route runs the operator, no kernel of ours."""
        return self.default.kind != "native" or any(t.kind != "native" for _, t in self.by_dtype)


@dataclass(frozen=True)
class PyRouteArgs:
    """What torch_fl._C.PyRoute.update needs to run a route to a backend function without a Python frame."""

    fn: Callable  # the backend's function, called on native aliases
    on_error: Callable  # (exception, args, kwargs) -> result: the failure policy
    other_dtype: Callable  # called like the operator for the dtypes in `other`
    other: list[torch.dtype]  # dtypes routed elsewhere or that the backend lacks
    on_empty: Callable | None  # called like the operator when an input tensor is empty; None: no such check
    counters: Counters


@dataclass(frozen=True)
class Registration:
    """An operator's kernel of ours at PrivateUse1 and the plan it runs."""

    plan: Plan
    handle: torch.library.Library | torch_fl._C.PyRoute  # the Python kernel's library, or the C++ kernel
    # The Python kernel's trampoline calls kernel_slot[0]; a new plan replaces that item (torch refuses a
    # second Python kernel for the same op and key). None for a PyRoute.
    kernel_slot: list[Callable] | None = None
