"""The transformers adapter (opt-in: torch_fl.integrations.enable()). Six gaps, each where transformers
names its devices in code (transformers 5.x):

- `TrainingArguments` picks its device from a fixed list (cuda first, else ACCELERATE_TORCH_DEVICE or cpu)
  although accelerate, which it runs on, picks torch.accelerator's device: the Trainer then moves the model
  to flagos and each batch to cuda or cpu. The adapter takes accelerate's device when that is flagos.
- `TrainingArguments(bf16=True)` asks `is_torch_bf16_gpu_available()`, which knows a fixed list of device
  modules: flagos answers with `torch.flagos.is_bf16_supported()`.
- Hub kernels: `from_pretrained` kernelizes by default when the `kernels` package is installed (transformers
  depends on it) and hands kernels the device type as a string, which kernels checks against its own list
  ('Unsupported device type flagos'). Handed as a torch.device, kernels finds no kernel for flagos and keeps
  each layer's own forward, as it does on any device without a hub kernel.
- `pipeline(device=i)`, `pipeline()` (device 0) and a pipeline over a model loaded with a device map (its
  first device, an index) turn an index into a device from a fixed list (cuda, npu, xpu, ...; else the CPU):
  the adapter makes it flagos:i when flagos is torch.accelerator's device, as cuda:i on a GPU.
- A checkpoint's `rng_state.pth` holds the generators of a fixed list of devices (cuda, npu, hpu, ...): a
  resumed run drew other dropout masks than the uninterrupted one. The Trainer's checkpoints also keep
  flagos's generators (every device's, in flagos_rng_state.pth), and its resume restores them.
- `generate()` with a static cache compiles the model's forward (CUDA graphs under `torch.compile`) only on a
  fixed list of devices (cuda, xpu, ...; not the CPU): flagos over a GPU counts as one, through
  transformers' own switch for other devices (`CompileConfig._compile_all_devices`). flagos over host memory
  stays eager, as the CPU does.
"""

from __future__ import annotations

import copy
import functools
import os
import sys

import torch

from torch_fl._core import DEVICE_NAME, backing


def _on_flagos(device) -> bool:
    return getattr(device, "type", None) == DEVICE_NAME


def _setup_devices_on_flagos(original):
    @functools.wraps(original)
    def _setup_devices(self):
        device = original(self)
        state = getattr(self, "distributed_state", None)
        # accelerate chose flagos (torch.accelerator's device) and the user did not ask for the CPU.
        if not self.use_cpu and state is not None and _on_flagos(state.device) and not _on_flagos(device):
            device = state.device
            self._n_gpu = 1  # one flagos device per process: no nn.DataParallel over CUDA GPUs
            if device.index is not None:
                torch.flagos.set_device(device)
        return device

    return _setup_devices


def _bf16_with_flagos(original):
    @functools.wraps(original)
    def is_torch_bf16_gpu_available() -> bool:
        acc = torch.accelerator.current_accelerator()
        if acc is not None and acc.type == DEVICE_NAME:
            return torch.flagos.is_bf16_supported()
        return original()

    return is_torch_bf16_gpu_available


def _device_type_for_kernels(original):
    @functools.wraps(original)
    def get_device_type(device=None):
        if isinstance(device, int):  # a device map's accelerator index (device_map="auto" over flagos devices)
            device = torch.device(DEVICE_NAME, device)
        kind = original(device)
        return torch.device(DEVICE_NAME) if kind == DEVICE_NAME else kind

    return get_device_type


def install_training_args(training_args) -> None:
    """The device and bf16 parts; `training_args` is the imported transformers.training_args module."""
    cls = training_args.TrainingArguments
    prop = cls.__dict__["_setup_devices"]
    if not getattr(prop.func, "_torch_fl", False):
        wrapped = _setup_devices_on_flagos(prop.func)
        wrapped._torch_fl = True
        new = functools.cached_property(wrapped)
        new.__set_name__(cls, "_setup_devices")
        cls._setup_devices = new

    # Every module that bound the name at its import (training_args did: `from .utils import ...`).
    original = training_args.is_torch_bf16_gpu_available
    if not getattr(original, "_torch_fl", False):
        patched = _bf16_with_flagos(original)
        patched._torch_fl = True
        for name in ("transformers.utils.import_utils", "transformers.utils", "transformers.training_args"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "is_torch_bf16_gpu_available", None) is original:
                module.is_torch_bf16_gpu_available = patched


def install_hub_kernels(hub_kernels) -> None:
    """The kernels part; `hub_kernels` is the imported transformers.integrations.hub_kernels module. Versions
    whose kernelize does not look the device type up there do not have the gap."""
    if hasattr(hub_kernels, "get_device_type") and not getattr(hub_kernels.get_device_type, "_torch_fl", False):
        patched = _device_type_for_kernels(hub_kernels.get_device_type)
        patched._torch_fl = True
        hub_kernels.get_device_type = patched


def _pipeline_on_flagos(original):
    @functools.wraps(original)
    def __init__(self, *args, device=None, **kwargs):
        acc = torch.accelerator.current_accelerator()
        if acc is None or acc.type != DEVICE_NAME:
            return original(self, *args, device=device, **kwargs)
        if isinstance(device, int) and device >= 0:
            device = torch.device(DEVICE_NAME, device)
        model = args[0] if args else kwargs.get("model")
        device_map = getattr(model, "hf_device_map", None)
        if device is None and device_map is None:
            device = torch.device(DEVICE_NAME, 0)  # transformers' default device 0, as cuda:0 on a GPU
        original(self, *args, device=device, **kwargs)
        first = next(iter(device_map.values()), None) if device is None and device_map else None
        if isinstance(first, int):  # the map's first device, an accelerator index: where inputs go
            self.device = torch.device(DEVICE_NAME, first)

    return __init__


def install_pipelines(pipelines_base) -> None:
    """The pipeline part; `pipelines_base` is the imported transformers.pipelines.base module."""
    cls = pipelines_base.Pipeline
    if not getattr(cls.__init__, "_torch_fl", False):
        patched = _pipeline_on_flagos(cls.__init__)
        patched._torch_fl = True
        cls.__init__ = patched


def _rng_file(trainer, directory: str) -> str:
    """This process's file of flagos generator states in a checkpoint directory, beside the Trainer's own
    rng_state.pth (named per process as the Trainer names its own)."""
    name = (
        "flagos_rng_state.pth" if trainer.args.world_size <= 1 else f"flagos_rng_state_{trainer.args.process_index}.pth"
    )
    return os.path.join(directory, name)


def _save_rng_with_flagos(original):
    @functools.wraps(original)
    def _save_rng_state(self, output_dir: str) -> None:
        original(self, output_dir)  # it makes output_dir
        torch.save(torch.flagos.get_rng_state_all(), _rng_file(self, output_dir))

    return _save_rng_state


def _load_rng_with_flagos(original):
    @functools.wraps(original)
    def _load_rng_state(self, checkpoint) -> None:
        original(self, checkpoint)
        if checkpoint is None or not os.path.isfile(_rng_file(self, checkpoint)):
            return  # a checkpoint saved without the adapter: the Trainer restored what it saved
        saved = torch.load(_rng_file(self, checkpoint), weights_only=True)
        torch.flagos.set_rng_state_all(saved[: torch.flagos.device_count()])

    return _load_rng_state


def install_trainer(trainer_module) -> None:
    """The checkpoint part; `trainer_module` is the imported transformers.trainer module."""
    cls = trainer_module.Trainer
    for name, wrap in (("_save_rng_state", _save_rng_with_flagos), ("_load_rng_state", _load_rng_with_flagos)):
        if not getattr(getattr(cls, name), "_torch_fl", False):
            patched = wrap(getattr(cls, name))
            patched._torch_fl = True
            setattr(cls, name, patched)


def _uses_compilable_cache(model_kwargs) -> bool:
    """generate's own test of its cache (a static or other compilable cache, not the dynamic one)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    # transformers names it "cache" since 5.2x, "past_key_values" before
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    decoder_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    return cache is not None and cache.is_compileable and type(decoder_cache) is not DynamicCache


def _auto_compile_on_flagos(original):
    @functools.wraps(original)
    def _valid_auto_compile_criteria(self, model_kwargs, generation_config):
        given = generation_config.compile_config
        # Only where generate would compile on a GPU: without a config of the user's, with a compilable cache
        # (else a config passed in here would make generate warn of one the user never set).
        if (
            generation_config.disable_compile
            or not _on_flagos(self.device)
            or backing() != "cuda"
            or (given is None and not _uses_compilable_cache(model_kwargs))
        ):
            return original(self, model_kwargs, generation_config)
        from transformers.generation.configuration_utils import CompileConfig

        forced = copy.copy(given) if given is not None else CompileConfig()
        forced._compile_all_devices = True  # on this call's copy: the caller's config is left as it was
        generation_config.compile_config = forced
        try:
            return original(self, model_kwargs, generation_config)
        finally:
            generation_config.compile_config = given
            if given is not None:
                given.fullgraph = forced.fullgraph  # generate turns it off for flash attention, on the config

    return _valid_auto_compile_criteria


def install_generation(generation_utils) -> None:
    """The compiled-generate part; `generation_utils` is the imported transformers.generation.utils module.
    Versions without the criteria method do not have the gap."""
    cls = generation_utils.GenerationMixin
    original = getattr(cls, "_valid_auto_compile_criteria", None)
    if original is not None and not getattr(original, "_torch_fl", False):
        patched = _auto_compile_on_flagos(original)
        patched._torch_fl = True
        cls._valid_auto_compile_criteria = patched
