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


def test_the_written_module_reads_back(tmp_path):
    path = tmp_path / "checks.py"
    table = {"logical_and": ["self"], "masked_fill.Scalar": ["mask", "self"]}
    cpu_scalars.write_module(str(path), table, "python -m torch_fl.conformance.cpu_scalars --write checks.py")
    namespace: dict = {}
    exec(path.read_text(), namespace)
    assert namespace["REFUSED"] == {"logical_and": ("self",), "masked_fill.Scalar": ("mask", "self")}
    assert "--write checks.py" in namespace["__doc__"]
