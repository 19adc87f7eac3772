"""Environment: read once at import. VARIABLES is the one list of torch_fl's FLAGOS_* names
(docs/routing.md's table lists exactly these; tests/unit/test_routing_env.py checks it);
any other FLAGOS_* name is warned about once, with the nearest valid one.
"""

from __future__ import annotations

import difflib
import functools
import os
import warnings

from torch_fl.routing import native_only
from torch_fl.routing.config import LAYER_ENV, Rule, check_backend
from torch_fl.vocab import ops
from torch_fl.vocab.errors import ConfigError, Problem, RoutingError, shorten

OP_PREFIX = "FLAGOS_OP_"

#: Every FLAGOS_* variable torch_fl reads, besides OP_PREFIX (any operator). docs/routing.md's table lists them.
VARIABLES = frozenset(
    {
        "FLAGOS_ACCELERATOR",  # _loader.py
        "FLAGOS_HOST_DEVICES",  # _loader.py, csrc/runtime/backing.cpp
        "FLAGOS_BACKEND_CONFIG",
        "FLAGOS_USE_FLAGGEMS",
        "FLAGOS_LOG_DISPATCH",
        "FLAGOS_LOG_FALLBACK",
        "FLAGOS_STRICT",
        "FLAGOS_INTEGRATIONS",  # torch_fl/integrations (docs/integrations.md)
        "FLAGOS_GPU_READY",  # scripts/gpu_setup.sh exports it; read by nothing here, so not a misspelling
    }
)

_warned: set[str] = set()


def encode(op: str) -> str:
    return op.replace(".", "__")


@functools.lru_cache(maxsize=1)
def _encoded() -> dict[str, str]:
    return {encode(op): op for op in ops.aten_ops()}


def flag(environ, name: str) -> bool:
    raw = environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise RoutingError(f"{name}={shorten(repr(raw))} is not a boolean; use 1 or 0 (or unset it).")


def unknown_variables(environ) -> dict[str, str]:
    """FLAGOS_* variable -> message, for each one torch_fl does not read (FLAGOS_OP_* names any operator)."""
    valid = sorted(VARIABLES)
    out = {}
    for key in sorted(environ):
        if not key.startswith("FLAGOS_") or key in VARIABLES or key.startswith(OP_PREFIX):
            continue
        near = difflib.get_close_matches(key, [*valid, OP_PREFIX], n=1, cutoff=0.6)
        did = f" Did you mean {near[0]}{'<op>' if near and near[0] == OP_PREFIX else ''}?" if near else ""
        out[key] = (
            f"{shorten(key)} is not a torch_fl variable and is ignored.{did} Valid: {', '.join(valid)}, "
            f"{OP_PREFIX}<op> (see docs/routing.md). Fix or unset it."
        )
    return out


def warn_unknown_variables(environ) -> None:
    """Warn once per process about each FLAGOS_* variable torch_fl does not read."""
    for key, message in unknown_variables(environ).items():
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"flagos: {message}", UserWarning, stacklevel=3)


def op_overrides(environ=None) -> list[Rule]:
    """FLAGOS_OP_* variables as env-layer rules; ConfigError listing every bad one."""
    environ = os.environ if environ is None else environ
    rules: list[Rule] = []
    problems: list[Problem] = []
    for order, key in enumerate(sorted(k for k in environ if k.startswith(OP_PREFIX)), start=1):
        suffix = key[len(OP_PREFIX) :]
        value = environ[key].strip()
        where = f"env {shorten(key)}={shorten(environ[key])}"
        op = _encoded().get(suffix)
        if op is None:
            decoded = suffix.replace("__", ".")
            hints = difflib.get_close_matches(suffix, list(_encoded()), n=3, cutoff=0.6)
            did = f" Did you mean {', '.join(OP_PREFIX + h for h in hints)}?" if hints else ""
            problems.append(
                Problem(
                    where,
                    None,
                    f"'{shorten(decoded)}' is not an ATen operator overload.{did} Name the overload with '.' written "
                    "'__' (FLAGOS_OP_add__Tensor=cuda, FLAGOS_OP_mm=flaggems), or unset the variable.",
                )
            )
            continue
        if not value:
            problems.append(Problem(where, None, f"empty backend; set one of the backends or unset {shorten(key)}."))
            continue
        msg = check_backend(value)
        if msg is None and (why := native_only.route_problem(op, value)):
            msg = f"{why}."  # a core or view operator: an error here as in a routing file
        if msg:
            problems.append(Problem(where, None, msg))
            continue
        rules.append(Rule(op, value, None, layer=LAYER_ENV, origin="env", env_var=key, order=order))
    if problems:
        raise ConfigError(problems)
    return rules
