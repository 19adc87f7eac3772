"""torch.flagos's device queries traceable by Dynamo, as torch.cuda's are.

Dynamo knows torch.cuda's functions by identity: its trace rules and constant-fold tables name
torch.cuda.current_device (folded, guarded by calling it again), torch.cuda.is_available (folded),
torch.cuda.current_stream (modelled on Dynamo's stream stack) and torch.cuda.stream (a stream context, through
the registered device interface's `stream`). torch.flagos's are Python functions of a third-party package:
Dynamo traces into them and stops at torch_fl._C (a pybind module it cannot trace), a graph break.

PyTorch's mechanism for "trace this instead of that function" is torch.compiler.substitute_in_graph: Dynamo
traces the substitute in place of the original, and the original stays what eager code calls (nothing changes
outside compiled code). The substitutes say what each function is in terms of torch.accelerator, whose
functions Dynamo models device-generically (flagos is torch.accelerator's device: a registered PrivateUse1
backend comes first), so the folding and guards are Dynamo's own:

- current_device: torch.accelerator.current_device_index(), folded and guarded with an equality check that
  calls it again, as torch.cuda.current_device is (a compiled function recompiles after set_device, never
  returns a stale index); folded at trace time, so inside a traced `with torch.flagos.stream(s)` on another
  device it says the device at entry, as torch.cuda.current_device does under Dynamo;
- device_count, is_available: folded, as torch.cuda.is_available is (torch.cuda.device_count is a graph break
  in Dynamo). Both are fixed for the process when `import torch_fl` initialises the device, so no guard;
- current_stream(): torch.accelerator.current_stream(), the stream on top of Dynamo's stream stack;
  current_stream(device) for the current device: that device's stream on the stack. Another device's current
  stream is a graph break (an error under fullgraph), then runs eagerly (torch.flagos.current_stream calls the
  C binding, which Dynamo does not model): Dynamo's stack answers with the current device's stream when it
  holds none of that device (torch.cuda.current_stream(i) gets that wrong answer silently);
`with torch.flagos.stream(s)` stays a graph break: traced as Dynamo's stream context, inductor's code for ops on
a side stream names the stream only inside a GPU device guard, which host-backed flagos never enters (NameError
at run time), and the CUDA-backed path is not verified.

install() runs once Dynamo is imported (torch_fl.compile registers it); eager programs never import this.
"""

from __future__ import annotations

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos import _device, _streams

_installed: list[bool] = []


def _current_device() -> int:
    return torch.accelerator.current_device_index()


def _device_count() -> int:
    return _device.device_count()  # folded: Dynamo calls the original at trace time and never traces this


def _is_available() -> bool:
    return _device.device_count() > 0  # folded, as _device_count


def _stream_of_another_device(index: int) -> torch.Stream:
    return torch.accelerator.current_stream(index)


# Run eagerly (a graph break): traced, Dynamo would answer with a stream of the current device.
_stream_of_another_device_eagerly = torch.compiler.disable(
    _stream_of_another_device,
    reason="torch.flagos.current_stream(device) of a device other than the current one runs eagerly: Dynamo "
    "models the current device's stream and the streams entered in the compiled code only",
)


def _current_stream(device=None) -> torch.Stream:
    if device is None:
        return torch.accelerator.current_stream()
    index = _device._index(device)
    if index != _device.current_device():
        return _stream_of_another_device_eagerly(index)
    return torch.accelerator.current_stream(torch.device(DEVICE_NAME, index))


def install() -> None:
    """Register the substitutes with Dynamo (idempotent)."""
    if _installed:
        return
    substitute = torch.compiler.substitute_in_graph
    substitute(_device.current_device)(_current_device)
    substitute(_device.device_count, can_constant_fold_through=True)(_device_count)
    substitute(_device.is_available, can_constant_fold_through=True)(_is_available)
    substitute(_streams.current_stream)(_current_stream)
    _installed.append(True)
