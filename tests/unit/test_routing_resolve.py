"""Rule precedence, env override parsing and the table's provenance."""

from __future__ import annotations

import pytest
import torch

from torch_fl import routing
from torch_fl.routing import config, env, planner
from torch_fl.routing import rules as routing_rules
from torch_fl.routing.config import LAYER_ENV, LAYER_RUNTIME, Rule
from torch_fl.vocab.errors import ConfigError, RoutingError

pytestmark = pytest.mark.anyplatform


def resolve(text, *extra):
    rules = config.parse_text(text, "f.conf") + list(extra)
    resolved, _ = routing_rules.resolve(rules)
    return resolved


def test_exact_name_beats_glob():
    r = resolve("*_backward = cpu_fallback\ngelu_backward = native\n")
    assert r["gelu_backward"].default.backend == "native"
    assert r["silu_backward"].default.backend == "cpu_fallback"


def test_longer_glob_is_more_specific_regardless_of_order():
    r = resolve("gelu_* = native\n*_backward = cpu_fallback\n")
    # 'gelu_*' has 5 literal characters, '*_backward' 9: the latter wins for gelu_backward
    assert r["gelu_backward"].default.backend == "cpu_fallback"
    assert r["gelu_"].default.backend == "native"


def test_dtype_rule_applies_only_to_its_dtype():
    r = resolve("mm = native\nmm[bfloat16] = cpu_fallback\n")["mm"]
    assert r.default.backend == "native"
    assert [(d, rule.backend) for d, rule in r.by_dtype] == [(torch.bfloat16, "cpu_fallback")]


def test_later_line_wins_on_equal_specificity():
    assert resolve("mm = native\nmm = cpu_fallback\n")["mm"].default.backend == "cpu_fallback"


def test_env_beats_file_and_runtime_beats_env_for_every_dtype():
    env_rule = Rule("mm", "cpu", layer=LAYER_ENV, origin="env", env_var="FLAGOS_OP_mm")
    r = resolve("mm[bfloat16] = cpu_fallback\n", env_rule)["mm"]
    assert r.default is env_rule and r.by_dtype == ()
    rt = Rule("mm", "cpu_fallback", layer=LAYER_RUNTIME, origin="runtime")
    assert resolve("mm = native\n", env_rule, rt)["mm"].default is rt


def test_env_overrides_parse_and_encode_dots_as_double_underscores():
    rules = env.op_overrides({"FLAGOS_OP_add__Tensor": "cpu", "FLAGOS_OP_mm": "flaggems", "OTHER": "x"})
    assert [(r.pattern, r.backend, r.source) for r in rules] == [
        ("add.Tensor", "cpu", "env FLAGOS_OP_add__Tensor"),
        ("mm", "flaggems", "env FLAGOS_OP_mm"),
    ]
    # operators whose names contain '__' themselves decode too
    (r,) = env.op_overrides({"FLAGOS_OP___and____Tensor": "cpu"})
    assert r.pattern == "__and__.Tensor"


def test_env_unknown_op_suggests_the_variable_to_write():
    with pytest.raises(ConfigError) as e:
        env.op_overrides({"FLAGOS_OP_ad__Tensor": "cpu"})
    msg = str(e.value)
    assert "env FLAGOS_OP_ad__Tensor=cpu" in msg and "FLAGOS_OP_add__Tensor" in msg


def test_env_unknown_or_empty_backend_is_an_error():
    with pytest.raises(ConfigError, match="unknown backend 'cdua'.*Did you mean cuda"):
        env.op_overrides({"FLAGOS_OP_mm": "cdua"})
    with pytest.raises(ConfigError, match="empty backend"):
        env.op_overrides({"FLAGOS_OP_mm": " "})


def test_env_flags_accept_booleans_only():
    assert env.flag({"X": "1"}, "X") and not env.flag({}, "X") and not env.flag({"X": "off"}, "X")
    with pytest.raises(RoutingError, match="X='maybe' is not a boolean"):
        env.flag({"X": "maybe"}, "X")


def test_table_provenance_default_env_runtime(routing_state):
    routing_state.env_rules = env.op_overrides({"FLAGOS_OP_sub__Tensor": "native"})
    planner.apply()
    routing.set_route("neg", "native")
    by_op = {(e.op, e.dtype): e for e in routing.table()}
    assert by_op[("add.Tensor", None)].source.startswith("default file backends_")
    assert by_op[("add.Tensor", None)].source.split(":")[-1].isdigit()
    assert by_op[("sub.Tensor", None)].source == "env FLAGOS_OP_sub__Tensor"
    assert by_op[("neg", None)].source == "runtime"


def test_table_provenance_user_file(routing_state, tmp_path):
    p = tmp_path / "mine.conf"
    p.write_text("# mine\nmm[float16] = cpu_fallback\n")
    routing.load_config(str(p))
    (entry,) = [e for e in routing.table() if e.op == "mm"]
    assert entry == routing.RouteEntry("mm", "cpu_fallback", f"user file {p}:2", "float16", "cpu_fallback", None)


def out_routes(text, *extra):
    """resolve(), with the rules out= overloads take from their functional overloads (as routing applies them)."""
    rules = routing_rules.with_out_overloads(config.parse_text(text, "f.conf") + list(extra))
    return routing_rules.resolve(rules)[0]


def test_a_functional_overloads_rule_routes_its_out_overload_too():
    r = out_routes("mm = cpu_fallback\nadd.Tensor = cpu_fallback\nsum.dim_IntList = cpu_fallback\n")
    for op, out in (("mm", "mm.out"), ("add.Tensor", "add.out"), ("sum.dim_IntList", "sum.IntList_out")):
        rule = r[out].default
        assert (rule.backend, rule.via, rule.line) == ("cpu_fallback", op, r[op].default.line)
        assert rule.source == f"user file f.conf:{rule.line} (via {op})"
    assert "add.Scalar_out" not in r  # only the overload the rule names gives its out= form a rule


def test_out_overloads_keep_their_own_rules_dtypes_sizes_and_layers():
    runtime = Rule("mm", "native", None, layer=LAYER_RUNTIME, origin="runtime", order=1)
    r = out_routes("mm[bfloat16] = cpu_fallback\nmm[numel>=64] = cpu_fallback\nbmm = cpu_fallback\nbmm.out = cpu\n")
    assert [(d, rule.backend) for d, rule in r["mm.out"].by_dtype] == [(torch.bfloat16, "cpu_fallback")]
    assert [(n, rule.backend) for _, cs in r["mm.out"].by_size for n, rule in cs] == [(64, "cpu_fallback")]
    assert r["bmm.out"].default.backend == "cpu" and r["bmm.out"].default.via is None  # named: its own rule
    # a runtime rule of mm reaches mm.out over the file's; a glob that matches mm.out yields to mm's rule
    r = out_routes("mm = cpu_fallback\nmm* = native\n", runtime)
    assert r["mm.out"].default.backend == "native" and r["mm.out"].default.via == "mm"
    r = out_routes("mm = cpu_fallback\nmm.* = native\n")
    assert r["mm.out"].default.backend == "cpu_fallback"


def test_an_out_overload_the_backend_lacks_keeps_its_route(fake_gems):
    # the fake FlagGems has add.Tensor but not add.out (and abs.out but not abs)
    r = out_routes("add.Tensor = flaggems\n")
    assert "add.out" not in r
    routing.set_route("abs", "flaggems")  # abs itself falls back to native; abs.out takes its rule
    table = {e.op: e for e in routing.table()}
    assert table["abs"].runs_on.startswith("native") and "has no kernel for abs" in table["abs"].reason
    assert (table["abs.out"].source, table["abs.out"].runs_on) == ("runtime (via abs)", "flaggems")


def test_explain_an_out_overload_names_the_rule_it_takes(routing_state):
    routing.set_route("mm", "cpu_fallback")
    e = routing.explain("mm.out")
    assert e.runs_on == "cpu_fallback" and e.candidates[0].status == "taken"
    assert e.candidates[0].rule.source == "runtime (via mm)"
