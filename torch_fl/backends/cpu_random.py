"""The cpu_fallback route of random operators: the CPU kernel draws from the flagos generator of the call's device.

The C++ CPU fallback (at::native::cpu_fallback) hands the CPU kernel the generator a call was given (a
flagos generator's backing one); given none, a CPU kernel draws from the CPU's global generator. A flagos
call would then ignore torch.flagos.manual_seed and move torch.get_rng_state(). So a random operator routed
to cpu_fallback runs the kernel made here instead, a routing 'kernel' target on the call's native aliases:

- an overload with a Generator argument (normal_, uniform_, bernoulli_, random_, multinomial,
  randn.generator, ...): given none, it gets the device's default flagos generator in a form the CPU kernel
  takes;
- an overload without one whose name has an overload with the same arguments plus a generator (randn,
  rand_like, randint.low, randperm, ...): that overload, with the generator;
- native_dropout (the one ATen operator with a CPU kernel that draws without a generator argument, and its
  out= form): the CPU kernel's steps (aten/src/ATen/native/Dropout.cpp, native_dropout_cpu), its bernoulli_
  given the generator. (dropout, feature_dropout, alpha_dropout and feature_alpha_dropout are composites
  that flagos runs as native_dropout or bernoulli_ calls; routed to cpu_fallback by their own names, their
  CPU composites still draw from the CPU's generator.)

Host backing: each flagos device's default generator is a CPU-algorithm generator over a CPU generator of its
own (csrc/runtime/generator.cpp), which the CPU kernel draws from directly (zero copy, under its own lock):
the numbers are the native route's. The native route hands a backing kernel that generator; asking it once,
through a private operator whose CPU kernel keeps the generator it gets, is how Python gets hold of it.
The aliases are host memory already, so nothing is copied.

CUDA backing: the kernel copies tensors to the host and back as the C++ fallback does. A CUDA generator
(the device's default one, or the one given) draws the seed of a CPU generator for the call, so the numbers
are reproducible under torch.flagos.manual_seed (not CUDA's own numbers: another algorithm).

Which of these an operator needs is decided once, when its route is planned (`random_kernel`); every other
operator keeps the C++ fallback, whose per-call cost this does not change.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch

from torch_fl._core import _C, backing
from torch_fl.vocab import ops

#: the private operator through which the native route hands Python a backing generator
_NAMESPACE = "torch_fl_internal"
QUALIFIED_PREFIX = _NAMESPACE + "::"
_lock = threading.Lock()
_library: torch.library.Library | None = None
_host_generators: list[torch.Generator] = []  # per flagos device, set on first use
_recorded: list[torch.Generator | None] = []  # what the private operator's CPU kernel was given


def _is_generator(arg) -> bool:
    t = arg.type
    if isinstance(t, torch._C.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch._C._GeneratorType)


def _generator_slot(schema) -> tuple[int, str, bool] | None:
    """(position, name, keyword-only) of a schema's Generator argument, or None."""
    for i, a in enumerate(schema.arguments):
        if _is_generator(a):
            return i, a.name, a.kwarg_only
    return None


def _packet(op: str):
    name, overload = ops.split(op)
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _sibling_with_generator(op: str) -> str | None:
    """The overload of op's name with op's arguments plus a keyword-only generator (randn -> randn.generator)."""
    want = [(a.name, str(a.type)) for a in ops.schema(op).arguments]
    for other in ops.overloads_of(ops.split(op)[0]):
        if other == op:
            continue
        args = ops.schema(other).arguments
        slot = _generator_slot(ops.schema(other))
        if slot is not None and slot[2] and [(a.name, str(a.type)) for a in args if not _is_generator(a)] == want:
            return other
    return None


def _record_generator(anchor: torch.Tensor, generator: torch.Generator | None) -> None:
    _recorded.append(generator)


def host_generators() -> list[torch.Generator]:
    """Host backing: flagos:i's default generator as the CPU generator it draws from, for each device i (the
    same objects every time). Asked once through a private operator's native route, which hands its CPU
    kernel the backing generator of the flagos one it is given."""
    global _library, _host_generators
    if _host_generators:
        return _host_generators
    with _lock:
        if not _host_generators:
            if _library is None:
                _library = torch.library.Library(_NAMESPACE, "DEF")
                _library.define("backing_generator(Tensor anchor, Generator? generator) -> ()")
                _library.impl("backing_generator", _record_generator, "CPU")
            found = []
            for i in range(_C._device_count()):
                torch.ops.torch_fl_internal.backing_generator(
                    torch.empty(0, device=torch.device("flagos", i)), _C._default_generator(i)
                )
                found.append(_recorded.pop())
            if any(g is None or g.device.type != "cpu" for g in found):
                raise RuntimeError(f"flagos: expected the flagos generators' CPU generators, got {found}")
            _host_generators = found  # whole, in one assignment: readers take no lock
    return _host_generators


def _host_default() -> torch.Generator:
    """The current flagos device's default generator as its CPU generator (the routed kernel runs with the
    call's device current)."""
    return host_generators()[_C._current_device()]


def _device_default(index: int) -> torch.Generator:
    """CUDA backing: flagos:index's default generator as the CUDA generator it wraps (cuda:index's)."""
    return torch.cuda.default_generators[index]


def _seeded_cpu_generator(gen: torch.Generator) -> torch.Generator:
    """A CPU generator seeded by a draw from `gen` (a CUDA generator: the draw advances it under its own lock,
    so concurrent calls get different seeds)."""
    seed = int(torch.randint(0, 2**63 - 1, (), device=gen.device, generator=gen))
    return torch.Generator().manual_seed(seed)


def _native_dropout(generator: Callable[[], torch.Generator]) -> Callable:
    def native_dropout(input, p, train=None):
        # native_dropout_cpu's steps, its bernoulli_ given the generator
        if input.numel() == 0:
            return input, torch.empty_like(input)
        if train is None or train:
            p1m = 1.0 - p
            scale = 0.0 if p1m == 0 else 1.0 / p1m
            mask = torch.empty_like(input, dtype=torch.bool)
            mask.bernoulli_(p1m, generator=generator())
            return input.mul(mask).mul_(scale), mask
        return input.clone(), torch.ones_like(input, dtype=torch.bool)

    return native_dropout


def _native_dropout_out(generator: Callable[[], torch.Generator]) -> Callable:
    dropout = _native_dropout(generator)

    def native_dropout_out(input, p, train=None, *, out0, out1):
        # its composite kernel: native_dropout, then each result resized into and copied to its out= tensor
        for out, result in zip((out0, out1), dropout(input, p, train), strict=True):
            if out.shape != result.shape:
                out.resize_(result.shape)
            out.copy_(result)
        return out0, out1

    return native_dropout_out


#: the ATen operators whose CPU kernels draw without a generator argument, as drawn here (given one)
_NO_GENERATOR = {"native_dropout": _native_dropout, "native_dropout.out": _native_dropout_out}


def _host_kernel(op: str) -> Callable | None:
    """op's CPU kernel on host aliases, drawing from the call's device generator where it was given none."""
    if op in _NO_GENERATOR:
        return _NO_GENERATOR[op](_host_default)
    slot = _generator_slot(ops.schema(op))
    if slot is not None:
        call = _packet(op)
        pos, name, kwarg_only = slot
        if kwarg_only:

            def kernel(*args, **kwargs):
                if kwargs.get(name) is None:
                    kwargs[name] = _host_default()
                return call(*args, **kwargs)

            return kernel

        def positional(*args, **kwargs):
            if len(args) > pos:
                if args[pos] is None:
                    args = (*args[:pos], _host_default(), *args[pos + 1 :])
            elif kwargs.get(name) is None:
                kwargs[name] = _host_default()
            return call(*args, **kwargs)

        return positional
    sibling = _sibling_with_generator(op)
    if sibling is None:
        return None
    call, name = _packet(sibling), _generator_slot(ops.schema(sibling))[1]

    def with_generator(*args, **kwargs):
        kwargs[name] = _host_default()
        return call(*args, **kwargs)

    return with_generator


def _written(op: str) -> tuple[list[int], list[str]]:
    args = ops.schema(op).arguments
    writes = [(i, a) for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write]
    return [i for i, a in writes if not a.kwarg_only], [a.name for _, a in writes if a.kwarg_only]


def _device_kernel(op: str) -> Callable | None:
    """CUDA backing: op's CPU kernel on host copies of the call's CUDA tensors, with a CPU generator seeded from
    the flagos generator (the call's, or its device's default), and written arguments and results copied back."""
    pos, name = None, None  # where the CPU kernel takes its generator: a position, else a keyword
    if op in _NO_GENERATOR:
        target = None
    else:
        slot = _generator_slot(ops.schema(op))
        if slot is not None:
            target, (i, name, kwarg_only) = _packet(op), slot
            pos = None if kwarg_only else i
        else:
            sibling = _sibling_with_generator(op)
            if sibling is None:
                return None
            target, name = _packet(sibling), _generator_slot(ops.schema(sibling))[1]
    positions, names = _written(op)

    def kernel(*args, **kwargs):
        device = None

        def host(x):
            nonlocal device
            if isinstance(x, torch.Tensor) and x.device.type != "cpu":
                device = device or x.device
                return x.cpu()
            if isinstance(x, torch.device) and x.type != "cpu":
                device = device or x
                return torch.device("cpu")
            return x

        cargs = [host(a) for a in args]
        ckwargs = {k: host(v) for k, v in kwargs.items()}
        if device is None or device.index is None:
            device = torch.device(device.type if device is not None else "cuda", _C._current_device())
        given = cargs[pos] if pos is not None and pos < len(cargs) else ckwargs.get(name)
        cpu_generator = _seeded_cpu_generator(given if given is not None else _device_default(device.index))
        if target is None:
            result = _NO_GENERATOR[op](lambda: cpu_generator)(*cargs, **ckwargs)
        else:
            if pos is not None and pos < len(cargs):
                cargs[pos] = cpu_generator
            else:
                ckwargs[name] = cpu_generator
            result = target(*cargs, **ckwargs)
        written = {}  # id of a host copy -> the argument it came from, now written back
        for original, copy in [*((args[i], cargs[i]) for i in positions), *((kwargs[n], ckwargs[n]) for n in names)]:
            if isinstance(original, torch.Tensor) and copy is not original:
                if original.shape != copy.shape:
                    original.resize_(copy.shape)
                original.copy_(copy)
                written[id(copy)] = original

        def back(r):
            if not isinstance(r, torch.Tensor):
                return r
            original = written.get(id(r))
            return original if original is not None else r.to(device)

        if isinstance(result, tuple | list):
            return type(result)(back(r) for r in result)
        return back(result)

    return kernel


@functools.cache
def random_kernel(op: str) -> Callable | None:
    """The cpu_fallback kernel of `op` if it draws random numbers (see the module's docstring), called like the
    aten operator on the call's native aliases; None for an operator that does not (the C++ fallback runs it)."""
    return _host_kernel(op) if backing() == "cpu" else _device_kernel(op)


def host_native_kernel(op: str) -> Callable | None:
    """Host backing: what `op`'s native route does if it draws random numbers (the CPU kernel on host aliases
    with the call's flagos generator: native_random, or the decomposition on flagos, of csrc/route/native_route.cpp),
    for the native targets of its PyRoute (whose C++ native route would give the CPU kernel no generator); None
    for other operators and on a CUDA backing (a CUDA kernel takes cuda:i's generator, which flagos:i's wraps)."""
    return random_kernel(op) if backing() == "cpu" else None
