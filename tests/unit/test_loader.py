"""Import-time checks: every bad setup is a clear error, never a crash."""

from __future__ import annotations

import pytest

from tests.conftest import ON_CUDA
from tests.helpers import run_python

pytestmark = pytest.mark.anyplatform


def _import_error(env: dict[str, str]) -> str:
    proc = run_python("import torch_fl", env=env)
    assert proc.returncode == 1, proc.stderr  # a Python exception, not a crash (negative return code)
    return proc.stderr


def test_unknown_accelerator_names_the_choices():
    err = _import_error({"FLAGOS_ACCELERATOR": "tpu"})
    assert "FlagosInitError" in err
    assert "FLAGOS_ACCELERATOR='tpu'" in err and "auto, cuda, cpu" in err


@pytest.mark.skipif(ON_CUDA, reason="a GPU is present here")
def test_cuda_requested_without_gpu_says_so():
    err = _import_error({"FLAGOS_ACCELERATOR": "cuda"})
    assert "FLAGOS_ACCELERATOR=cuda" in err and "FLAGOS_ACCELERATOR=cpu" in err


@pytest.mark.parametrize("value", ["0", "-1", "abc", "65"])
def test_bad_host_device_count(value):
    err = _import_error({"FLAGOS_ACCELERATOR": "cpu", "FLAGOS_HOST_DEVICES": value})
    assert f"FLAGOS_HOST_DEVICES={value!r}" in err


def test_bad_boolean_flag():
    err = _import_error({"FLAGOS_LOG_DISPATCH": "maybe"})
    assert "FLAGOS_LOG_DISPATCH='maybe' is not a boolean" in err


def test_privateuse1_owned_by_another_package():
    proc = run_python(
        """
        import torch
        torch.utils.rename_privateuse1_backend("npu")
        try:
            import torch_fl
        except Exception as e:
            print(type(e).__name__, e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("FlagosInitError")
    assert "already belongs to 'npu'" in proc.stdout and "torch_npu" in proc.stdout


def test_build_for_another_torch_is_reported(monkeypatch):
    import torch_fl._build_info as info
    from torch_fl import _loader

    monkeypatch.setattr(info, "TORCH_VERSION", "0.0.1")
    with pytest.raises(ImportError, match=r"built against torch 0\.0\.1.*pip install --no-build-isolation"):
        _loader._check_build_matches_torch()


def test_import_twice_is_harmless():
    proc = run_python(
        """
        import importlib, torch, torch_fl
        importlib.reload(torch_fl)
        print(torch.ones(2, device="flagos").sum().item())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2.0"
