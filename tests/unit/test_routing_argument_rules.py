"""Argument rules (op[arg=value]): how the routing file says them, how they rank among the other rules, and how
the C++ kernel picks a call's class by the value of that argument (boxed and typed kernels, size classes inside a
value class, Python kernels, replay recordings).
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.unit.calibrate_fixtures import calls_of, gems, use_rules  # noqa: F401  (fixtures)
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (fixtures)
from torch_fl import routing
from torch_fl.routing import config, rules
from torch_fl.routing.state import STATE

pytestmark = pytest.mark.anyplatform


# --- the routing file's argument rules -----------------------------------------------------------------------


def test_argument_rules_parse_numbers_and_booleans_with_dtypes_and_sizes():
    rs = config.parse_text(
        "pow.Tensor_Scalar[exponent=2] = cpu\n"
        "pow.Tensor_Scalar[float32, exponent=-0.5, numel>=64] = cpu_fallback  # calibrated: x\n"
        "sum.dim_IntList[keepdim=true] = cpu_fallback\n"
        "leaky_relu[negative_slope=1e-2] = cpu\n"
    )
    assert [(r.dtype, r.arg, r.min_numel) for r in rs] == [
        (None, ("exponent", 2), None),
        (torch.float32, ("exponent", -0.5), 64),
        (None, ("keepdim", True), None),
        (None, ("negative_slope", 0.01), None),
    ]
    assert rs[1].written == "pow.Tensor_Scalar[float32, exponent=-0.5, numel>=64] = cpu_fallback"
    assert rs[2].written == "sum.dim_IntList[keepdim=true] = cpu_fallback"
    for r in rs:  # written re-parses to the same rule
        again = config.parse_text(r.written)[0]
        assert (again.pattern, again.backend, again.dtype, again.arg, again.min_numel) == (
            r.pattern, r.backend, r.dtype, r.arg, r.min_numel
        )  # fmt: skip


@pytest.mark.parametrize(
    "line, message",
    [
        ("pow.Tensor_Scalar[power=2] = cpu", "'power' is not an argument of it in aten::pow.Tensor_Scalar"),
        ("add.Tensor[other=2] = cpu", "'other' is not a number or boolean in aten::add.Tensor's schema"),
        ("mm[alpha=1] = cpu", "the arguments a condition can test: none"),
        ("pow.Tensor_Scalar[exponent=two] = cpu", "bad value 'two'"),
        ("pow.Tensor_Scalar[exponent=nan] = cpu", "bad value 'nan'"),
        ("pow.Tensor_Scalar[exponent=2, exponent=3] = cpu", "two argument conditions in one rule"),
        ("pow.*[exponent=2] = cpu", "needs one operator, not a glob"),
        ("pow.Tensor_Scalar[exponent<2] = cpu", "unknown condition 'exponent<2'"),
    ],
)
def test_bad_argument_rules_are_problems_with_file_and_line(line, message):
    problems = []
    config.parse_text(f"# header\n{line}\n", "bad.conf", problems=problems)
    assert len(problems) == 1, problems
    assert problems[0].line == 2 and message in problems[0].message


def test_one_operators_rules_test_one_argument():
    problems = []
    config.parse_text("clamp[min=0] = cpu\nclamp[max=6] = cpu\nclamp[min=1] = cpu\n", "c.conf", problems=problems)
    assert [p.line for p in problems] == [2]
    assert "clamp's rules already test the argument 'min'" in problems[0].message


def test_precedence_dtype_before_argument_before_size():
    rs = config.parse_text(
        "pow.Tensor_Scalar = cpu\n"
        "pow.Tensor_Scalar[exponent=2] = cpu_fallback\n"
        "pow.Tensor_Scalar[numel>=100] = native\n"
        "pow.Tensor_Scalar[float64] = native\n"
        "pow.Tensor_Scalar[float16, exponent=2, numel>=1000] = cpu_fallback\n"
    )
    route = rules.resolve(rs)[0]["pow.Tensor_Scalar"]
    assert route.arg == "exponent"
    values = dict(route.by_value)
    # dtype-less calls with exponent 2: the argument rule at every size (it outranks the size rule)
    [(v, base, sizes)] = values[None]
    assert (v, base.backend, sizes) == (2, "cpu_fallback", ())
    # float64 has a dtype rule: it outranks the dtype-less argument rule, so exponent 2 changes nothing
    assert torch.float64 not in values
    # float16: the dtype-less argument rule below 1000 elements, its own rule from 1000
    [(v, base, sizes)] = values[torch.float16]
    assert base.backend == "cpu_fallback" and [(n, r.written) for n, r in sizes] == [
        (1000, "pow.Tensor_Scalar[float16, exponent=2, numel>=1000] = cpu_fallback")
    ]


# --- the C++ kernel picks the class by the argument's value ---------------------------------------------------


def test_the_kernel_routes_calls_by_an_argument_and_compares_numbers_by_value(routing_state):  # noqa: F811
    use_rules("pow.Tensor_Scalar[exponent=3] = cpu_fallback\n")
    routing.reset_stats()
    x = torch.arange(4.0, device="flagos")
    assert torch.equal((x**2).cpu(), torch.arange(4.0) ** 2)
    assert torch.equal((x**3).cpu(), torch.arange(4.0) ** 3)
    assert torch.equal((x**3.0).cpu(), torch.arange(4.0) ** 3)  # 3.0 is 3
    x**3.5
    assert calls_of("pow.Tensor_Scalar") == {"cpu_fallback": 2, "native": 2}
    # the out= overload takes the functional overload's argument rule
    out = torch.empty(4, device="flagos")
    torch.pow(x, 3, out=out)
    torch.pow(x, 2, out=out)
    assert calls_of("pow.Tensor_Scalar_out") == {"cpu_fallback": 1, "native": 1}


def test_dtype_rules_and_size_classes_inside_an_argument_class(routing_state):  # noqa: F811
    use_rules(
        "pow.Tensor_Scalar[exponent=2] = cpu_fallback\n"
        "pow.Tensor_Scalar[float64] = native\n"
        "pow.Tensor_Scalar[float32, exponent=3, numel>=64] = cpu_fallback\n"
    )
    small, big = torch.ones(8, device="flagos"), torch.ones(100, device="flagos")
    routing.reset_stats()
    small**2, small.half() ** 2  # every dtype without a rule of its own takes the dtype-less value class
    small.double() ** 2  # float64's dtype rule outranks it
    assert calls_of("pow.Tensor_Scalar") == {"cpu_fallback": 2, "native": 1}
    routing.reset_stats()
    small**3, big**3  # float32, exponent 3: from 64 elements up
    assert calls_of("pow.Tensor_Scalar") == {"cpu_fallback": 1, "native": 1}


def test_a_bool_argument_and_the_typed_kernel(routing_state):  # noqa: F811
    use_rules("sum.dim_IntList[keepdim=true] = cpu_fallback\nadd.Tensor[alpha=2] = cpu_fallback\n")
    routing.reset_stats()
    x = torch.ones(3, 4, device="flagos")
    assert x.sum(1, keepdim=True).shape == (3, 1) and x.sum(1).shape == (3,)
    assert calls_of("sum.dim_IntList") == {"cpu_fallback": 1, "native": 1}
    # add.Tensor has a typed kernel: a plan with argument rules classifies its calls on the boxed path
    assert torch.equal(torch.add(x, x, alpha=2).cpu(), torch.full((3, 4), 3.0))
    assert torch.equal((x + x).cpu(), torch.full((3, 4), 2.0))
    assert calls_of("add.Tensor") == {"cpu_fallback": 1, "native": 1}


def test_a_python_kernel_runs_only_for_its_value_and_recordings_do_not_outlive_it(gems):  # noqa: F811
    seen = []

    def pow_(a, exponent):
        seen.append(exponent)
        return torch.pow(a, exponent)

    gems(**{"pow.Tensor_Scalar": pow_})
    use_rules("pow.Tensor_Scalar[exponent=3] = flaggems\n")
    x = torch.full((4,), 2.0, device="flagos")
    for _ in range(3):
        assert torch.equal((x**3).cpu(), torch.full((4,), 8.0))
        assert torch.equal((x**2).cpu(), torch.full((4,), 4.0))
    assert seen == [3]  # recorded once, replayed after; exponent 2 never reached it
    assert torch_fl._C.PyRoute("pow.Tensor_Scalar").replay_stats()["hits"] >= 1
    # exponent 3 runs natively now: the recording made under the old class must not replay
    use_rules("pow.Tensor_Scalar[exponent=4] = flaggems\n")
    routing.reset_stats()
    assert torch.equal((x**3).cpu(), torch.full((4,), 8.0))
    assert calls_of("pow.Tensor_Scalar") == {"native": 1}
    assert seen == [3]


def test_explain_and_table_show_argument_classes(routing_state):  # noqa: F811
    use_rules("pow.Tensor_Scalar[exponent=2] = cpu_fallback\n")
    e = routing.explain("pow.Tensor_Scalar", torch.float32)
    assert [(v.condition, v.runs_on) for v in e.values] == [("exponent=2", "cpu_fallback")]
    assert e.candidates[0].status == "value class"
    assert "exponent=2          pow.Tensor_Scalar[exponent=2] = cpu_fallback" in str(e)
    assert e.as_dict()["values"][0]["condition"] == "exponent=2"
    rows = [r for r in routing.table() if r.op == "pow.Tensor_Scalar"]
    assert [(r.dtype, r.runs_on) for r in rows] == [("exponent=2", "cpu_fallback")]
    assert STATE.resolved["pow.Tensor_Scalar"].arg == "exponent"
