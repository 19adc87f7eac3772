"""torch_fl/conformance/cpu_scalars.py, the measurement behind torch_fl/vocab/cpu_scalar_checks.py, run on flagos
over host memory: it sees what the committed entries make flagos refuse, and writes a module that reads back."""

from __future__ import annotations

import torch_fl  # noqa: F401
from torch_fl.conformance import cpu_scalars


def test_the_measurement_finds_the_arguments_flagos_refuses_and_those_it_takes():
    seen = cpu_scalars.measure("flagos", ops={"masked_fill", "logical_and", "add"})
    assert seen["masked_fill.Scalar"]["mask"]["refused"] and not seen["masked_fill.Scalar"]["mask"]["ok"]
    assert seen["add.Tensor"]["other"]["ok"] and not seen["add.Tensor"]["other"]["refused"]
    table = cpu_scalars.refused_arguments(seen)
    assert "mask" in table["masked_fill.Scalar"] and table["logical_and"] == ["self"]
    assert "add.Tensor" not in table


def test_the_measurement_finds_the_out_calls_refused_with_cpu_inputs_alone():
    seen = cpu_scalars.measure("flagos", ops={"exp", "linspace"})
    # exp is a structured TensorIterator operator (known from the yaml); linspace reads its ends on the host
    assert seen["exp.out"][cpu_scalars.ALL_INPUTS]["refused"] and not seen["exp.out"][cpu_scalars.ALL_INPUTS]["ok"]
    assert cpu_scalars.out_ops_refusing_cpu_inputs(seen) == ["exp.out"]
    assert cpu_scalars.out_ops_refusing_cpu_inputs(seen, already_known=["exp.out"]) == []
    assert all(cpu_scalars.ALL_INPUTS not in args for args in cpu_scalars.refused_arguments(seen).values())


def test_the_written_module_reads_back(tmp_path):
    path = tmp_path / "checks.py"
    table = {"logical_and": ["self"], "masked_fill.Scalar": ["mask", "self"]}
    command = "python -m torch_fl.conformance.cpu_scalars --write checks.py"
    cpu_scalars.write_module(str(path), table, ["abs.out", "angle.out"], command)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    assert namespace["REFUSED"] == {"logical_and": ("self",), "masked_fill.Scalar": ("mask", "self")}
    assert namespace["OUT_NEEDS_A_DEVICE_INPUT"] == ("abs.out", "angle.out")
    assert "--write checks.py" in namespace["__doc__"]
