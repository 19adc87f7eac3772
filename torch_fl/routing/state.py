"""The routing state of the process: the rule layers, the flags, what failed, the call counters.

Every change happens under LOCK (re-entrant: a failing kernel re-plans its own
operator from inside a call). What is registered with PyTorch is the
registry's (registry.py); the resolved table is recomputed from the layers
here by planner.apply().
"""

from __future__ import annotations

import threading
from array import array

import torch

from torch_fl import backends
from torch_fl.routing import rules
from torch_fl.routing.config import Rule
from torch_fl.routing.types import Counters, OpRoute

LOCK = threading.RLock()


class State:
    def __init__(self):
        self.file_rules: list[Rule] = []
        self.env_rules: list[Rule] = []
        self.runtime_rules: dict[tuple[str, torch.dtype | None], Rule] = {}
        self.config_file: str | None = None
        self.log_dispatch = False
        self.log_fallback = False
        self.strict = False
        self.runtime_order = 0
        self.route_blocks: list = []  # active routing.route() blocks, in the order they were entered
        self.counters: dict[tuple[str, str], Counters] = {}  # (op, stats backend name) -> its counters
        self.warned: set[tuple[str, str, object]] = set()  # (op, backend, dtype or "empty input") warned about
        self.failed: dict[str, set[tuple[str, torch.dtype | None]]] = {}  # op -> {(backend, dtype) that raised}
        self.glob_notes: list[str] = []
        self.resolved: dict[str, OpRoute] = {}


STATE = State()


def all_rules() -> list[Rule]:
    """Every rule of the three layers, lowest precedence first, and those out= overloads take from their
    functional overloads' rules (rules.with_out_overloads)."""
    return rules.with_out_overloads([*STATE.file_rules, *STATE.env_rules, *STATE.runtime_rules.values()])


def counters_for(op: str, backend: str) -> Counters:
    """The counters of (op, backend); made once, then shared by every kernel that counts there."""
    key = (op, backends.stats_name(backend))
    counters = STATE.counters.get(key)
    if counters is None:
        counters = STATE.counters[key] = array("q", [0, 0, 0])
    return counters
