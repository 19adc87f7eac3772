"""The routing file: FEP 0025 `op_overload = backend` lines, plus includes, globs and dtypes.

    # comment                    (also after a rule)
    mm = flaggems                # an ATen overload; bare name = default overload
    add.Tensor = cuda
    *_backward = cuda            # glob (* and ?); the most specific rule wins
    mm[bfloat16] = flaggems      # only for that dtype (first tensor argument)
    mm[float16, bfloat16] = flaggems
    mm[bfloat16, numel>=1048576] = flaggems   # only calls whose first tensor has that many elements or more
    pow.Tensor_Scalar[exponent=2] = cuda      # only calls whose argument `exponent` equals 2 (a number or bool)
    include base.conf            # relative to this file; `builtin:NAME` = a shipped config

Parsing collects every problem (file:line and the text) instead of stopping at
the first, so `python -m torch_fl validate FILE` can list them all.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from dataclasses import dataclass, field

import torch

from torch_fl import backends
from torch_fl.routing import native_only
from torch_fl.routing.conditions import NO_VALUE, SIZE_KEY, format_value, parse_condition, values_equal
from torch_fl.routing.files import Unreadable, read_text
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import ConfigError, Problem, RoutingError, shorten

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
BUILTIN_PREFIX = "builtin:"

# layers, lowest precedence first
LAYER_FILE, LAYER_ENV, LAYER_RUNTIME = 0, 1, 2

#: 'did you mean' for this many unknown operators per parse, then only their count: each search compares
#: the name with every ATen operator (milliseconds), and a wrong file may name thousands.
MAX_SUGGESTIONS = 20
MAX_INCLUDE_DEPTH = 32
#: problems reported for one rule's brackets (`mm[bf17, fp33, ...]`); more are only counted
MAX_CONDITION_PROBLEMS = 5

_LHS = re.compile(r"^(?P<op>[A-Za-z0-9_.*?:]+)\s*(?:\[(?P<dtypes>[^\]]*)\])?$")
_BACKEND = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class Rule:
    """One routing rule and where it came from."""

    pattern: str  # normalised operator name, or a glob
    backend: str  # as written (the dispatch log prints this)
    dtype: torch.dtype | None = None
    layer: int = LAYER_FILE
    origin: str = "user file"  # "default file" | "user file" | "env" | "runtime"
    file: str | None = None
    line: int | None = None
    env_var: str | None = None
    order: int = 0
    text: str = field(default="", compare=False)
    min_numel: int | None = None  # a size rule: calls whose first tensor has at least this many elements
    #: an argument rule (`pow.Tensor_Scalar[exponent=2]`): calls whose argument of this name equals this value
    arg: tuple[str, int | float | bool] | None = None
    #: set on the rule an out= overload takes from its functional one's (`mm.out` from `mm`): that operator
    via: str | None = None

    @property
    def is_glob(self) -> bool:
        return ops.is_glob(self.pattern)

    @property
    def source(self) -> str:
        if self.origin == "env":
            where = f"env {self.env_var}"
        elif self.origin == "runtime":
            where = "runtime"
        else:
            shown = os.path.basename(self.file) if self.origin == "default file" else self.file
            where = f"{self.origin} {shown}:{self.line}"
        return where if self.via is None else f"{where} (via {self.via})"

    def specificity(self) -> tuple:
        """Sort key: higher wins. Layer, then exact name over glob (longer literal part wins; a rule taken from
        the functional overload just below a name), dtype, an argument condition, a size condition (the larger
        threshold wins), order."""
        if self.is_glob:
            literal = sum(c not in ops.GLOB_CHARS for c in self.pattern)
        else:
            literal = 10**6 if self.via is None else 10**6 - 1
        return (self.layer, literal, self.dtype is not None, self.arg is not None, self.min_numel or 0, self.order)

    def matches(self, op: str) -> bool:
        if self.is_glob:
            return fnmatch.fnmatchcase(op, self.pattern)
        return op == self.pattern

    def applies(self, dtype: torch.dtype | None, numel: int | None = None, value: object = NO_VALUE) -> bool:
        """Whether the rule applies to a call of `dtype` whose first tensor has `numel` elements (None: a call
        below every size threshold) and whose condition argument is `value` (NO_VALUE: one no condition names)."""
        if self.dtype is not None and self.dtype != dtype:
            return False
        if self.arg is not None and not values_equal(value, self.arg[1]):
            return False
        return self.min_numel is None or (numel is not None and numel >= self.min_numel)

    @property
    def written(self) -> str:
        conds = [dtype_name(self.dtype)] if self.dtype is not None else []
        if self.arg is not None:
            conds.append(f"{self.arg[0]}={format_value(self.arg[1])}")
        if self.min_numel is not None:
            conds.append(f"{SIZE_KEY}>={self.min_numel}")
        return f"{self.pattern}{'[' + ', '.join(conds) + ']' if conds else ''} = {self.backend}"


def _first_distinct(messages: list[str]) -> list[str]:
    """The problems of one rule's brackets as reported: each message once, at most MAX_CONDITION_PROBLEMS, then
    how many more (a line of thousands of bad conditions would otherwise repeat itself thousands of times)."""
    distinct = list(dict.fromkeys(messages))
    if len(distinct) <= MAX_CONDITION_PROBLEMS:
        return distinct
    rest = len(distinct) - MAX_CONDITION_PROBLEMS
    return [*distinct[:MAX_CONDITION_PROBLEMS], f"and {rest} more problems in this rule's brackets"]


def resolve_include(target: str, including_file: str | None) -> str:
    if target.startswith(BUILTIN_PREFIX):
        return os.path.join(CONFIG_DIR, target[len(BUILTIN_PREFIX) :])
    if os.path.isabs(target) or including_file is None:
        return target
    return os.path.join(os.path.dirname(os.path.abspath(including_file)), target)


def _argument_problem(op: str, name: str, counter: _Parse) -> str | None:
    """Why `op[name=...]` cannot be a rule: a glob, an argument that is not a number of op's, or an operator whose
    rules already test another argument (the core reads one argument per operator)."""
    if ops.is_glob(op):
        return (
            f"an argument condition needs one operator, not a glob: arguments are named by each operator's schema "
            f"(write {op.replace('*', 'NAME').replace('?', 'X')}[{name}=...] per operator)"
        )
    msg = ops.condition_argument_problem(op, name)
    if msg:
        return msg
    other = counter.tested.setdefault(op, name)
    if other != name:
        return (
            f"{op}'s rules already test the argument '{other}': the rules of one operator may test one argument "
            f"(write every {op} condition on '{other}', or on '{shorten(name)}')"
        )
    return None


class _Parse:
    """What one parse shares across its files: rule order, how many unknown operators got suggestions, and the
    argument each operator's argument rules test."""

    def __init__(self):
        self.n = 0
        self.unknown_ops = 0
        self.tested: dict[str, str] = {}

    def next(self) -> int:
        self.n += 1
        return self.n

    def suggest(self) -> bool:
        """Whether the next unknown operator gets 'did you mean' (each costs a search over every name)."""
        self.unknown_ops += 1
        return self.unknown_ops <= MAX_SUGGESTIONS

    def summary(self, path: str | None) -> Problem | None:
        if self.unknown_ops <= MAX_SUGGESTIONS:
            return None
        return Problem(
            path or "<text>",
            None,
            f"{self.unknown_ops} unknown operators in all ('did you mean' for the first {MAX_SUGGESTIONS}). "
            f"Is this file written for another PyTorch? Operator names are torch {torch.__version__}'s "
            "(torch.ops.aten.NAME.overloads() lists one name's overloads).",
        )


def check_backend(backend: str) -> str | None:
    """An error message for an unknown backend name, else None."""
    if backend in backends.BACKENDS:
        return None
    hints = difflib.get_close_matches(backend, backends.NAMES, n=2)
    did = f" Did you mean {' or '.join(hints)}?" if hints else ""
    return f"unknown backend '{shorten(backend)}'.{did} Valid backends: {', '.join(backends.NAMES)}."


def check_backend_name(backend: str) -> None:
    """Raise RoutingError unless `backend` is a backend name (None included: clear_route drops a route)."""
    if not isinstance(backend, str):
        raise RoutingError(
            f"backend names are strings ({', '.join(backends.NAMES)}), got {shorten(repr(backend))}. To drop an "
            "operator's runtime route (its file or FLAGOS_OP_* route applies again), call "
            "torch_fl.routing.clear_route(op)."
        )
    msg = check_backend(backend)
    if msg:
        raise RoutingError(msg)


def check_op(pattern: str, suggest: bool = True) -> str | None:
    """An error message for an operator name or glob that names nothing, else None."""
    if ops.is_glob(pattern):
        if not ops.matching(pattern):
            return (
                f"glob '{shorten(pattern)}' matches no ATen operator; check the spelling (globs match names like "
                "add.Tensor)."
            )
        return None
    if not ops.is_known(pattern):
        return ops.unknown_op_message(pattern, suggest)
    return None


def _include(target: str, path: str | None, stack: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The file an include line names, or the problem with it: a cycle or a chain too deep."""
    full = resolve_include(target, path)
    real = os.path.realpath(full)
    if real in stack:
        return None, f"include cycle: {' -> '.join([*stack, real])}. Remove one of these includes."
    if len(stack) >= MAX_INCLUDE_DEPTH:
        return None, (
            f"includes nested more than {MAX_INCLUDE_DEPTH} files deep: {' -> '.join([*stack, real])}. "
            "Include the files you need from one top-level file instead of chaining them."
        )
    return full, None


def parse_text(
    text: str,
    path: str | None = None,
    *,
    origin: str = "user file",
    counter: _Parse | None = None,
    problems: list[Problem] | None = None,
    _stack: tuple[str, ...] = (),
) -> list[Rule]:
    """Parse routing text; problems are appended to `problems` (raise ConfigError if it is None and any occur)."""
    raise_at_end = problems is None
    problems = [] if problems is None else problems
    top = counter is None
    counter = counter or _Parse()
    rules: list[Rule] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue

        def bad(msg: str, _lineno=lineno, _raw=raw):
            problems.append(Problem(path or "<text>", _lineno, msg, shorten(_raw.strip())))

        if line.startswith("include") and (len(line) == 7 or line[7].isspace()) and "=" not in line:
            target = line[7:].strip()
            if not target:
                bad("'include' needs a path: include other.conf (relative to this file) or include builtin:NAME")
                continue
            full, msg = _include(target, path, _stack)
            if msg:
                bad(msg)
                continue
            sub_origin = "default file" if target.startswith(BUILTIN_PREFIX) else origin
            rules.extend(_load(full, sub_origin, counter, problems, _stack, (path or "<text>", lineno, raw.strip())))
            continue
        outside = re.sub(r"\[[^\]]*\]", "", line)  # a size condition's '>=' sits inside the brackets
        if outside.count("=") != 1:
            bad("malformed line: expected 'op_overload = backend' (e.g. add.Tensor = cuda) or 'include PATH'")
            continue
        lhs, rhs = (s.strip() for s in line.rsplit("=", 1))
        m = _LHS.match(lhs)
        if not m or not rhs:
            bad("malformed line: expected 'op_overload = backend', 'op[dtype] = backend' or 'glob = backend'")
            continue
        if not _BACKEND.match(rhs):
            bad(f"malformed backend '{shorten(rhs)}': one name per line (e.g. flaggems)")
            continue
        ok = True
        msg = check_backend(rhs)
        if msg:
            bad(msg)
            ok = False
        op = ops.normalize(m.group("op"))
        msg = check_op(op, suggest=ops.is_glob(op) or ops.is_known(op) or counter.suggest())
        if msg:
            bad(msg)
            ok = False
        elif ok and not ops.is_glob(op):
            msg = native_only.route_problem(op, rhs)
            if msg:
                bad(f"{msg}.")
                ok = False
        dtypes: list[torch.dtype | None] = [None]
        min_numel: int | None = None
        arg: tuple[str, int | float | bool] | None = None
        if m.group("dtypes") is not None:
            dtypes = []
            condition_problems: list[str] = []
            for d in m.group("dtypes").split(","):
                dt, size, cond, msg = parse_condition(d)
                if msg:
                    condition_problems.append(msg)
                elif size is not None:
                    if min_numel is not None:
                        condition_problems.append(f"two size conditions in one rule: keep one {SIZE_KEY}>=N")
                    min_numel = size
                elif cond is not None:
                    if arg is not None:
                        condition_problems.append("two argument conditions in one rule: a rule tests one argument")
                    arg = cond
                else:
                    dtypes.append(dt)
            for msg in _first_distinct(condition_problems):
                bad(msg)
                ok = False
            if not dtypes and min_numel is None and arg is None and ok:
                bad("empty dtype list: write op[bfloat16] = backend, or drop the brackets")
                ok = False
            if ok and arg is not None:
                msg = _argument_problem(op, arg[0], counter)
                if msg:
                    bad(msg)
                    ok = False
            dtype_text = ", ".join(dtype_name(d) for d in dtypes) or f"{SIZE_KEY}>={min_numel}"
            if ok and dtypes and not ops.is_glob(op):
                msg = ops.dtype_rule_problem(op, dtype_text, rhs)
                if msg:
                    bad(msg)
                    ok = False
            if ok and min_numel is not None and not dtypes and not ops.is_glob(op):
                msg = ops.dtype_rule_problem(op, dtype_text, rhs)
                if msg:
                    bad(msg)
                    ok = False
            dtypes = dtypes or [None]
        if not ok:
            continue
        for dt in dtypes:
            rules.append(
                Rule(
                    op,
                    rhs,
                    dt,
                    layer=LAYER_FILE,
                    origin=origin,
                    file=path,
                    line=lineno,
                    order=counter.next(),
                    text=raw.strip(),
                    min_numel=min_numel,
                    arg=arg,
                )
            )
    if top:
        summary = counter.summary(path)
        if summary:
            problems.append(summary)
    if raise_at_end and problems:
        raise ConfigError(problems)
    return rules


def _load(
    path: str,
    origin: str,
    counter: _Parse,
    problems: list[Problem],
    stack: tuple[str, ...],
    included_at: tuple[str, int, str] | None = None,
) -> list[Rule]:
    try:
        text = read_text(path)
    except Unreadable as e:
        if e.line is not None:
            problems.append(Problem(path, e.line, e.message))
        elif included_at is not None:
            where, line, raw = included_at
            problems.append(Problem(where, line, f"included {e.message}", shorten(raw)))
        else:
            problems.append(Problem(path, None, e.message))
        if e.text is None:
            return []
        text = e.text
    return parse_text(
        text, path, origin=origin, counter=counter, problems=problems, _stack=(*stack, os.path.realpath(path))
    )


def check_file(path: str, origin: str = "user file") -> tuple[list[Rule], list[Problem]]:
    """The rules of a routing file (and its includes) and every problem in it; the file is read once."""
    problems: list[Problem] = []
    counter = _Parse()
    rules = _load(path, origin, counter, problems, ())
    summary = counter.summary(path)
    if summary:
        problems.append(summary)
    return rules, problems


def load_file(path: str, *, origin: str = "user file") -> list[Rule]:
    """The rules of a routing file; ConfigError listing every problem (file:line) if it has any."""
    rules, problems = check_file(path, origin)
    if problems:
        raise ConfigError(problems)
    return rules


def validate_file(path: str) -> list[Problem]:
    """Every problem in a routing file (and its includes); empty when it is valid."""
    return check_file(path)[1]


def default_file(backing: str, use_flaggems: bool) -> str:
    name = "backends_flaggems.conf" if use_flaggems else f"backends_{backing}.conf"
    return os.path.join(CONFIG_DIR, name)
