"""The accelerate adapter (opt-in: torch_fl.integrations.enable()).

Three gaps, where accelerate names its devices in code:

- The device: accelerate 1.16 asks torch.accelerator (flagos), earlier versions check a fixed list with
  cuda before any other, so on a GPU machine they train natively on CUDA, which PyTorch's autograd refuses
  in a process that registered flagos (PyTorch issue 161129). The adapter answers flagos whenever it is
  torch.accelerator's device and the user did not ask for the CPU.
- Several processes (`accelerate launch --multi_gpu`, `torchrun`, so Trainer's DDP): accelerate maps a
  device type to a process-group backend and a distributed type from fixed tables, has neither for flagos,
  and then runs each process alone with no error (or, on a GPU machine, over CUDA). With the adapter a
  multi-process flagos run is accelerate's device-agnostic DDP set-up (the one it uses for CPUs: DDP and
  barriers without device_ids) over the "flagos" process-group backend (NCCL on a GPU, gloo on host
  memory), each process on flagos:LOCAL_RANK. accelerate turns such a run into FSDP (a plugin, or
  `accelerate launch --use_fsdp`) only for its GPU-like types and would drop the plugin silently: the
  adapter turns it into FSDP as accelerate does for those (FSDP2's fully_shard runs on flagos).
- Checkpoints: `save_state`/`load_state` keep every CUDA device's generator, but for a device outside accelerate's
  list only the current device's; a process training on another flagos device (ACCELERATE_TORCH_DEVICE=flagos:1)
  resumed with other random numbers. With the adapter they keep every flagos device's (install_checkpointing).
"""

from __future__ import annotations

import functools
import inspect
import os

import torch

from torch_fl._core import DEVICE_NAME


def _flagos_is_the_accelerator() -> bool:
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == DEVICE_NAME


def install(state_module) -> None:
    """Installs the adapter; `state_module` is the imported accelerate.state module."""
    cls = state_module.PartialState
    if getattr(cls._prepare_backend, "_torch_fl", False):
        return
    DistributedType = state_module.DistributedType
    prepare_backend, set_device = cls._prepare_backend, cls.set_device
    default_device = cls.__dict__.get("default_device")

    @functools.wraps(prepare_backend)
    def _prepare_backend(self, cpu: bool = False, sagemaker_dp=False, backend: str | None = None):
        chosen, kind = prepare_backend(self, cpu, sagemaker_dp, backend)
        launched = int(os.environ.get("LOCAL_RANK", -1)) != -1
        # NO: accelerate found no backend for flagos; MULTI_GPU: it chose CUDA's NCCL over flagos's devices.
        if kind in (DistributedType.NO, DistributedType.MULTI_GPU) and launched and not cpu and not sagemaker_dp:
            if _flagos_is_the_accelerator():
                self._torch_fl_flagos = True
                return backend or DEVICE_NAME, DistributedType.MULTI_CPU
        return chosen, kind

    def _default_device(self):
        if _flagos_is_the_accelerator():
            return torch.device(DEVICE_NAME)
        return default_device.fget(self)

    @functools.wraps(set_device)
    def _set_device(self):
        if self.device is None and getattr(self, "_torch_fl_flagos", False):
            self.device = torch.device(DEVICE_NAME, self.local_process_index % torch.flagos.device_count())
            torch.flagos.set_device(self.device)
            return
        set_device(self)

    state_cls = state_module.AcceleratorState
    state_init = state_cls.__init__

    @functools.wraps(state_init)
    def _state_init(self, *args, **kwargs):
        first = not state_cls._shared_state
        state_init(self, *args, **kwargs)
        plugin = inspect.signature(state_init).bind(self, *args, **kwargs).arguments.get("fsdp_plugin")
        wanted = plugin is not None or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        flagos_run = getattr(self, "_torch_fl_flagos", False) and self.distributed_type == DistributedType.MULTI_CPU
        if first and wanted and flagos_run:
            # what AcceleratorState.__init__ does for its GPU-like types
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no" and plugin is not None:
                plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = plugin
            cls._shared_state["distributed_type"] = self.distributed_type

    _prepare_backend._torch_fl = True
    state_cls.__init__ = _state_init
    cls._prepare_backend = _prepare_backend
    cls.set_device = _set_device
    if isinstance(default_device, property):
        cls.default_device = property(_default_device, doc=default_device.__doc__)


class _EveryFlagosGenerator:
    """What accelerate's checkpointing calls on a named backend's module (torch.cuda's get/set_rng_state_all), for
    flagos. A checkpoint saved without the adapter holds the current device's state alone: restored there."""

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        return torch.flagos.get_rng_state_all()

    @staticmethod
    def set_rng_state_all(states) -> None:
        if isinstance(states, torch.Tensor):
            torch.flagos.set_rng_state(states)
        else:
            torch.flagos.set_rng_state_all(states)


def install_checkpointing(checkpointing_module) -> None:
    """Installs the checkpoint part; `checkpointing_module` is the imported accelerate.checkpointing module (its own
    name for the backend lookup: nothing else in accelerate changes)."""
    backend = getattr(checkpointing_module, "get_torch_accelerator_backend", None)
    if backend is None or getattr(backend, "_torch_fl", False):
        return  # an accelerate before 1.16 keeps generators by its own device list

    @functools.wraps(backend)
    def get_torch_accelerator_backend(*args, **kwargs):
        device_type, module = backend(*args, **kwargs)
        if device_type == DEVICE_NAME and module is torch.accelerator:
            return device_type, _EveryFlagosGenerator
        return device_type, module

    get_torch_accelerator_backend._torch_fl = True
    checkpointing_module.get_torch_accelerator_backend = get_torch_accelerator_backend
