"""CI slice of the OpInfo sweep: ~40 representative ops pass on flagos (native route)."""

import pytest
import torch

from torch_fl.conformance import SUBSET_CI, run_sweep


@pytest.mark.anyplatform
def test_ci_subset_passes():
    results = run_sweep(SUBSET_CI, limit=8, backward=True)
    assert len(results) >= len(SUBSET_CI)  # some names have several variants
    bad = {k: (r["status"], r["first_error"]) for k, r in results.items() if r["status"] != "pass"}
    assert not bad, bad


def _cli(*argv, tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.conformance", *argv, "--no-progress", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def _cpu_fallback_sweep(route_ops, ops, *extra, tmp_path):
    """A sweep that routes `route_ops` to cpu_fallback (a backend every host has) over `ops`."""
    return _cli(
        "--backend", "cpu_fallback", "--route-ops", route_ops, "--ops", ops, "--jobs", "1", *extra, tmp_path=tmp_path
    )


@pytest.mark.anyplatform
def test_routed_sweep_names_the_overloads_each_op_went_through(tmp_path):
    proc, doc = _cpu_fallback_sweep("abs,add.Tensor", "abs,add,neg", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc["meta"]["route_ops"] == ["abs", "add.Tensor"] and doc["meta"]["not_run"] == []
    ops = doc["ops"]
    assert ops["abs"]["routed"].get("abs", 0) > 0 and ops["add"]["routed"].get("add.Tensor", 0) > 0
    assert "abs" not in ops["neg"]["routed"] and ops["neg"]["fell_back"] == {}


@pytest.mark.anyplatform
def test_deadline_lists_ops_it_did_not_start(tmp_path):
    proc, doc = _cli("--ops", "nn.functional.*", "--jobs", "1", "--deadline", "0.001", tmp_path=tmp_path)
    assert doc is not None, proc.stderr[-2000:]
    assert len(doc["meta"]["not_run"]) > 50  # the op in flight (if any) finishes, no new one starts
    assert not set(doc["ops"]) & set(doc["meta"]["not_run"])
    assert "deadline reached" in proc.stderr


@pytest.mark.anyplatform
def test_route_ops_all_needs_an_available_backend(tmp_path):
    import torch_fl

    if torch_fl.backing() != "cpu":
        pytest.skip("host backing only: flaggems is unavailable there")
    proc, doc = _cli("--backend", "flaggems", "--route-ops", "all", "--ops", "abs", "--jobs", "0", tmp_path=tmp_path)
    assert proc.returncode != 0 and doc is None
    assert "--route-ops all: backend flaggems is unavailable" in proc.stderr


@pytest.mark.anyplatform
def test_own_routes_each_op_to_its_own_overloads_only(tmp_path):
    proc, doc = _cpu_fallback_sweep("own", "nn.functional.silu,mul", "--backward", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc["meta"]["route_ops"] == ["own"]
    silu, mul = doc["ops"]["nn.functional.silu"], doc["ops"]["mul"]
    assert set(silu["routed"]) == {"silu", "silu_backward"}  # its forward and backward, nothing else
    assert set(mul["routed"]) == {"mul.Tensor"}  # the gradient's own mul calls are mul's


@pytest.mark.anyplatform
def test_cuda_backing_branch_forward_from_native_gradients_from_cpu(monkeypatch):
    # The CUDA-backing branch on host: "native cuda" stands in as a second CPU run.
    from torch.testing._internal.common_methods_invocations import op_db

    from torch_fl.conformance import runner

    monkeypatch.setattr(runner, "forward_reference_device", lambda: "cuda")
    native_copies = []

    def to_native(v):
        native_copies.append(v)
        return runner._to_cpu_value(v)

    monkeypatch.setattr(runner, "_to_cuda_value", to_native)
    ops = {op.name: op for op in op_db if op.name in ("mul", "nn.functional.silu", "sort")}
    assert len(ops) == 3
    for name, op in ops.items():
        for backward in (False, True):
            native_copies.clear()
            res = runner.run_op(op, [runner.torch.float32], limit=4, backward=backward)
            assert res.status == "pass", (name, backward, res.first_error)
            assert native_copies, "the forward reference did not run on the backing device"


def _cuda_branch_on_host(monkeypatch):
    """The CUDA-backing branch of run_sample on host: "native cuda" runs as plain CPU copies,
    whose ids are recorded so an op can tell the CPU reference from the "native" run."""
    from torch_fl.conformance import runner

    monkeypatch.setattr(runner, "forward_reference_device", lambda: "cuda")
    native_ids = set()

    def to_native(v):
        out = runner._to_device_value(v, "cpu")
        native_ids.add(id(out))
        return out

    monkeypatch.setattr(runner, "_to_cuda_value", to_native)
    return runner, native_ids


def _sample():
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(torch.randn(3, 4, device="flagos", requires_grad=True))


@pytest.mark.anyplatform
def test_cuda_backing_gradients_not_judged_where_cpu_forward_differs(monkeypatch):
    # Dropout masks, singular vectors' signs: CPU gradients are no reference
    # when CPU's forward is not CUDA's.
    runner, native_ids = _cuda_branch_on_host(monkeypatch)

    def op(x):
        on_cpu_reference = x.device.type == "cpu" and id(x) not in native_ids
        return x * (3.0 if on_cpu_reference else 2.0)

    status, note = runner.run_sample(op, _sample(), backward=True, rtol=None, atol=None, metadata_only=False)
    assert (status, note) == ("pass", runner.NOT_JUDGED_NOTE)
    assert torch.is_grad_enabled()


class _ScaledGrad(torch.autograd.Function):
    """x * 2 whose CPU gradient is off by 1e-4 relative (another algorithm's rounding)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * (2 * (1 + 1e-4) if g.device.type == "cpu" else 2)


@pytest.mark.anyplatform
def test_cuda_backing_gradients_use_the_cuda_vs_cpu_tolerance(monkeypatch):
    from torch_fl.conformance import runner

    # The host-backing branch (CPU reference, default fp32 tolerance): the difference fails.
    monkeypatch.setattr(runner, "forward_reference_device", lambda: "cpu")
    status, note = runner.run_sample(
        _ScaledGrad.apply, _sample(), backward=True, rtol=None, atol=None, metadata_only=False
    )
    assert status == "fail" and "backward" in note
    # CUDA backing: PyTorch's CUDA-vs-CPU tolerance (1e-3) accepts it.
    runner, _ = _cuda_branch_on_host(monkeypatch)
    status, note = runner.run_sample(
        _ScaledGrad.apply, _sample(), backward=True, rtol=None, atol=None, metadata_only=False
    )
    assert (status, note) == ("pass", None)


@pytest.mark.anyplatform
def test_full_precision_on_cuda_works_when_pytorch_locked_the_flags(monkeypatch):
    # PyTorch's test utilities call disable_global_flags(); setting
    # torch.backends.cudnn.allow_tf32 then raises (seen under pytest on the H200).
    from torch_fl.conformance import runner

    monkeypatch.setattr(runner, "forward_reference_device", lambda: "cuda")
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.disable_global_flags()
    try:
        runner.full_precision_on_cuda()
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        # torch.backends is a module wrapper: unlock through the real module's globals.
        torch.backends.disable_global_flags.__globals__["__allow_nonbracketed_mutation_flag"] = True
        torch.backends.cuda.matmul.allow_tf32 = before[0]
        torch.backends.cudnn.allow_tf32 = before[1]


@pytest.mark.anyplatform
def test_outputs_on_a_device_the_sample_names_are_right():
    from torch_fl.conformance import runner

    out = torch.zeros(2)  # zeros_like(x, device="cuda") on a GPU: a CUDA result, not a flagos one
    assert runner._names_native_device(((), {"device": "cuda"})) and runner._names_native_device(
        ((), {"device": "cpu"})
    )
    assert not runner._names_native_device(((), {"device": "flagos:0"}))
    runner.compare(out, out, native_outputs_ok=True)
    with pytest.raises(AssertionError, match="expected a flagos tensor"):
        runner.compare(out, out)


@pytest.mark.anyplatform
def test_jiterator_ops_are_skipped_with_the_reason():
    from torch.testing._internal.common_methods_invocations import op_db

    from torch_fl.conformance import runner

    ops = [op for op in op_db if op.name.startswith("jiterator_")]
    assert ops
    res = runner.run_op(ops[0], [runner.torch.float32], limit=1)
    assert res.status == "skip" and "jiterator" in res.skip_reason
