"""flagos in the libraries people train and serve with (docs/integrations.md).

Most of the ecosystem reaches flagos through PyTorch's generic accelerator API (`torch.accelerator`,
`torch.get_device_module`), which `import torch_fl` answers in full: accelerate's `Accelerator`, PEFT,
diffusers and `generate` need nothing more. Two other kinds of help are kept apart here:

- **Extension points** that a library offers: Lightning's accelerator registry gets `FlagosAccelerator`
  under the name "flagos" as soon as Lightning is imported (nothing of Lightning's changes).
- **Adapters** for libraries that name their devices in code and offer no extension point (transformers'
  `TrainingArguments` and hub kernels, accelerate's multi-process set-up, safetensors' device names).
  An adapter changes another library's behaviour, so it is installed only on the user's explicit opt-in:
  `torch_fl.integrations.enable()` (or `FLAGOS_INTEGRATIONS=1` in the environment, for launchers), and
  each is written down with the upstream gap it covers. Without the opt-in, the first import of such a
  library says once which calls need it (an `IntegrationWarning`).

An adapter is installed when its library is imported (now, if it already is): enabling costs no import.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import warnings

from torch_fl._import_hook import when_imported

# Adapter name -> (what it covers, [(module whose import installs a part, "module:function" installing it)]).
ADAPTERS = {
    "transformers": (
        "Trainer trains on flagos (TrainingArguments picks cuda or cpu), bf16=True on host backing, "
        "from_pretrained(device_map='flagos') and model.train() with the kernels package, pipeline(device=i) "
        "and pipeline() on flagos:i (an index names cuda:i or the CPU), an exact resume_from_checkpoint "
        "(flagos's generators in the checkpoint), generate() with a static cache compiled on flagos over a GPU",
        [
            ("transformers.training_args", "torch_fl.integrations.transformers:install_training_args"),
            ("transformers.integrations.hub_kernels", "torch_fl.integrations.transformers:install_hub_kernels"),
            ("transformers.pipelines.base", "torch_fl.integrations.transformers:install_pipelines"),
            ("transformers.trainer", "torch_fl.integrations.transformers:install_trainer"),
            ("transformers.generation.utils", "torch_fl.integrations.transformers:install_generation"),
        ],
    ),
    "accelerate": (
        "accelerate launch / torchrun with several processes: DDP over the flagos backend, or FSDP2 with an "
        "FSDP plugin (accelerate otherwise runs each process alone); save_state/load_state with every flagos "
        "device's generator",
        [
            ("accelerate.state", "torch_fl.integrations.accelerate:install"),
            ("accelerate.checkpointing", "torch_fl.integrations.accelerate:install_checkpointing"),
        ],
    ),
    "safetensors": (
        "safetensors.torch.load_file(path, device='flagos') and safe_open(path, 'pt', device='flagos'), which "
        "accelerate's load_checkpoint_and_dispatch and PEFT's torch_device load through",
        [("safetensors", "torch_fl.integrations.safetensors:install")],
    ),
}

_enabled: set[str] = set()


class IntegrationWarning(UserWarning):
    """A library imported with torch_fl needs `torch_fl.integrations.enable()` for some of its calls."""


def enable(*names: str) -> list[str]:
    """Opt in to the adapters `names` (all of them by default); returns the names now enabled.

    Each is installed when its library is imported, or at once if it already is."""
    chosen = names or tuple(ADAPTERS)
    unknown = [n for n in chosen if n not in ADAPTERS]
    if unknown:
        raise ValueError(f"torch_fl.integrations.enable: unknown adapter(s) {unknown}; known: {sorted(ADAPTERS)}")
    for name in chosen:
        if name in _enabled:
            continue
        _enabled.add(name)
        for module, installer in ADAPTERS[name][1]:
            when_imported(module, _installer(installer))
    return sorted(_enabled)


def enabled() -> list[str]:
    """The adapters opted in to so far."""
    return sorted(_enabled)


def _installer(spec: str):
    def install(module) -> None:
        import importlib

        path, func = spec.split(":")
        getattr(importlib.import_module(path), func)(module)

    return install


_noticed: set[str] = set()


def _notice(name: str):
    """The once-per-library message for a library imported without its adapter."""

    def notice(module) -> None:
        # accelerate's adapter covers launched runs of several processes (one process finds flagos through
        # torch.accelerator): the notice waits for a launcher's WORLD_SIZE, not every transformers import
        launched = int(os.environ.get("WORLD_SIZE", "1") or "1") > 1
        if name in _enabled or name in _noticed or (name == "accelerate" and not launched):
            return
        level = _importer_stacklevel(module)
        if level is not None:  # a user's import, not one of torch_fl's tools'
            _noticed.add(name)
            warnings.warn(
                f"torch_fl: {name} does not reach flagos by itself for: {ADAPTERS[name][0]}. "
                "Call torch_fl.integrations.enable() (or set FLAGOS_INTEGRATIONS=1) to install torch_fl's "
                "adapter; see torch_fl's docs/integrations.md",
                IntegrationWarning,
                stacklevel=level,
            )

    return notice


def _importer_stacklevel(module) -> int | None:
    """warnings.warn's stacklevel, from its caller, of the line that imported `module`: the first frame outside
    importlib, torch_fl, `module`'s own package (transformers imports its parts lazily, from its own code) and
    the installed libraries (peft imports transformers' models for `from transformers import TrainingArguments`).
    None where there is none: torch_fl's own tools (`python -m torch_fl demo`) or a library imported it."""
    own = tuple(
        os.path.dirname(m.__file__) + os.sep
        for m in (sys.modules[__name__.partition(".")[0]], sys.modules.get(module.__name__.partition(".")[0]))
        if getattr(m, "__file__", None)
    )
    paths = sysconfig.get_paths()
    skipped = own + tuple(os.path.join(paths[k], "") for k in ("purelib", "platlib", "stdlib"))
    frame, level = sys._getframe(2), 2  # the caller of warnings.warn's caller (notice), which is level 1
    while frame is not None:
        name = frame.f_code.co_filename
        bootstrap = "importlib" in name and "_bootstrap" in name  # frames warnings.warn does not count
        if not (bootstrap or f"{os.sep}importlib{os.sep}" in name or name.startswith(skipped + ("<frozen ",))):
            return level
        frame, level = frame.f_back, level + (not bootstrap)
    return None


def _startup() -> None:
    """Called once by `import torch_fl`: Lightning's registries, the environment's opt-in, the notices."""
    from torch_fl.integrations import lightning  # imports no Lightning: registers as each package is imported

    for module in lightning.HOOK_MODULES:
        when_imported(module, lightning.register)
    choice = _environment_choice(os.environ.get("FLAGOS_INTEGRATIONS", ""))
    if choice:
        enable(*choice)
    # The notices name the opt-in where a library would otherwise fail or pick another device; safetensors
    # refuses 'flagos' with an error of its own, and torch_fl.integrations.load_file is the documented path.
    # A library imported before torch_fl gets no notice: the enable() that usually follows `import torch_fl`
    # has not run yet, and the notice would name an opt-in the next line makes.
    # transformers' notice comes with the first of its training arguments, its models (whose hub-kernels module
    # refuses from_pretrained(device_map="flagos") with an error of its own) and its pipelines.
    for name, modules in (("transformers", (0, 1, 2)), ("accelerate", (0,))):
        for module in (ADAPTERS[name][1][i][0] for i in modules):
            if name not in _enabled and choice != () and module not in sys.modules:
                when_imported(module, _notice(name))


def _environment_choice(raw: str) -> tuple[str, ...] | None:
    """FLAGOS_INTEGRATIONS's adapters: None where unset (the notices stay), () for off (0, false, no, off), all of
    them for on (1, true, yes, on, all), else a comma list of names, in any case."""
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return None if not value else ()
    if value in ("1", "true", "yes", "on", "all"):
        return tuple(ADAPTERS)
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if unknown := [n for n in names if n not in ADAPTERS]:
        raise ValueError(
            f"FLAGOS_INTEGRATIONS={raw.strip()[:80]!r}: unknown adapter(s) {unknown}; use 1 (all), 0 (none) or a "
            f"comma list of {sorted(ADAPTERS)}"
        )
    return names


def load_file(filename, device="flagos"):
    """safetensors.torch.load_file onto flagos without an adapter: onto the backing device, then zero copy."""
    from torch_fl.integrations.safetensors import load_file as load

    return load(filename, device)


__all__ = ["ADAPTERS", "IntegrationWarning", "enable", "enabled", "load_file"]
