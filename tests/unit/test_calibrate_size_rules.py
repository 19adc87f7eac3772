"""Size rules (op[dtype, numel>=N]): how the routing file says them, and how the C++ kernel picks a call's class
by its first tensor's element count (typed and boxed kernels, Python kernels, replay recordings).
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.unit.calibrate_fixtures import calls_of, gems, use_rules  # noqa: F401  (fixtures)
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (fixtures)
from torch_fl import routing
from torch_fl.__main__ import main
from torch_fl.routing import config, rules
from torch_fl.routing.state import STATE

pytestmark = pytest.mark.anyplatform


# --- the routing file's size rules ---------------------------------------------------------------------------


def test_size_rules_parse_with_and_without_dtypes():
    rs = config.parse_text(
        "mm[bfloat16, numel>=1048576] = flaggems  # calibrated: x\nmm[numel >= 64] = cpu\nmm[float16,bfloat16] = cpu\n"
    )
    assert [(r.dtype, r.min_numel) for r in rs] == [
        (torch.bfloat16, 1048576),
        (None, 64),
        (torch.float16, None),
        (torch.bfloat16, None),
    ]
    assert rs[0].written == "mm[bfloat16, numel>=1048576] = flaggems"
    assert config.parse_text(rs[0].written)[0] == rs[0]  # written re-parses to the same rule


@pytest.mark.parametrize(
    "line, message",
    [
        ("mm[numel>=abc] = cpu", "bad number 'abc'"),
        ("mm[numel>=1.5] = cpu", "bad number '1.5'"),
        ("mm[numel<5] = cpu", "unknown condition 'numel<5'"),
        ("mm[size>=5] = cpu", "unknown condition 'size>=5'"),
        ("mm[numel>=0] = cpu", "holds for every call"),
        ("mm[numel>=4, numel>=8] = cpu", "two size conditions"),
        ("mm[float32, numel>=x] = cpu", "bad number 'x'"),
        ("zeros[numel>=4] = cpu", "has no tensor argument"),
        ("mm[numel>=4] == cpu", "malformed line"),
    ],
)
def test_bad_size_rules_are_problems_with_file_and_line(line, message):
    problems = []
    config.parse_text(f"# header\n{line}\n", "bad.conf", problems=problems)
    assert len(problems) == 1, problems
    assert problems[0].line == 2 and message in problems[0].message


def test_validate_lists_size_rule_problems(tmp_path, capsys):
    f = tmp_path / "r.conf"
    f.write_text("mm[float32, numel>=64] = cpu\nmm[numel<3] = cpu\n")
    assert main(["validate", str(f)]) == 1
    assert "r.conf:2: unknown condition 'numel<3'" in capsys.readouterr().err


def test_precedence_dtype_before_size_larger_threshold_first():
    rs = config.parse_text(
        "mm = cpu\nmm[numel>=100] = cpu_fallback\nmm[float32] = native\nmm[float32, numel>=1000] = cpu_fallback\n"
        "mm[numel>=500] = native\n"
    )
    route = rules.resolve(rs)[0]["mm"]
    sizes = dict(route.by_size)
    # dtype-less calls: 100.. cpu_fallback, 500.. native
    assert [(n, r.backend) for n, r in sizes[None]] == [(100, "cpu_fallback"), (500, "native")]
    # float32: its dtype rule beats the dtype-less size rules; its own size rule takes 1000 and up
    assert [(n, r.backend) for n, r in sizes[torch.float32]] == [(1000, "cpu_fallback")]


def test_a_higher_layer_replaces_size_rules(routing_state):  # noqa: F811
    use_rules("mm[float32, numel>=16] = cpu_fallback\n")
    routing.set_route("mm", "native")
    assert STATE.resolved["mm"].by_size == ()


# --- the C++ kernel picks the class by the first tensor's element count ---------------------------------------


def test_the_kernel_routes_calls_by_size(routing_state):  # noqa: F811
    use_rules("mm[float32, numel>=100] = cpu_fallback\nmm[numel>=1000] = cpu_fallback\nmm[float16] = native\n")
    routing.reset_stats()
    small, big = torch.randn(5, 5, device="flagos"), torch.randn(20, 20, device="flagos")
    torch.testing.assert_close((big @ big).cpu(), big.cpu() @ big.cpu())
    small @ small
    assert calls_of("mm").get("cpu_fallback") == 1
    # float64 takes the dtype-less classes: 400 elements is below 1000, 1600 above
    routing.reset_stats()
    mid = torch.randn(20, 20, device="flagos", dtype=torch.float64)
    large = torch.randn(40, 40, device="flagos", dtype=torch.float64)
    mid @ mid
    large @ large
    assert calls_of("mm").get("cpu_fallback") == 1
    # float16 has a rule of its own: no dtype-less class applies to it
    routing.reset_stats()
    h = torch.randn(40, 40, device="flagos", dtype=torch.float16)
    h @ h
    assert "cpu_fallback" not in calls_of("mm")


def test_the_boxed_kernel_and_list_arguments_route_by_size(routing_state):  # noqa: F811
    use_rules("log[float32, numel>=64] = cpu_fallback\ncat[float32, numel>=64] = cpu_fallback\n")
    routing.reset_stats()
    x, y = torch.rand(8, device="flagos"), torch.rand(8, 8, device="flagos")
    torch.log(x), torch.log(y)
    torch.cat([x, x]), torch.cat([y, y])
    assert calls_of("log").get("cpu_fallback") == 1
    assert calls_of("cat").get("cpu_fallback") == 1


def test_a_python_kernel_runs_only_for_its_size_class(gems):  # noqa: F811
    seen = []

    def add(a, b, *, alpha=1):
        seen.append(a.numel())
        return torch.add(a, b, alpha=alpha)

    gems(**{"add.Tensor": add})
    use_rules("add.Tensor[float32, numel>=100] = flaggems_python\n")
    small, big = torch.ones(4, device="flagos"), torch.ones(10, 10, device="flagos")
    assert (small + small).cpu().tolist() == [2.0] * 4
    torch.testing.assert_close((big + big).cpu(), torch.full((10, 10), 2.0))
    assert seen == [100]


def test_replay_recordings_do_not_outlive_a_size_class(gems):  # noqa: F811
    seen = []

    def add(a, b, *, alpha=1):
        seen.append(a.numel())
        return torch.add(a, b, alpha=alpha)

    gems(**{"add.Tensor": add})
    use_rules("add.Tensor[float32, numel>=100] = flaggems\n")
    big = torch.ones(10, 10, device="flagos")
    for _ in range(3):
        big + big
    assert seen == [100]  # recorded once, replayed after
    assert torch_fl._C.PyRoute("add.Tensor").replay_stats()["hits"] >= 1
    # float32 keeps a fast class, but the recorded signature's size is below it now: it must not replay
    use_rules("add.Tensor[float32, numel>=1000] = flaggems\n")
    routing.reset_stats()
    torch.testing.assert_close((big + big).cpu(), torch.full((10, 10), 2.0))
    assert calls_of("add.Tensor").get("flaggems", 0) == 0
    assert seen == [100]
