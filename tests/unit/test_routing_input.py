"""Routing input that must fail clearly or be accepted: odd files and bytes, deep includes, thousands of
unknown operators, rules that can never apply, and the operators only the native route may run."""

from __future__ import annotations

import os

import pytest
import torch

from torch_fl import routing
from torch_fl.__main__ import main
from torch_fl.routing import config, files, native_only, rules
from torch_fl.vocab import ops
from torch_fl.vocab.errors import ConfigError, RoutingError

pytestmark = pytest.mark.anyplatform


def write(tmp_path, name, data: bytes | str):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


# --- reading files ---------------------------------------------------------------------------------


def test_a_non_utf8_byte_is_reported_with_file_line_offset_and_fix(tmp_path):
    path = write(tmp_path, "latin1.conf", b"mm = cpu\n# caf\xe9\nad = cpu\n")
    problems = config.validate_file(path)
    assert (problems[0].file, problems[0].line) == (path, 2)
    msg = problems[0].message
    assert "not UTF-8: byte 0xe9 at byte offset 14" in msg and "re-save the file as UTF-8" in msg
    # the rest of the file is still checked
    assert (problems[1].line, "unknown operator 'ad'" in problems[1].message) == (3, True)
    with pytest.raises(ConfigError, match=r"latin1\.conf:2: not UTF-8"):
        config.load_file(path)


def test_a_utf8_bom_is_accepted(tmp_path):
    path = write(tmp_path, "bom.conf", b"\xef\xbb\xbfmm = cpu\n")
    assert [(r.pattern, r.backend, r.line) for r in config.load_file(path)] == [("mm", "cpu", 1)]


def test_a_directory_a_device_and_a_pipe_are_not_regular_files(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)  # nothing writes to it: reading must not wait for a writer
    for path, kind in [(str(tmp_path), "a directory"), (os.devnull, "a device"), (fifo, "a pipe")]:
        (p,) = config.validate_file(path)
        assert p.file == path and f"is {kind}, not a regular file" in p.message, p.message
        assert "does not exist" not in p.message


def test_a_missing_file_does_not_exist(tmp_path):
    (p,) = config.validate_file(str(tmp_path / "nope.conf"))
    assert "does not exist" in p.message


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_BYTES", 64)
    path = write(tmp_path, "big.conf", "mm = cpu\n" * 10)
    (p,) = config.validate_file(path)
    assert "larger than" in p.message and "check that this is the file you meant" in p.message


def test_an_include_of_a_directory_is_reported_at_the_include_line(tmp_path):
    (tmp_path / "sub").mkdir()
    top = write(tmp_path, "top.conf", "mm = cpu\ninclude sub\n")
    (p,) = config.validate_file(top)
    assert (p.file, p.line, p.text) == (top, 2, "include sub")
    assert "is a directory, not a regular file" in p.message


def test_include_depth_is_limited_and_the_chain_named(tmp_path):
    n = config.MAX_INCLUDE_DEPTH + 5
    for i in range(n):
        write(tmp_path, f"c{i}.conf", f"include c{i + 1}.conf\n")
    write(tmp_path, f"c{n}.conf", "mm = cpu\n")
    (p,) = config.validate_file(str(tmp_path / "c0.conf"))
    assert f"includes nested more than {config.MAX_INCLUDE_DEPTH} files deep" in p.message
    assert "c0.conf -> " in p.message and f"c{config.MAX_INCLUDE_DEPTH}.conf" in p.message
    assert p.line == 1 and p.file.endswith(f"c{config.MAX_INCLUDE_DEPTH - 1}.conf")


def test_validate_reads_the_file_once(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, "f.conf", "mm = cpu\n")
    reads = []
    real = files.read_text
    monkeypatch.setattr(config, "read_text", lambda p: reads.append(p) or real(p))
    assert main(["validate", path]) == 0
    assert reads == [path] and "OK (1 rule(s))" in capsys.readouterr().out


# --- unknown operators: bounded suggestions ----------------------------------------------------------


def test_a_thousand_unknown_operators_get_bounded_suggestions_and_a_count(tmp_path, monkeypatch):
    searched = []
    real = ops.closest
    monkeypatch.setattr(ops, "closest", lambda op, n=3: searched.append(op) or real(op, n))
    path = write(tmp_path, "wrong.conf", "".join(f"ad{i}x = cpu\n" for i in range(1000)))
    problems = config.validate_file(path)
    unknown = [p for p in problems if p.line is not None]
    assert len(unknown) == 1000 and all("unknown operator" in p.message for p in unknown)
    assert len(searched) == config.MAX_SUGGESTIONS
    (summary,) = [p for p in problems if p.line is None]
    assert summary.message.startswith(f"1000 unknown operators in all ('did you mean' for the first {20})")


# --- dtype rules need a tensor argument --------------------------------------------------------------


def test_has_tensor_args_reads_the_schema():
    assert not ops.has_tensor_args("zeros") and not ops.has_tensor_args("arange")
    assert ops.has_tensor_args("mm") and ops.has_tensor_args("cat") and ops.has_tensor_args("index.Tensor")


def test_a_dtype_rule_on_an_operator_without_tensors_is_an_error_with_the_fix(tmp_path):
    path = write(tmp_path, "z.conf", "mm[float32] = cpu\nzeros[float32] = cpu_fallback\n")
    (p,) = config.validate_file(path)
    assert (p.file, p.line) == (path, 2)
    assert "'zeros[float32]' never applies" in p.message and "first tensor argument's dtype" in p.message
    assert "Write 'zeros = cpu_fallback'" in p.message


def test_set_route_refuses_a_dtype_on_an_operator_without_tensors(routing_state):
    with pytest.raises(RoutingError, match="never applies"):
        routing.set_route("zeros[float32]", "cpu_fallback")
    assert ("zeros", torch.float32) not in routing_state.runtime_rules


def test_a_dtype_glob_skips_operators_without_tensors_and_explain_says_why(routing_state):
    (rule,) = config.parse_text("zero*[float32] = native\n", "g.conf")
    assert "zeros" not in rules.glob_targets(rule) and "zeros_like" in rules.glob_targets(rule)
    assert "no tensor argument" in rules.glob_skip_reason(rule, "zeros")


# --- the operators only the native route may run -----------------------------------------------------


def test_the_native_only_set_covers_the_fallback_and_transfer_machinery():
    for op in native_only.TRANSFER_OPS:
        assert ops.is_known(op), op
    every_to = {op for op in ops.aten_ops() if ops.split(op)[0] == "to"}
    assert every_to and every_to <= native_only.names()
    assert {"_to_cpu", "_to_copy", "copy_", "_copy_from", "_copy_from_and_resize"} <= native_only.names()
    assert native_only.core_ops() <= native_only.names()
    assert "add.Tensor" not in native_only.names() and "zeros" not in native_only.names()


@pytest.mark.parametrize("op", ["_to_cpu", "_to_copy", "to.dtype_layout", "copy_", "_copy_from", "view"])
def test_an_explicit_rule_routing_a_native_only_op_away_is_an_error(tmp_path, op):
    path = write(tmp_path, "m.conf", f"mm = cpu\n{op} = cpu_fallback\n{op} = native\n")
    (p,) = config.validate_file(path)
    assert (p.file, p.line) == (path, 2)
    assert f"aten::{op} cannot be routed to 'cpu_fallback'" in p.message and "Remove the rule" in p.message


def test_set_route_refuses_a_native_only_op(routing_state):
    with pytest.raises(RoutingError, match="cannot be routed to 'cpu_fallback'"):
        routing.set_route("_to_cpu", "cpu_fallback")
    routing.set_route("_to_copy", "native")  # a native route is what it runs anyway


def test_as_strided__stays_native_because_the_cpu_fallback_calls_it(routing_state):
    # The fallback gives an in-place result its host geometry with as_strided_: routed to the fallback,
    # as_strided_ called itself until the stack overflowed (a segfault), by set_route, env or glob alike.
    with pytest.raises(RoutingError, match="cannot be routed to 'cpu_fallback'"):
        routing.set_route("as_strided_", "cpu_fallback")
    resolved, _ = rules.resolve(config.parse_text("as_strided* = cpu_fallback\n", "g.conf"))
    assert "as_strided_" not in resolved and "as_strided_copy" in resolved
    routing.set_route("unsqueeze_", "cpu_fallback")  # an in-place view the fallback runs, via as_strided_
    x = torch.arange(6.0, device="flagos").reshape(2, 3)
    assert x.unsqueeze_(0).as_strided_((2, 2), (1, 2)).cpu().tolist() == [[0.0, 2.0], [1.0, 3.0]]


def test_a_glob_skips_native_only_ops_with_a_note():
    found = config.parse_text("* = cpu_fallback\n", "star.conf")
    resolved, notes = rules.resolve(found)
    assert not set(resolved) & native_only.names()
    assert "add.Tensor" in resolved and "zeros" in resolved
    (note,) = notes
    assert "star.conf:1: '* = cpu_fallback' leaves" in note and "_to_cpu" in note and "copy_" in note
    # a glob that matches none of them says nothing
    assert rules.resolve(config.parse_text("*_backward = cpu_fallback\n", "b.conf"))[1] == []


def test_validate_prints_the_glob_note(tmp_path, capsys):
    path = write(tmp_path, "star.conf", "* = cpu_fallback\n")
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert "OK (1 rule(s))" in out and "note: " in out and "_to_copy" in out


def test_a_name_without_a_default_overload_suggests_its_own_overloads():
    from torch_fl.vocab import ops

    # `add` has no default overload; `addr` looks alike but is another operator
    assert ops.closest("add") == ["add.Tensor", "add.Scalar", "add.Scalar_out"]
    assert "Did you mean add.Tensor, add.Scalar" in ops.unknown_op_message("add")
    assert ops.closest("Add.tensor")[0] == "add.Tensor"  # case-folded
    assert "softmax.int" in ops.closest("sofmax.int")
