"""FEP-style dispatch tests: FLAGOS_LOG_DISPATCH=1 plus an FLAGOS_OP_* override in a fresh process."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import ON_CUDA
from tests.helpers import run_python

ADD = """
import torch, torch_fl
x = torch.ones(4, device="flagos")
y = x + x
assert y.device.type == "flagos" and y.cpu().tolist() == [2.0] * 4, y
"""


def dispatch_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[flagos dispatch]")]


@pytest.mark.anyplatform
def test_env_override_logs_the_exact_line():
    backend = "cuda" if ON_CUDA else "cpu"
    p = run_python(ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": backend})
    assert p.returncode == 0, p.stderr
    assert f"[flagos dispatch] add.Tensor -> {backend}" in dispatch_lines(p.stderr)


@pytest.mark.anyplatform
def test_native_alias_is_logged_as_the_backing_device_that_ran():
    p = run_python(ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": "native"})
    assert p.returncode == 0, p.stderr
    assert f"[flagos dispatch] add.Tensor -> {'cuda' if ON_CUDA else 'cpu'}" in dispatch_lines(p.stderr)


@pytest.mark.anyplatform
@pytest.mark.skipif(ON_CUDA, reason="needs a backing where the cuda route is unavailable (host memory)")
def test_a_route_that_falls_back_logs_what_ran():
    p = run_python(ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": "cuda"})
    assert p.returncode == 0, p.stderr
    assert dispatch_lines(p.stderr).count("[flagos dispatch] add.Tensor -> cpu") == 1
    assert "FallbackWarning" in p.stderr and "ran natively instead" in p.stderr


@pytest.mark.anyplatform
def test_cpu_fallback_route_logs_dispatch_and_fallback():
    p = run_python(
        ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_LOG_FALLBACK": "1", "FLAGOS_OP_add__Tensor": "cpu_fallback"}
    )
    assert p.returncode == 0, p.stderr
    assert "[flagos dispatch] add.Tensor -> cpu_fallback" in p.stderr
    assert "[flagos cpu_fallback] aten::add.Tensor" in p.stderr


@pytest.mark.anyplatform
def test_no_log_without_the_flag():
    p = run_python(ADD, {"FLAGOS_OP_add__Tensor": "cpu_fallback"})
    assert p.returncode == 0, p.stderr
    assert dispatch_lines(p.stderr) == []


@pytest.mark.anyplatform
@pytest.mark.parametrize(
    "env, expected",
    [
        ({"FLAGOS_OP_ad__Tensor": "cpu"}, "FLAGOS_OP_add__Tensor"),
        ({"FLAGOS_OP_add__Tensor": "cdua"}, "Did you mean cuda"),
        ({"FLAGOS_BACKEND_CONFIG": "/nonexistent/routes.conf"}, "does not exist"),
        ({"FLAGOS_STRICT": "maybe"}, "is not a boolean"),
        ({"FLAGOS_USE_FLAGGEMS": "1", "FLAGOS_BACKEND_CONFIG": __file__}, "both set"),
    ],
)
def test_bad_env_fails_at_import_with_the_fix(env, expected):
    p = run_python("import torch_fl", env)
    assert p.returncode != 0
    assert expected in p.stderr


@pytest.mark.anyplatform
def test_user_config_file_with_bad_line_fails_at_import(tmp_path):
    conf = tmp_path / "r.conf"
    conf.write_text("add.Tensor = cpu_fallback\nmm = flagems\n")
    p = run_python("import torch_fl", {"FLAGOS_BACKEND_CONFIG": str(conf)})
    assert p.returncode != 0 and f"{conf}:2: unknown backend 'flagems'" in p.stderr


@pytest.mark.anyplatform
def test_user_config_file_routes_and_shows_in_routes_cli(tmp_path):
    conf = tmp_path / "r.conf"
    conf.write_text("# mine\nadd.Tensor = cpu_fallback\n")
    code = ADD + "\nfrom torch_fl.__main__ import main\nmain(['routes', '--json'])\n"
    p = run_python(code, {"FLAGOS_BACKEND_CONFIG": str(conf), "FLAGOS_LOG_DISPATCH": "1"})
    assert p.returncode == 0, p.stderr
    assert "[flagos dispatch] add.Tensor -> cpu_fallback" in p.stderr
    routes = json.loads(p.stdout)["routes"]
    assert routes == [
        {
            "op": "add.Tensor",
            "backend": "cpu_fallback",
            "source": f"user file {conf}:2",
            "dtype": None,
            "runs_on": "cpu_fallback",
            "reason": None,
        },
        {  # its out= overload takes its rule (docs/routing.md, out= overloads)
            "op": "add.out",
            "backend": "cpu_fallback",
            "source": f"user file {conf}:2 (via add.Tensor)",
            "dtype": None,
            "runs_on": "cpu_fallback",
            "reason": None,
        },
    ]


@pytest.mark.anyplatform
def test_flaggems_profile_imports_everywhere_and_says_where_ops_run():
    code = ADD + "\nimport torch_fl.routing as r\nprint([e.runs_on for e in r.table() if e.op == 'add.Tensor'][0])\n"
    p = run_python(code, {"FLAGOS_USE_FLAGGEMS": "1", "FLAGOS_LOG_DISPATCH": "1"})
    assert p.returncode == 0, p.stderr
    # The line names the backend that ran: FlagGems on a GPU with flag_gems, else the native route.
    ran = "flaggems" if ON_CUDA and importlib.util.find_spec("flag_gems") else ("cuda" if ON_CUDA else "cpu")
    assert f"[flagos dispatch] add.Tensor -> {ran}" in dispatch_lines(p.stderr)
    if not ON_CUDA:
        assert p.stdout.strip().splitlines()[-1] == "native (cpu)"


@pytest.mark.anyplatform
def test_cli_commands_run():
    for args in (["info"], ["routes", "--op", "add*"], ["explain", "mm", "--dtype", "bfloat16"]):
        p = run_python(f"import sys; from torch_fl.__main__ import main; sys.exit(main({args!r}))")
        assert p.returncode == 0, (args, p.stderr)
    p = run_python("import sys; from torch_fl.__main__ import main; sys.exit(main(['explain', 'ad.Tensor']))")
    assert p.returncode == 1 and "add.Tensor" in p.stderr


@pytest.mark.cuda
def test_cuda_override_logs_cuda():
    p = run_python(ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": "cuda"})
    assert p.returncode == 0, p.stderr
    assert "[flagos dispatch] add.Tensor -> cuda" in dispatch_lines(p.stderr)


FLAGGEMS_ADD = """
import torch, torch_fl, torch_fl.routing as r
x = torch.randn(1024, device="flagos")
y = x + x
ref = torch_fl.as_native(x) + torch_fl.as_native(x)
assert torch.allclose(torch_fl.as_native(y), ref)
s = [s for s in r.stats() if s.op == "add.Tensor" and s.backend != "native"]
assert s and s[0].calls == 1 and s[0].fallbacks == 0, s
"""


@pytest.mark.flaggems
def test_flaggems_override_runs_flaggems():
    p = run_python(
        FLAGGEMS_ADD, {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": "flaggems", "FLAGOS_STRICT": "1"}
    )
    assert p.returncode == 0, p.stderr
    assert "[flagos dispatch] add.Tensor -> flaggems" in dispatch_lines(p.stderr)


@pytest.mark.flaggems_python
@pytest.mark.parametrize("name", ["flaggems_python", "flagos_python"])
def test_flaggems_python_override_runs_flaggems(name):
    env = {"FLAGOS_LOG_DISPATCH": "1", "FLAGOS_OP_add__Tensor": name, "FLAGOS_STRICT": "1"}
    p = run_python(FLAGGEMS_ADD, env)
    assert p.returncode == 0, p.stderr
    assert "[flagos dispatch] add.Tensor -> flagos_python" in dispatch_lines(p.stderr)  # FEP 0025's name


PROFILE_OPS = """
import torch, torch_fl, torch_fl.routing as r
from torch_fl.routing import config
rules = [x for x in config.load_file(config.default_file("cuda", True)) if x.backend == "flaggems"]
x = torch.randn(64, 64, device="flagos") ; y = torch.rand(64, 64, device="flagos") + 0.5
samples = {
    "add.Tensor": lambda: x + y, "sub.Tensor": lambda: x - y, "mul.Tensor": lambda: x * y,
    "div.Tensor": lambda: x / y, "neg": lambda: -x, "abs": lambda: x.abs(), "exp": lambda: x.exp(),
    "rsqrt": lambda: y.rsqrt(), "pow.Tensor_Scalar": lambda: x ** 2, "mean.dim": lambda: x.mean(1),
    "sum.dim_IntList": lambda: x.sum(1), "silu": lambda: torch.nn.functional.silu(x),
    "sigmoid": lambda: x.sigmoid(), "cos": lambda: x.cos(), "sin": lambda: x.sin(),
    "_softmax": lambda: x.softmax(-1), "where.self": lambda: torch.where(x > 0, x, y),
}
for rule in rules:
    got = samples[rule.pattern]()
    with r.route({rule.pattern: "native"}):
        want = samples[rule.pattern]()
    assert torch.allclose(got.cpu(), want.cpu(), rtol=1e-4, atol=1e-5), rule.pattern
bad = [s for s in r.stats() if s.backend == "flaggems" and (s.fallbacks or s.failures or not s.calls)]
assert not bad, bad
"""


@pytest.mark.flaggems
def test_flaggems_profile_matches_native():
    p = run_python(PROFILE_OPS, {"FLAGOS_USE_FLAGGEMS": "1"}, timeout=600)
    assert p.returncode == 0, p.stderr
