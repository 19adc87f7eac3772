"""PyTorch Lightning and Lightning Fabric on flagos, through Lightning's own registries.

When Lightning is imported after `import torch_fl`, `register` puts into Lightning's registries (its
extension points; nothing of Lightning changes):

- the accelerator "flagos" (`FlagosAccelerator`: devices are `torch.device("flagos", i)`),
- the strategies "single_flagos" (one device), "ddp_flagos" and "ddp_spawn_flagos" (DDP over the
  "flagos" process-group backend, started as Lightning's "ddp" (popen) and "ddp_spawn" are).

    Trainer(accelerator="flagos", devices=1, strategy="single_flagos", precision="bf16-mixed")
    Trainer(accelerator="flagos", devices=2, strategy="ddp_spawn_flagos")  # FLAGOS_HOST_DEVICES=2 on host
    Fabric(accelerator="flagos", devices=1, strategy="single_flagos")

Why the strategy has to be named:

- One device: Lightning 2.x gives `SingleDeviceStrategy(device="cpu")` to every accelerator but cuda and mps
  (`_AcceleratorConnector._choose_strategy`), and the strategy, not the accelerator, places the model. So
  `accelerator="flagos"` alone would train on the CPU; FlagosAccelerator refuses that CPU device with an
  error that names "single_flagos" instead. The Trainer also takes `strategy=SingleDeviceStrategy("flagos:0")`
  (FlagosAccelerator.setup points its precision at flagos); Fabric has no such hook, so there mixed precision
  needs "single_flagos".
- Several devices: Lightning's DDP strategies pick the "flagos" backend by themselves (from
  `torch.distributed.Backend.default_device_backend_map`), but build DistributedDataParallel under a new
  `torch.cuda.Stream` for every device but the CPU, which fails where CUDA is absent (host backing).
- Mixed precision: Lightning autocasts on "cuda" for every accelerator but cpu and mps, which leaves flagos
  tensors in fp32. The flagos strategies (and, for the Trainer, FlagosAccelerator.setup) point the
  precision plugin at "flagos" (`torch.autocast("flagos")`, a `torch.amp.GradScaler("flagos")` for fp16).

Lightning comes as `lightning` (lightning.pytorch, lightning.fabric) and as the standalone
`pytorch_lightning` / `lightning_fabric`: distinct class hierarchies, so each gets classes of its own,
built on first use by `accelerator_class(package)` and the two strategy factories, and named in this module
as below (the names also let a spawned process unpickle them). Nothing here imports Lightning before the
caller does.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import Any

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl._import_hook import when_imported

ACCELERATOR_NAME = DEVICE_NAME
SINGLE_DEVICE_STRATEGY = "single_flagos"
DDP_STRATEGIES = {"ddp_flagos": "popen", "ddp_spawn_flagos": "spawn"}  # name -> DDPStrategy start_method

# The Trainer packages and the Fabric each of them builds on.
_FABRIC = {
    "lightning.pytorch": "lightning.fabric",
    "pytorch_lightning": "lightning_fabric",
    "lightning.fabric": "lightning.fabric",
    "lightning_fabric": "lightning_fabric",
}
PACKAGES = tuple(_FABRIC)

# The modules whose import should call `register` (each accelerators module registers the strategies too,
# once its package's strategies module is imported).
HOOK_MODULES = tuple(f"{package}.accelerators" for package in PACKAGES)

_PREFIX = {
    "lightning.pytorch": "",
    "pytorch_lightning": "PL",
    "lightning.fabric": "Fabric",
    "lightning_fabric": "PLFabric",
}
_KINDS = {"FlagosAccelerator": "accelerator", "SingleFlagosStrategy": "single", "DDPFlagosStrategy": "ddp"}
# Module-level name -> (package, kind), e.g. "PLFabricDDPFlagosStrategy" -> ("lightning_fabric", "ddp").
_NAMES = {_PREFIX[p] + base: (p, kind) for p in PACKAGES for base, kind in _KINDS.items()}


def _is_trainer(package: str) -> bool:
    return _FABRIC[package] != package


def _check_package(package: str) -> None:
    if package not in _FABRIC:
        raise ValueError(f"torch_fl.integrations.lightning: unknown Lightning package {package!r}; known: {PACKAGES}")


def _name(package: str, kind: str) -> str:
    return next(name for name, where in _NAMES.items() if where == (package, kind))


def _publish(cls: type, package: str, kind: str) -> type:
    # Pickle finds a class by module and qualified name: a spawned DDP process unpickles the strategy and the
    # accelerator through this module's __getattr__.
    cls.__name__ = cls.__qualname__ = _name(package, kind)
    cls.__module__ = __name__
    globals()[cls.__name__] = cls
    return cls


def parse_devices(devices: Any) -> list[int]:
    """Lightning's `devices` argument as flagos device indices.

    An int n is the first n devices (-1: all of them), a list or tuple names the indices, a string is either
    ("3", "-1", "0,2", "1,"; "[1]" and "[0, 2]" are lists too), and "auto" is all devices."""
    count = torch.flagos.device_count()
    if isinstance(devices, str):
        text = devices.strip()
        listed = text.startswith("[") and text.endswith("]")  # "[1]" names device 1, not a count of one
        text = text[1:-1].strip() if listed else text
        if text in ("auto", "-1") and not listed:
            return list(range(count))
        if "," in text or listed:
            devices = [int(part) for part in text.split(",") if part.strip()]
        else:
            try:
                devices = int(text)
            except ValueError:
                raise ValueError(f"flagos: devices={devices!r} is not a count, a list of indices or 'auto'") from None
    if isinstance(devices, bool) or devices is None:
        raise TypeError(f"flagos: devices={devices!r}; give a count, a list of indices, -1 or 'auto'")
    if isinstance(devices, int):
        if devices == -1:
            return list(range(count))
        if not 0 < devices <= count:
            raise ValueError(
                f"flagos: devices={devices} asks for {devices} device(s), this process has {count} "
                "(host backing: FLAGOS_HOST_DEVICES=N gives N)"
            )
        return list(range(devices))
    if isinstance(devices, (list, tuple)):
        indices = [torch.device(d).index if isinstance(d, torch.device) else int(d) for d in devices]
        bad = [i for i in indices if i is None or not 0 <= i < count]
        if not indices or bad or len(set(indices)) != len(indices):
            raise ValueError(f"flagos: devices={list(devices)} must be distinct indices in [0, {count})")
        return indices
    raise TypeError(f"flagos: devices={devices!r}; give a count, a list of indices, -1 or 'auto'")


def _retarget_precision(precision: Any, package: str) -> Any:
    """Lightning builds mixed precision for "cuda" for every accelerator but cpu and mps; flagos tensors autocast
    only under torch.autocast("flagos"), so the plugin is pointed at flagos (in place: a subclass stays)."""
    amp = importlib.import_module(f"{package}.plugins.precision").MixedPrecision
    if not isinstance(precision, amp) or precision.device == DEVICE_NAME:
        return precision
    precision.device = DEVICE_NAME
    scaler = precision.scaler
    # torch.amp.GradScaler keeps its device only privately; a scaler for another device would skip (on a CPU-only
    # torch: disable itself for) the flagos gradients, so a flagos scaler takes over its settings.
    if isinstance(scaler, torch.amp.GradScaler) and getattr(scaler, "_device", DEVICE_NAME) != DEVICE_NAME:
        flagos_scaler = torch.amp.GradScaler(DEVICE_NAME)
        # Its settings and running scale; empty where it disabled itself (a CUDA scaler made without CUDA keeps
        # none of them: torch warns it is disabled), and the flagos scaler then starts from the defaults.
        if state := scaler.state_dict():
            flagos_scaler.load_state_dict(state)
        precision.scaler = flagos_scaler
    return precision


def _not_flagos_error(device: torch.device) -> ValueError:
    return ValueError(
        f"FlagosAccelerator was given the device {device}: for one device Lightning picks "
        "SingleDeviceStrategy(device='cpu') for every accelerator but cuda and mps, which would train on the CPU. "
        f"Name the strategy: strategy={SINGLE_DEVICE_STRATEGY!r}; for several devices "
        f"{' or '.join(map(repr, DDP_STRATEGIES))}."
    )


@functools.cache
def accelerator_class(package: str = "lightning.pytorch") -> type:
    """The flagos Accelerator subclass for `package` (lightning.pytorch, pytorch_lightning, lightning.fabric,
    lightning_fabric)."""
    _check_package(package)
    base = importlib.import_module(f"{package}.accelerators.accelerator").Accelerator

    class Flagos(base):
        """Lightning accelerator for flagos devices (`torch.device("flagos", i)`)."""

        def setup_device(self, device: torch.device) -> None:
            device = torch.device(device)
            if device.type != DEVICE_NAME:
                raise _not_flagos_error(device)
            torch.flagos.set_device(device)

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            return torch.flagos.memory_stats(device)

        def teardown(self) -> None:
            torch.flagos.empty_cache()

        @staticmethod
        def parse_devices(devices: Any) -> list[int]:
            return parse_devices(devices)

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            return [torch.device(DEVICE_NAME, i) for i in parse_devices(devices)]

        @staticmethod
        def auto_device_count() -> int:
            return torch.flagos.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch.flagos.is_available()

        @staticmethod
        def name() -> str:
            return ACCELERATOR_NAME

        @classmethod
        def register_accelerators(cls, accelerator_registry: Any) -> None:
            _register(accelerator_registry, ACCELERATOR_NAME, cls, description=cls.__name__)

    if _is_trainer(package):

        def setup(self, trainer: Any) -> None:
            strategy = trainer.strategy
            lightning_ddp = importlib.import_module(f"{package}.strategies").DDPStrategy
            if isinstance(strategy, lightning_ddp) and type(strategy)._setup_model is lightning_ddp._setup_model:
                if not torch.cuda.is_available():
                    # Lightning's DDPStrategy would fail a moment later, in each process, creating a torch.cuda.Stream.
                    raise ValueError(
                        f"{type(strategy).__name__} wraps the model under a torch.cuda.Stream, and this process has "
                        f"no CUDA; on flagos use strategy={' or '.join(map(repr, DDP_STRATEGIES))}"
                    )
            # Lightning's own strategies (SingleDeviceStrategy("flagos:0"), "ddp") carry a precision plugin that
            # autocasts on "cuda"; the strategy calls this first thing in its setup, before any forward pass.
            strategy.precision_plugin = _retarget_precision(strategy.precision_plugin, package)

        Flagos.setup = setup

    return _publish(Flagos, package, "accelerator")


def _precision_property(base: type, package: str, attribute: str) -> property:
    """The strategy's precision property (`precision_plugin` in the Trainer, `precision` in Fabric) with a setter
    that points mixed precision at flagos as Lightning's connector hands it over."""
    inherited = getattr(base, attribute)

    def setter(self, precision):
        inherited.fset(self, _retarget_precision(precision, package))

    return property(inherited.fget, setter)


def _accelerator_property(base: type, package: str) -> property:
    """The strategy's accelerator property, refusing one that is not flagos's: Lightning gives a strategy named
    without `accelerator="flagos"` the accelerator it picks itself (cuda or the CPU), and the model would train
    there, with mixed precision pointed at flagos and so off."""
    inherited = base.accelerator

    def setter(self, accelerator):
        if accelerator is not None and not isinstance(accelerator, accelerator_class(package)):
            raise ValueError(
                f"{type(self).__name__} (strategy={SINGLE_DEVICE_STRATEGY!r}, {' or '.join(map(repr, DDP_STRATEGIES))})"
                f" runs on flagos devices, and Lightning chose the accelerator {type(accelerator).__name__} for it: "
                f"pass accelerator={ACCELERATOR_NAME!r} as well"
            )
        inherited.fset(self, accelerator)

    return property(inherited.fget, setter)


@functools.cache
def single_device_strategy_class(package: str = "lightning.pytorch") -> type:
    """SingleDeviceStrategy on a flagos device, registered as "single_flagos"."""
    _check_package(package)
    base = importlib.import_module(f"{package}.strategies").SingleDeviceStrategy
    precision_attribute = "precision_plugin" if _is_trainer(package) else "precision"

    class Single(base):
        """One flagos device: `device` if given, else the one Lightning's `devices` names (default flagos:0)."""

        strategy_name = SINGLE_DEVICE_STRATEGY

        def __init__(self, device: Any = None, **kwargs: Any) -> None:
            super().__init__(device=DEVICE_NAME if device is None else device, **kwargs)
            if self._root_device.type != DEVICE_NAME:
                raise ValueError(f"{type(self).__name__} runs on a flagos device, got {self._root_device}")
            if self._root_device.index is None:  # "flagos" is the current device, as for "cuda"
                self._root_device = torch.device(DEVICE_NAME, torch.flagos.current_device())
            # Lightning's connector gives the accelerator's devices (Trainer(devices=[1])) to a strategy that has
            # `parallel_devices` and none of its own; a device named here is kept instead.
            self.parallel_devices = [] if device is None else [self._root_device]

        @property
        def parallel_devices(self) -> list[torch.device]:
            return self._flagos_devices

        @parallel_devices.setter
        def parallel_devices(self, devices: Any) -> None:
            devices = [torch.device(d) for d in devices or []]
            if len(devices) > 1:
                raise ValueError(
                    f"strategy={SINGLE_DEVICE_STRATEGY!r} runs one device, got {len(devices)} ({devices}): pass "
                    f"devices=1 (devices='auto' means all), or a DDP strategy ({', '.join(DDP_STRATEGIES)})"
                )
            self._flagos_devices = devices

        @property
        def root_device(self) -> torch.device:
            return self.parallel_devices[0] if self.parallel_devices else self._root_device

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            _register(strategy_registry, cls.strategy_name, cls, description="one flagos device")

    setattr(Single, precision_attribute, _precision_property(base, package, precision_attribute))
    Single.accelerator = _accelerator_property(base, package)
    return _publish(Single, package, "single")


@functools.cache
def ddp_strategy_class(package: str = "lightning.pytorch") -> type:
    """DDPStrategy over flagos devices, registered as "ddp_flagos" (popen) and "ddp_spawn_flagos" (spawn)."""
    _check_package(package)
    base = importlib.import_module(f"{package}.strategies").DDPStrategy
    precision_attribute = "precision_plugin" if _is_trainer(package) else "precision"

    def wrap(self, module: torch.nn.Module) -> torch.nn.parallel.DistributedDataParallel:
        # As Lightning's DDPStrategy, without the torch.cuda.Stream it enters for any device but the CPU: that
        # fails where CUDA is absent, and flagos tensors run on flagos streams. The process-group backend is
        # already "flagos": Lightning takes it from torch.distributed's default backend for the device type.
        return torch.nn.parallel.DistributedDataParallel(
            module=module, device_ids=self._flagos_device_ids(), **self._ddp_kwargs
        )

    class DDP(base):
        """DDP with one process per flagos device, over the "flagos" process-group backend."""

        def _flagos_device_ids(self) -> list[int] | None:
            if _is_trainer(package):
                return self.determine_ddp_device_ids()
            return self._determine_ddp_device_ids()

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            for name, start_method in DDP_STRATEGIES.items():
                _register(
                    strategy_registry,
                    name,
                    cls,
                    description=f"DDP on flagos devices, start_method={start_method!r}",
                    start_method=start_method,
                )

    # The Trainer's DDPStrategy wraps the model in _setup_model, Fabric's in setup_module.
    setattr(DDP, "_setup_model" if _is_trainer(package) else "setup_module", wrap)
    setattr(DDP, precision_attribute, _precision_property(base, package, precision_attribute))
    DDP.accelerator = _accelerator_property(base, package)
    return _publish(DDP, package, "ddp")


def _register(registry: Any, name: str, cls: type, **kwargs: Any) -> None:
    # Idempotent for torch_fl's own classes (register may run more than once: a hook and an explicit call);
    # a "flagos" someone else registered stays.
    present = dict.get(registry, name)  # the registries' own get() instantiates the entry
    if present is not None:
        owner = present.get("accelerator") or present.get("strategy")
        if getattr(owner, "__module__", None) != __name__:
            return
    registry.register(name, cls, override=True, **kwargs)


def register(module: Any) -> None:
    """Register flagos with the Lightning module just imported: an accelerators module (one of HOOK_MODULES)
    gets FlagosAccelerator, and its package's strategies module, now or when it is imported, the strategies.
    """
    package, _, kind = module.__name__.rpartition(".")
    _check_package(package)
    if kind not in ("accelerators", "strategies"):
        raise ValueError(
            f"torch_fl.integrations.lightning.register: not a Lightning registry module: {module.__name__}"
        )
    trainer = _is_trainer(package)
    try:
        if kind == "accelerators":
            registry = module.AcceleratorRegistry if trainer else module.ACCELERATOR_REGISTRY
            accelerator_class(package).register_accelerators(registry)
            # The strategies module imports the accelerators, so it is not importable yet while Lightning is
            # still importing this one.
            when_imported(f"{package}.strategies", register)
            if trainer:  # the Trainer package's Fabric, imported already (the Trainer package imports it)
                when_imported(f"{_FABRIC[package]}.accelerators", register)
        else:
            registry = module.StrategyRegistry if trainer else module.STRATEGY_REGISTRY
            single_device_strategy_class(package).register_strategies(registry)
            ddp_strategy_class(package).register_strategies(registry)
    except Exception as error:  # this runs inside Lightning's import, which must not fail for it
        warnings.warn(
            f"torch_fl: flagos could not be registered with {module.__name__} ({error!r}); this Lightning version "
            "may differ from the 2.x this integration was written for",
            RuntimeWarning,
            stacklevel=2,
        )


def register_all() -> list[str]:
    """Import each installed Lightning package's accelerators module and register flagos; returns the packages.

    `import torch_fl` arranges this for every package on its import; call it to register explicitly."""
    done = []
    for package in PACKAGES:
        try:
            module = importlib.import_module(f"{package}.accelerators")
        except ImportError:
            continue
        register(module)
        register(importlib.import_module(f"{package}.strategies"))
        done.append(package)
    return done


def __getattr__(name: str) -> type:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    package, kind = _NAMES[name]
    factory = {"accelerator": accelerator_class, "single": single_device_strategy_class, "ddp": ddp_strategy_class}
    return factory[kind](package)


__all__ = [
    "ACCELERATOR_NAME",
    "DDP_STRATEGIES",
    "HOOK_MODULES",
    "PACKAGES",
    "SINGLE_DEVICE_STRATEGY",
    "accelerator_class",
    "ddp_strategy_class",
    "parse_devices",
    "register",
    "register_all",
    "single_device_strategy_class",
]
