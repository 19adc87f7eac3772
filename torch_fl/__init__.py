"""torch_fl: the `flagos` PyTorch device with per-operator routing.

`import torch_fl` registers the device; tensors then live on "flagos" /
"flagos:N" and `torch.flagos` holds the device API (shaped like torch.cuda).
"""

import torch

from torch_fl._core import _C, DEVICE_NAME, VERSION, as_flagos, as_native, backing
from torch_fl._loader import FlagosInitError, initialize

_first_import = initialize(_C)

from torch_fl import flagos  # noqa: E402  (needs the device registered)

if _first_import:  # torch.flagos, Tensor.flagos(), Module.flagos(), ...: once per process
    torch._register_device_module(DEVICE_NAME, flagos)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

__version__ = VERSION

if backing() == "cuda":  # the engine's assert on native CUDA backward, raised with its cause and fix
    from torch_fl import native_backward

    native_backward.install()

from torch_fl import multiprocessing  # noqa: E402

multiprocessing.install()  # flagos tensors on torch.multiprocessing queues and pipes, share_memory_()

from torch_fl import routing  # noqa: E402  (reads the routing config and env once, registers kernels)

routing._startup()

from torch_fl import compile  # noqa: E402  (torch.compile on flagos: registers with Dynamo/inductor on their import)

compile.install()

from torch_fl import distributed  # noqa: E402

distributed.register()  # the "flagos" torch.distributed backend (docs/distributed.md)

from torch_fl import integrations  # noqa: E402

integrations._startup()  # Lightning's registry on its import; adapters only on opt-in (docs/integrations.md)


def get_registered_ops() -> list[str]:
    """The operators whose calls run FlagGems kernels now (for some dtype at least), as the FEP 0025
    reference implementation names them."""
    return routing.flaggems_ops()


def is_flaggems_enabled() -> bool:
    """True when some operator's calls run FlagGems kernels now."""
    return bool(routing.flaggems_ops())


def is_flaggems_available() -> bool:
    """True when FlagGems can run here (flag_gems imports and a GPU backs flagos)."""
    return routing.backends.get("flaggems").available()


def calibrate(fn, output=None, **kwargs):
    """Measured routing: record `fn()`'s flagos calls, time each on native and on FlagGems, and write the
    routing file `output` that picks the faster correct backend per (operator, dtype, size class).
    See torch_fl.calibration.calibrate for the options; docs/routing.md, Measured routing."""
    from torch_fl.calibration import calibrate as run

    return run(fn, output, **kwargs)


__all__ = [
    "DEVICE_NAME",
    "FlagosInitError",
    "as_flagos",
    "as_native",
    "backing",
    "calibrate",
    "compile",
    "distributed",
    "flagos",
    "get_registered_ops",
    "integrations",
    "is_flaggems_available",
    "is_flaggems_enabled",
    "multiprocessing",
    "routing",
]
