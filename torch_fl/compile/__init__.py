"""torch.compile on flagos: Dynamo's device interface and inductor's backend for the flagos device.

`import torch_fl` installs both lazily: each registers itself when torch.compile first imports the Dynamo or
inductor module it belongs to (importing those at `import torch_fl` would cost more than a second), so
`torch.compile(model)` works on flagos tensors with nothing else to call.

- device_interface: streams, events, devices, synchronisation and properties (torch.flagos's) for Dynamo;
- device_api: torch.flagos.current_device/device_count/is_available/current_stream traceable by Dynamo;
- backend: inductor's Triton codegen on a CUDA backing, its C++/OpenMP codegen on host backing;
- wrapper: the generated Python wrapper's flagos rules and device lines;
- cudagraphs: mode='reduce-overhead' (inductor's CUDA graphs for flagos inference graphs on a CUDA backing);
- triton_target: on a CUDA backing, inductor's GPU paths and Triton's CUDA target for flagos;
- attention: scaled_dot_product_attention traceable on flagos (traced from metadata);
- convolution: fake convolutions on flagos predict the backing kernel's output layout;
- keep_calls: keep chosen (routed) operators as calls instead of fused kernels;
- rng_state: torch.flagos's RNG getters and setters run eagerly under Dynamo, as torch.cuda's.
docs/compile.md says what maps to what.
"""

from __future__ import annotations

from torch_fl._core import DEVICE_NAME
from torch_fl._import_hook import when_imported

_DYNAMO_MODULE = "torch._dynamo.device_interface"
_DYNAMO_PACKAGE = "torch._dynamo"  # torch._dynamo.disable, once the package is imported
_CALLBACK_MODULE = "torch._dynamo.callback"  # Dynamo's per-compilation context
# Imported by torch.compile's inductor backend; it imports the rest of inductor that registration touches.
_INDUCTOR_MODULE = "torch._inductor.compile_fx"
_FAKE_KERNELS_MODULE = "torch._subclasses.fake_impls"  # fake tensors' kernels (Dynamo, export, FakeTensorMode)


def _register_device_interface(module) -> None:
    from torch_fl.compile.device_interface import FlagosInterface

    module.register_interface_for_device(DEVICE_NAME, FlagosInterface)


def _rng_state_runs_eagerly(module) -> None:
    from torch_fl.compile import rng_state

    rng_state.install(module)


def _device_api_traceable(_dynamo) -> None:
    from torch_fl.compile import device_api

    device_api.install()


def _compile_window(module) -> None:
    import warnings

    from torch_fl.compile import attention

    handler = getattr(module, "callback_handler", None)
    if handler is None or not hasattr(handler, "install_callbacks"):
        warnings.warn(
            f"torch {torch_version()} has no per-compilation callback context in torch._dynamo.callback: "
            "scaled_dot_product_attention on flagos cannot be traced by torch.compile here (other operators can)",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    attention.install_traced_sdpa()
    attention.install_compile_window(handler)


def torch_version() -> str:
    import torch

    return torch.__version__


def _fake_convolutions(module) -> None:
    from torch_fl.compile import convolution

    convolution.install(module)


def _register_inductor(_module) -> None:
    from torch_fl.compile import backend

    backend.register()


def keep_as_calls(ops) -> None:
    """Keep `ops` ("silu", "mul.Tensor", ...; "flaggems": the operators routed to FlagGems now) as calls, on
    their routes, in flagos graphs compiled from now on (see keep_calls)."""
    from torch_fl.compile import keep_calls

    keep_calls.keep_as_calls(ops)


def stop_keeping(ops=None) -> None:
    """Let inductor fuse `ops` again (every kept operator when None) in flagos graphs compiled from now on."""
    from torch_fl.compile import keep_calls

    keep_calls.stop_keeping(ops)


def kept_calls() -> list[str]:
    """The operators kept as calls in flagos graphs, sorted."""
    from torch_fl.compile import keep_calls

    return keep_calls.kept_calls()


def keeping_calls(ops):
    """`with keeping_calls(["silu"]): ...`: `ops` kept as calls for compiles inside the block."""
    from torch_fl.compile import keep_calls

    return keep_calls.keeping_calls(ops)


def install() -> None:
    """Register flagos with Dynamo and inductor as soon as each is imported (now, if it already is)."""
    when_imported(_DYNAMO_MODULE, _register_device_interface)
    when_imported(_DYNAMO_PACKAGE, _rng_state_runs_eagerly)
    when_imported(_DYNAMO_PACKAGE, _device_api_traceable)
    when_imported(_CALLBACK_MODULE, _compile_window)
    when_imported(_FAKE_KERNELS_MODULE, _fake_convolutions)
    when_imported(_INDUCTOR_MODULE, _register_inductor)


def register() -> None:
    """Register flagos with Dynamo and inductor now (importing both); torch.compile does not need this."""
    import importlib

    _register_device_interface(importlib.import_module(_DYNAMO_MODULE))
    _rng_state_runs_eagerly(importlib.import_module(_DYNAMO_PACKAGE))
    _device_api_traceable(importlib.import_module(_DYNAMO_PACKAGE))
    _compile_window(importlib.import_module(_CALLBACK_MODULE))
    _fake_convolutions(importlib.import_module(_FAKE_KERNELS_MODULE))
    _register_inductor(importlib.import_module(_INDUCTOR_MODULE))


__all__ = ["install", "keep_as_calls", "keeping_calls", "kept_calls", "register", "stop_keeping"]
