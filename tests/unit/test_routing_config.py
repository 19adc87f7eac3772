"""Routing file parsing and validation (no device semantics needed)."""

from __future__ import annotations

import os

import pytest
import torch

from torch_fl.__main__ import main
from torch_fl.routing import config
from torch_fl.vocab.errors import ConfigError

pytestmark = pytest.mark.anyplatform


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_fep_lines_comments_and_blank_lines():
    rules = config.parse_text(
        "# header\n\nmm = flaggems   # trailing comment\nadd.Tensor = cuda\n  abs = flagos_python\n", "f.conf"
    )
    assert [(r.pattern, r.backend, r.dtype, r.line) for r in rules] == [
        ("mm", "flaggems", None, 3),
        ("add.Tensor", "cuda", None, 4),
        ("abs", "flagos_python", None, 5),
    ]
    assert rules[0].source == "user file f.conf:3"


def test_names_are_normalised_to_the_overload_form():
    rules = config.parse_text("aten::mm.default = cpu\naten::add.Tensor = cpu\n", "f.conf")
    assert [r.pattern for r in rules] == ["mm", "add.Tensor"]


def test_dtype_rules_single_and_list():
    rules = config.parse_text("mm[bfloat16] = flaggems\nbmm[fp16, float32] = cpu\n", "f.conf")
    assert [(r.pattern, r.dtype) for r in rules] == [
        ("mm", torch.bfloat16),
        ("bmm", torch.float16),
        ("bmm", torch.float32),
    ]


def test_every_dtype_a_flagos_tensor_holds_is_a_rule_key():
    names = ["uint16", "uint32", "uint64", "complex32", "float8_e4m3fnuz", "float8_e5m2fnuz", "half", "short"]
    rules = config.parse_text(f"add.Tensor[{', '.join(names)}] = cpu_fallback\n", "f.conf")
    assert [r.dtype for r in rules] == [getattr(torch, n) for n in names]
    with pytest.raises(ConfigError, match="unknown dtype 'qint8'"):
        config.parse_text("add.Tensor[qint8] = cpu_fallback\n", "f.conf")  # quantized: never on flagos


def test_a_size_threshold_past_int64_is_an_error_at_its_line(tmp_path):
    path = write(tmp_path, "big.conf", "mm[numel>=99999999999999999999999] = cpu_fallback\n")
    with pytest.raises(ConfigError, match=r"big.conf:1: .*can never hold: give a threshold below 2\*\*63"):
        config.load_file(path)
    assert config.parse_text(f"mm[numel>={2**63 - 1}] = cpu_fallback\n", "f.conf")[0].min_numel == 2**63 - 1


def test_glob_rule_is_kept_as_pattern():
    (rule,) = config.parse_text("*_backward = cpu\n", "f.conf")
    assert rule.is_glob and rule.matches("gelu_backward") and not rule.matches("gelu")


def test_include_is_relative_to_the_including_file_and_later_lines_win(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    write(sub, "base.conf", "mm = flaggems\nbmm = cpu\n")
    top = write(tmp_path, "top.conf", "include sub/base.conf\nmm = cpu\n")
    rules = config.load_file(top)
    assert [(r.pattern, r.backend, os.path.basename(r.file), r.line) for r in rules] == [
        ("mm", "flaggems", "base.conf", 1),
        ("bmm", "cpu", "base.conf", 2),
        ("mm", "cpu", "top.conf", 2),
    ]
    # same specificity: the later line (higher order) wins
    assert max((r for r in rules if r.pattern == "mm"), key=config.Rule.specificity).backend == "cpu"


def test_include_builtin_names_a_shipped_config(tmp_path):
    top = write(tmp_path, "top.conf", "include builtin:backends_flaggems.conf\nneg = cpu\n")
    rules = config.load_file(top)
    assert any(r.pattern == "mm" and r.backend == "native" and r.origin == "default file" for r in rules)
    assert rules[-1].pattern == "neg" and rules[-1].origin == "user file"


def test_include_cycle_is_an_error(tmp_path):
    a = write(tmp_path, "a.conf", "include b.conf\n")
    write(tmp_path, "b.conf", "include a.conf\n")
    with pytest.raises(ConfigError) as e:
        config.load_file(a)
    (p,) = e.value.problems
    assert p.file.endswith("b.conf") and p.line == 1
    assert "include cycle" in p.message and "a.conf" in p.message


def test_missing_include_names_the_file_and_line(tmp_path):
    a = write(tmp_path, "a.conf", "mm = cpu\ninclude missing.conf\n")
    (p,) = config.validate_file(a)
    assert (p.file, p.line) == (a, 2)
    assert "missing.conf" in p.message and "does not exist" in p.message


def test_unknown_operator_suggests_closest_names():
    with pytest.raises(ConfigError) as e:
        config.parse_text("ad.Tensor = cpu\n", "f.conf")
    msg = str(e.value)
    assert "f.conf:1" in msg and "unknown operator 'ad.Tensor'" in msg and "add.Tensor" in msg
    assert "ad.Tensor = cpu" in msg  # the offending text


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ConfigError) as e:
        config.parse_text("mm = flagems\n", "f.conf")
    msg = str(e.value)
    assert "unknown backend 'flagems'" in msg and "Did you mean flaggems" in msg
    for name in ("native", "cuda", "cpu", "flaggems", "flaggems_python", "flagos_python", "cpu_fallback", "ascend"):
        assert name in msg


def test_malformed_lines_report_file_line_and_text():
    problems = []
    config.parse_text("mm = cpu\nthis is not a rule\nmm = cpu = cuda\nmm[bf17] = cpu\n", "f.conf", problems=problems)
    assert [(p.line, p.text) for p in problems] == [
        (2, "this is not a rule"),
        (3, "mm = cpu = cuda"),
        (4, "mm[bf17] = cpu"),
    ]
    assert "malformed line" in problems[0].message
    assert "unknown dtype 'bf17'" in problems[2].message and "bf16" in problems[2].message


def test_glob_that_matches_nothing_is_an_error():
    with pytest.raises(ConfigError, match="matches no ATen operator"):
        config.parse_text("*definitely_not_an_op = cpu\n", "f.conf")


def test_all_problems_are_collected_not_just_the_first():
    problems = []
    config.parse_text("ad.Tensor = cpu\nmm = nope\n", "f.conf", problems=problems)
    assert [p.line for p in problems] == [1, 2]


@pytest.mark.parametrize("name", ["backends_cpu.conf", "backends_cuda.conf", "backends_flaggems.conf"])
def test_shipped_configs_are_valid(name):
    assert config.validate_file(os.path.join(config.CONFIG_DIR, name)) == []


def test_flaggems_profile_keeps_matmuls_native_and_says_why():
    path = os.path.join(config.CONFIG_DIR, "backends_flaggems.conf")
    rules = {r.pattern: r.backend for r in config.load_file(path)}
    assert rules["mm"] == rules["addmm"] == rules["bmm"] == "native"
    text = open(path).read()
    assert "Failed to create tensor map descriptor" in text and "Last dimension must be contiguous" in text


def test_validate_cli_exit_codes(tmp_path, capsys):
    good = write(tmp_path, "good.conf", "mm = cpu\n")
    bad = write(tmp_path, "bad.conf", "mm = cpu\nmm = nope\n")
    assert main(["validate", good]) == 0
    assert "OK (1 rule(s))" in capsys.readouterr().out
    assert main(["validate", bad]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2: unknown backend 'nope'" in err


LONG = 300_000  # characters of user input in one place


@pytest.mark.parametrize(
    ("line", "quoted"),
    [
        ("a" * LONG + " = cpu", "a" * 80),  # an operator name
        ("mm = " + "b" * LONG, "b" * 80),  # a backend
        ("*" + "c" * LONG + " = cpu", "c" * 79),  # a glob that matches nothing
        ("mm[" + "d" * LONG + "] = cpu", "d" * 80),  # a dtype
        ("mm[numel>=" + "9x" * (LONG // 2) + "] = cpu", "9x" * 40),  # a size condition
        ("include " + "e" * LONG, "e" * 60),  # an include's path
        ("mm = cpu = " + "f" * LONG, "f" * 60),  # a malformed line
    ],
    ids=["operator", "backend", "glob", "dtype", "size", "include", "malformed"],
)
def test_errors_quote_long_input_shortened_and_keep_file_and_line(tmp_path, line, quoted):
    path = write(tmp_path, "long.conf", f"mm = cpu\n{line}\n")
    with pytest.raises(ConfigError) as e:
        config.load_file(path)
    msg = str(e.value)
    assert f"{path}:2: " in msg
    assert quoted in msg and "... (" in msg and " characters)" in msg
    assert len(msg) < 2000, len(msg)


def test_a_line_of_many_bad_conditions_reports_a_few_and_counts_the_rest():
    problems = []
    bad = ", ".join(f"x{i}" for i in range(10_000))
    config.parse_text(f"mm[numel>=4, numel>=8, numel>=16, {bad}] = cpu\n", "f.conf", problems=problems)
    messages = [p.message for p in problems]
    assert messages.count("two size conditions in one rule: keep one numel>=N") == 1
    assert len(problems) == config.MAX_CONDITION_PROBLEMS + 1 and all(p.line == 1 for p in problems)
    assert "and 9996 more problems in this rule's brackets" in messages[-1]
    assert len(str(ConfigError(problems))) < 3000


def test_env_override_of_a_core_operator_is_an_error_as_in_a_routing_file(tmp_path):
    from torch_fl.routing import env

    with pytest.raises(ConfigError, match=r"FLAGOS_OP_view=cpu_fallback.*aten::view cannot be routed"):
        env.op_overrides({"FLAGOS_OP_view": "cpu_fallback"})
    with pytest.raises(ConfigError, match="aten::view cannot be routed"):
        config.load_file(write(tmp_path, "v.conf", "view = cpu_fallback\n"))
    assert env.op_overrides({"FLAGOS_OP_view": "native"})[0].backend == "native"  # where it runs anyway


def test_env_override_errors_quote_long_names_and_values_shortened():
    from torch_fl.routing import env

    for environ in ({"FLAGOS_OP_" + "z" * LONG: "cpu"}, {"FLAGOS_OP_mm": "q" * LONG}):
        with pytest.raises(ConfigError) as e:
            env.op_overrides(environ)
        msg = str(e.value)
        assert "env FLAGOS_OP_" in msg and "(300000 characters)" in msg and len(msg) < 1500, msg[:3000]
    (message,) = env.unknown_variables({"FLAGOS_" + "y" * LONG: "1"}).values()
    assert message.startswith("FLAGOS_yyy") and len(message) < 1000
    with pytest.raises(ValueError, match=r"\.\.\. \(\d+ characters\)") as e:
        env.flag({"FLAGOS_STRICT": "w" * LONG}, "FLAGOS_STRICT")
    assert len(str(e.value)) < 300


def test_glob_notes_quote_long_patterns_shortened():
    from torch_fl.routing import rules

    # '*' runs collapse when matched: this glob matches aten::abs, but its backend is unavailable here
    found = config.parse_text("*" * LONG + "abs = ascend\n", "f.conf")
    (note,) = rules.resolve(found)[1]
    assert "f.conf:1" in note and "... (300012 characters)" in note and len(note) < 1000  # "<glob> = ascend"
