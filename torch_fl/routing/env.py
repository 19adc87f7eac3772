"""Environment: read once at import.

FLAGOS_BACKEND_CONFIG=path   routing file instead of the shipped default
FLAGOS_USE_FLAGGEMS=1        use the shipped FlagGems profile (backends_flaggems.conf)
FLAGOS_OP_<op, '.' as '__'>=backend   one-op override, e.g. FLAGOS_OP_add__Tensor=cuda
FLAGOS_LOG_DISPATCH=1        one stderr line per routed call: [flagos dispatch] add.Tensor -> cuda
FLAGOS_LOG_FALLBACK=1        [flagos cpu_fallback] aten::<op> per CPU-fallback call
FLAGOS_STRICT=1              no fallback anywhere: errors instead
FLAGGEMS_SOURCE_DIR=path     use a FlagGems source checkout instead of the installed flag_gems
"""

from __future__ import annotations

import difflib
import functools
import os

from torch_fl.routing.config import LAYER_ENV, Rule, check_backend
from torch_fl.vocab import ops
from torch_fl.vocab.errors import ConfigError, Problem, RoutingError

OP_PREFIX = "FLAGOS_OP_"


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
    raise RoutingError(f"{name}={raw!r} is not a boolean; use 1 or 0 (or unset it).")


def op_overrides(environ=None) -> list[Rule]:
    """FLAGOS_OP_* variables as env-layer rules; ConfigError listing every bad one."""
    environ = os.environ if environ is None else environ
    rules: list[Rule] = []
    problems: list[Problem] = []
    for order, key in enumerate(sorted(k for k in environ if k.startswith(OP_PREFIX)), start=1):
        suffix = key[len(OP_PREFIX) :]
        value = environ[key].strip()
        where = f"env {key}={environ[key]}"
        op = _encoded().get(suffix)
        if op is None:
            decoded = suffix.replace("__", ".")
            hints = difflib.get_close_matches(suffix, list(_encoded()), n=3, cutoff=0.6)
            did = f" Did you mean {', '.join(OP_PREFIX + h for h in hints)}?" if hints else ""
            problems.append(
                Problem(
                    where,
                    None,
                    f"'{decoded}' is not an ATen operator overload.{did} Name the overload with '.' written '__' "
                    "(FLAGOS_OP_add__Tensor=cuda, FLAGOS_OP_mm=flaggems), or unset the variable.",
                )
            )
            continue
        if not value:
            problems.append(Problem(where, None, f"empty backend; set one of the backends or unset {key}."))
            continue
        msg = check_backend(value)
        if msg:
            problems.append(Problem(where, None, msg))
            continue
        rules.append(Rule(op, value, None, layer=LAYER_ENV, origin="env", env_var=key, order=order))
    if problems:
        raise ConfigError(problems)
    return rules
