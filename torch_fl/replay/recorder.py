"""The `flaggems` route (FEP 0025's low-overhead path): FlagGems recorded once per signature, replayed in C++.

FlagGems' Python function for an operator spends ~70-100 us on the host per
call (shapes, strides, grids, allocation) before its Triton kernels launch,
and for one input signature (what its kernels specialize on: dtypes, shapes,
strides, alignment, scalar arguments; the C++ core keys it,
csrc/replay/signature.h) it does the same thing every time. The first call of a
signature runs the function under `record`, which notes

* every ATen operator it calls (a TorchDispatchMode): allocations, copies,
  fills, run again through the dispatcher on replay; views become metadata;
* every Triton kernel it launches (at `CompiledKernel.run`, the one point all
  of Triton's and FlagGems' launch paths go through): the compiled function,
  grid, warps, shared memory, and each argument's bytes, pointers expressed
  as a slot (an input of the call or a recorded operator's result) plus an
  offset;

and every later call of that signature replays the recording in C++ without
Python (csrc/replay/program.h): the same kernels, the new tensors.

Whatever could make a replay differ from the Python function keeps the
signature on the Python function, with the reason (`torch_fl.explain`):
an operator that reads tensor values or has a data-dependent shape, a tensor
or memory from outside the call (a cached buffer, a generator's state: how
FlagGems' random operators get their seeds), a non-tensor result, a launch on
another stream, Triton scratch memory, clusters or launch attributes, a
kernel argument of a kind the replay does not pack. Launches made while an
autotuner benchmarks (found on the call stack) void the recording: the next
call records again, after the tuning.
"""

from __future__ import annotations

import struct
import sys
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_fl._core import _C

# Triton argument types -> (bytes, struct format), as Triton's launcher packs them.
_INTS = {
    "i1": (1, "b"),
    "i8": (1, "b"),
    "i16": (2, "h"),
    "i32": (4, "i"),
    "i64": (8, "q"),
    "u1": (1, "B"),
    "u8": (1, "B"),
    "u16": (2, "H"),
    "u32": (4, "I"),
    "u64": (8, "Q"),
}
_TAGS_READING_VALUES = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)
# Operators with a non-tensor result that depends on the signature alone (dtypes, shapes, strides,
# aliasing): not recorded, since they change nothing. Every other non-tensor result is a value read
# on the host. (Below autograd, where a route runs, composite operators arrive undecomposed.)
_METADATA_QUERIES = frozenset(
    "aten::" + name
    for name in (
        "result_type promote_types can_cast is_same_size size stride numel dim sym_size sym_stride sym_numel "
        "sym_storage_offset storage_offset is_floating_point is_complex is_signed is_contiguous "
        "is_non_overlapping_and_dense _has_compatible_shallow_copy_type is_set_to"
    ).split()
)


def _pack_float(ty: str, v: float) -> tuple[int, bytes]:
    if ty == "fp16":
        return 2, struct.pack("<e", v)
    if ty == "bf16":  # Triton truncates a float32 to its upper half
        return 2, struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)[:2]
    if ty in ("fp32", "f32"):
        return 4, struct.pack("<f", v)
    return 8, struct.pack("<d", v)


class _Refused(Exception):
    """The call cannot be replayed: the signature stays on the Python function, for this reason."""


class _Void(Exception):
    """The recording is not the call's work (an autotuner was benchmarking): record the next call."""


class Recording:
    """One call's operators and launches, every tensor as a slot."""

    def __init__(self, inputs: list[torch.Tensor]):
        self.slots: list[torch.Tensor] = []  # kept alive while recording: ids stay unique
        self.by_id: dict[int, int] = {}
        self.root_of: dict[int, int] = {}  # view slot -> its root slot
        self.views: list[tuple] = []
        self.steps: list[tuple] = []
        self.ranges: list[tuple[int, int, int]] = []  # (start, end, slot) of each root slot's storage
        self.refused: str | None = None
        self.void = False
        for t in inputs:
            self._root(t)
        self.inputs = len(self.slots)

    # -- slots ------------------------------------------------------------------------------------------

    def _new(self, t: torch.Tensor) -> int:
        k = len(self.slots)
        self.slots.append(t)
        self.by_id[id(t)] = k
        return k

    def _root(self, t: torch.Tensor) -> int:
        k = self._new(t)
        s = t.untyped_storage()
        self.ranges.append((s.data_ptr(), s.data_ptr() + s.nbytes(), k))
        return k

    def _view(self, t: torch.Tensor, root: int) -> int:
        k = self._new(t)
        self.root_of[k] = root
        self.views.append((k, root, t.dtype, list(t.shape), list(t.stride()), t.storage_offset()))
        return k

    def slot(self, t: torch.Tensor) -> int:
        k = self.by_id.get(id(t))
        if k is None:
            k = self._adopt(t)
        return k

    def _adopt(self, t: torch.Tensor) -> int:
        """A tensor no recorded operator made: a view of a slot's storage made without dispatch (`.data`)."""
        start = t.untyped_storage().data_ptr()
        for lo, _, k in self.ranges:
            if lo == start and self.slots[k].untyped_storage().nbytes() == t.untyped_storage().nbytes():
                return self._view(t, k)
        raise _Refused("it uses a tensor from outside the call (a cached buffer, a generator's state)")

    def locate(self, addr: int, kernel: str, arg: str) -> tuple[int, int]:
        """(root slot, byte offset from its data pointer) of a kernel's pointer argument."""
        for lo, hi, k in self.ranges:
            if lo <= addr < hi or addr == lo:
                return k, addr - self.slots[k].data_ptr()
        raise _Refused(f"it hands kernel {kernel} memory from outside the call (argument {arg})")

    # -- operators ----------------------------------------------------------------------------------------

    def _arg(self, value, param) -> tuple:
        if isinstance(value, torch.Tensor):
            return ("t", self.slot(value))
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            optional = "Optional" in str(param.type)
            slots = [-1 if v is None else self.slot(v) for v in value]
            return ("o" if optional else "l", slots)
        return ("c", value)

    @staticmethod
    def _views_of_argument(args, outs) -> bool:
        """Whether every result shares the first tensor argument's storage. An operator that may alias
        (contiguous, reshape: below autograd they arrive undecomposed) copies when the strides ask for
        it; then it is recorded and run again, like any other."""
        base = next((v for v in args if isinstance(v, torch.Tensor)), None)
        if base is None:
            return False
        storage = base.untyped_storage()._cdata
        tensors = [t for o in outs for t in (o if isinstance(o, (list, tuple)) else (o,))]
        return all(isinstance(t, torch.Tensor) and t.untyped_storage()._cdata == storage for t in tensors)

    def op(self, func, args, kwargs, out) -> None:
        if any(tag in func.tags for tag in _TAGS_READING_VALUES):
            raise _Refused(f"it reads tensor values ({func})")
        schema = func._schema
        if schema.name in _METADATA_QUERIES:
            return
        positional = [a for a in schema.arguments if not a.kwarg_only]
        full = []
        for i, a in enumerate(schema.arguments):
            if not a.kwarg_only and i < len(args):
                v = args[i]
            elif a.name in kwargs:
                v = kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            elif len(args) > len(positional):
                raise _Refused(f"unexpected arguments to {func}")
            else:
                v = None
            full.append(self._arg(v, a))
        outs = out if len(schema.returns) > 1 else (out,)
        given = {id(v) for v in args if isinstance(v, torch.Tensor)} | {
            id(v) for v in kwargs.values() if isinstance(v, torch.Tensor)
        }
        if func.is_view and self._views_of_argument(args, outs):
            # Metadata only: the result views the aliased argument's root.
            base = next(v for v in args if isinstance(v, torch.Tensor))
            root = self.root_of.get(self.slot(base), self.slot(base))
            for o in outs:
                for t in o if isinstance(o, (list, tuple)) else (o,):
                    self._view(t, root)
            return
        out_slots = []
        for o in outs:
            if o is None:
                out_slots.append([-1])
            elif isinstance(o, torch.Tensor):
                out_slots.append([-1 if id(o) in given else self._root(o)])
            elif isinstance(o, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in o):
                out_slots.append([-1 if id(t) in given else self._root(t) for t in o])
            else:
                raise _Refused(f"it reads a value on the host ({func} returns {type(o).__name__})")
        self.steps.append(("op", schema.name, schema.overload_name, full, out_slots))

    # -- launches -----------------------------------------------------------------------------------------

    def launch(self, kernel, launcher, grid, stream, function, packed_metadata, args) -> None:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code in _HOOK.bench_codes:
                raise _Void()
            frame = frame.f_back
        name = getattr(kernel, "name", "a Triton kernel")
        if getattr(launcher, "global_scratch_size", 0) or getattr(launcher, "profile_scratch_size", 0):
            raise _Refused(f"kernel {name} needs Triton scratch memory")
        num_warps, num_ctas, shared = packed_metadata
        if num_ctas != 1 or getattr(launcher, "launch_cooperative_grid", 0) or getattr(launcher, "launch_pdl", 0):
            raise _Refused(f"kernel {name} launches with clusters or launch attributes")
        if stream != torch.cuda.current_stream().cuda_stream:
            raise _Refused(f"kernel {name} runs on another stream than the current one")
        signature = getattr(kernel.src, "signature", None)
        if not isinstance(signature, dict) or len(signature) != len(args):
            raise _Refused(f"kernel {name}'s arguments do not match its signature")
        data, sizes, pointers = bytearray(), [], []
        for (arg, ty), v in zip(signature.items(), args, strict=True):
            if ty == "constexpr":
                continue
            if not isinstance(ty, str):
                raise _Refused(f"kernel {name} takes a tuple argument")
            if ty.startswith("*"):
                addr = 0 if v is None else v if isinstance(v, int) else v.data_ptr()
                if addr:
                    k, offset = self.locate(addr, name, arg)
                    pointers.append((len(sizes), k, offset))
                size, packed = 8, bytes(8)
            elif ty in _INTS:
                size, fmt = _INTS[ty]
                packed = struct.pack("<" + fmt, int(v))
            elif ty in ("fp16", "bf16", "fp32", "f32", "fp64"):
                size, packed = _pack_float(ty, float(v))
            else:
                raise _Refused(f"kernel {name} takes a {ty} argument")
            data += packed.ljust(8, b"\0")
            sizes.append(size)
        # The launcher's own trailing pointers (Triton's global and profile scratch): null here.
        for _ in range(_HOOK.scratch_params(launcher)):
            data += bytes(8)
            sizes.append(8)
        grid = tuple(int(g) for g in grid)
        self.steps.append(
            ("launch", int(function), grid, _HOOK.warp_size * num_warps, shared, bytes(data), pointers, name, sizes)
        )

    # -- the result ---------------------------------------------------------------------------------------

    def program(self, result, returns: tuple[str, ...]) -> dict:
        values = result if len(returns) > 1 else (result,)
        if len(returns) == 0:
            values = ()
        if not isinstance(values, (list, tuple)) or len(values) != len(returns):
            raise _Refused(f"it returns {type(result).__name__}, not the operator's {len(returns)} results")
        results = []
        for ty, v in zip(returns, values, strict=True):
            if v is None:
                results.append(("n", []))
            elif isinstance(v, torch.Tensor):
                results.append(("t", [self.slot(v)]))
            elif isinstance(v, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in v):
                results.append(("l", [self.slot(t) for t in v]))
            else:
                raise _Refused(f"it returns a {type(v).__name__} ({ty})")
        return {
            "inputs": self.inputs,
            "slots": len(self.slots),
            "views": self.views,
            "steps": self.steps,
            "results": results,
        }


class _Mode(TorchDispatchMode):
    def __init__(self, rec: Recording):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.rec.refused is None and not self.rec.void:
            try:
                self.rec.op(func, args, kwargs, out)
            except _Refused as e:
                self.rec.refused = str(e)
        return out


class _LaunchHook:
    """Sees Triton's launches on a recording thread, through CompiledKernel's `run` property.

    Installed only while a recording runs (recordings are serialized), and
    transparent to other threads: their launches get Triton's own launcher.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.active: dict[int, Recording] = {}
        self.bench_codes: frozenset = frozenset()
        self.warp_size = 32
        self._cls = None
        self._prop = None

    def loaded(self) -> bool:
        return self._load()

    def _load(self) -> bool:
        if self._cls is not None:
            return True
        try:
            from triton.compiler.compiler import CompiledKernel
            from triton.runtime import autotuner, driver
        except ImportError:
            return False
        if not isinstance(CompiledKernel.__dict__.get("run"), property):
            return False
        codes = {autotuner.Autotuner._bench.__code__}
        try:
            import triton.testing as testing

            codes |= {f.__code__ for f in (testing.do_bench, getattr(testing, "do_bench_cudagraph", None)) if f}
        except ImportError:
            pass
        self.bench_codes = frozenset(codes)
        self.warp_size = driver.active.get_current_target().warp_size
        self._cls, self._prop = CompiledKernel, CompiledKernel.__dict__["run"]
        return True

    @staticmethod
    def scratch_params(launcher) -> int:
        return int(hasattr(launcher, "global_scratch_size")) + int(hasattr(launcher, "profile_scratch_size"))

    def __enter__(self):
        if self._load():
            hook, get = self, self._prop.fget

            def run(kernel):
                launcher = get(kernel)
                rec = hook.active.get(threading.get_ident())
                if rec is None:
                    return launcher
                return _RecordingLauncher(rec, kernel, launcher)

            self._cls.run = property(run)
        return self

    def __exit__(self, *exc):
        if self._cls is not None:
            self._cls.run = self._prop


class _RecordingLauncher:
    __slots__ = ("rec", "kernel", "launcher")

    def __init__(self, rec, kernel, launcher):
        self.rec, self.kernel, self.launcher = rec, kernel, launcher

    def __call__(self, gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter, exit_, *args):
        rec = self.rec
        if rec.refused is None and not rec.void:
            try:
                rec.launch(self.kernel, self.launcher, (gx, gy, gz), stream, function, packed_metadata, args)
            except _Refused as e:
                rec.refused = str(e)
            except _Void:
                rec.void = True
        return self.launcher(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter, exit_, *args)


_HOOK = _LaunchHook()


def input_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The call's tensors in the order the C++ core gives them slots (csrc/replay/README.md, Slot order; C++:
    replay::input_tensors, exposed as torch_fl._C._replay_input_tensors)."""
    out = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def record(fn, args: tuple, kwargs: dict, returns: tuple[str, ...]):
    """Runs fn(*args, **kwargs) and records it: (result, program dict | reason str | None to record again)."""
    rec = Recording(input_tensors(args, kwargs))
    if "triton" in sys.modules and not _HOOK.loaded():
        # A launch the hook cannot see would be missing from the replay.
        return fn(*args, **kwargs), "this Triton's kernel launches cannot be observed (no CompiledKernel.run property)"
    tid = threading.get_ident()
    with _HOOK.lock, _HOOK:
        _HOOK.active[tid] = rec
        try:
            with _Mode(rec):
                result = fn(*args, **kwargs)
        finally:
            del _HOOK.active[tid]
    if rec.void:
        return result, None
    if rec.refused is None:
        try:
            return result, rec.program(result, returns)
        except _Refused as e:
            rec.refused = str(e)
    return result, rec.refused


def install() -> None:
    """Makes `record` the C++ core's recorder."""
    _C._set_replay_recorder(record)
