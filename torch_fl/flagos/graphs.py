"""CUDA graphs of flagos work: torch.flagos.CUDAGraph, graph, graph_pool_handle, make_graphed_callables.

On a CUDA backing flagos:i is cuda:i underneath: a flagos stream is a CUDA stream and flagos memory comes
from the CUDA caching allocator. So torch.cuda's own graph machinery captures flagos work: these names
are torch.cuda's, taking flagos streams and devices, with what each graph captured from the routes.
Host backing has no CUDA graphs: every name raises, saying so. docs/graphs.md says what is capture-safe.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import torch

from torch_fl.flagos._device import _index, needs_cuda_backing, on_cuda
from torch_fl.flagos._streams import Stream, native_stream

_WHY = (
    "a CUDA graph captures CUDA work, and flagos is backed by host memory in this process (no usable GPU, or "
    "FLAGOS_ACCELERATOR=cpu); run on a GPU with FLAGOS_ACCELERATOR=auto or cuda"
)


def _require_cuda(name: str) -> None:
    if not on_cuda():
        raise needs_cuda_backing(name, _WHY)


def _no_routes() -> Counter:
    return Counter()


# Calls per (operator, backend that ran) so far, fallbacks counted under 'fallback:<backend>'. The routing
# layer sits above the device API and installs its counter here at startup (routing._startup), so that
# torch.flagos imports nothing of routing.
route_counts: Callable[[], Counter] = _no_routes


class CUDAGraph(torch.cuda.CUDAGraph):
    """A CUDA graph of flagos work: a torch.cuda.CUDAGraph that also keeps what it captured from the routes.

    `captured_calls()` gives, per (operator, backend that ran), the routed calls made while it captured:
    the work each replay re-runs. `torch_fl.routing.stats()` counts those calls once, at capture; a
    replay goes through no route and is counted in `replays` instead.
    """

    def __new__(cls, keep_graph: bool = False):
        _require_cuda("CUDAGraph")
        graph = super().__new__(cls, keep_graph)
        graph._before = None
        graph._captured = Counter()
        graph.replays = 0
        return graph

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **kwargs) -> None:
        self._before = route_counts()
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode, **kwargs)

    def capture_end(self) -> None:
        super().capture_end()
        if self._before is not None:
            after = route_counts()
            self._captured = Counter({k: n - self._before[k] for k, n in after.items() if n > self._before[k]})
            self._before = None

    def replay(self) -> None:
        super().replay()
        self.replays += 1

    def reset(self) -> None:
        super().reset()
        self._captured = Counter()
        self.replays = 0

    def captured_calls(self) -> dict[tuple[str, str], int]:
        """{(operator, backend): calls} routed while this graph captured; 'fallback:<backend>' keys count
        calls routed to <backend> that ran natively instead."""
        return dict(sorted(self._captured.items()))


def _capture_stream(stream) -> torch.cuda.Stream | None:
    """The CUDA stream a flagos stream is (torch.cuda.graph captures on CUDA streams)."""
    if stream is None or isinstance(stream, torch.cuda.Stream):
        return stream
    if isinstance(stream, Stream):
        return native_stream(stream)
    raise TypeError(f"expected a flagos stream (torch.flagos.Stream), a torch.cuda.Stream or None, got {stream!r}")


class graph(torch.cuda.graph):  # noqa: N801  (named like torch.cuda.graph)
    """Context manager that captures the flagos work inside it into `cuda_graph`, as torch.cuda.graph does.

    `cuda_graph` is a torch.flagos.CUDAGraph (or any torch.cuda.CUDAGraph); `stream` a flagos stream (or a
    CUDA stream), by default a side stream of the current device; `pool` a graph_pool_handle() or another
    graph's pool() to share memory with. Memory allocated inside comes from the graph's private pool.
    """

    default_capture_stream = None  # torch.cuda.graph's: one side stream, made on first use

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode: str = "global", **kwargs):
        _require_cuda("graph")
        if not isinstance(cuda_graph, torch.cuda.CUDAGraph):
            raise TypeError(f"expected a torch.flagos.CUDAGraph, got {type(cuda_graph).__name__}")
        super().__init__(
            cuda_graph, pool=pool, stream=_capture_stream(stream), capture_error_mode=capture_error_mode, **kwargs
        )


def graph_pool_handle():
    """An opaque id of a new graph memory pool, for graphs that should share one (torch.cuda's)."""
    _require_cuda("graph_pool_handle")
    return torch.cuda.graph_pool_handle()


def make_graphed_callables(
    callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False, pool=None
):
    """Graphed versions of flagos modules or functions, forward and backward (torch.cuda's contract).

    Each callable's forward runs as one CUDA graph replay inside an autograd node whose backward replays
    a second graph. `sample_args` are flagos tensors; their requires_grad must match the real inputs'.
    """
    _require_cuda("make_graphed_callables")
    if torch.is_autocast_enabled("flagos") and torch.is_autocast_cache_enabled():
        raise RuntimeError(
            "make_graphed_callables does not support autocast's weight cache: use "
            "torch.autocast('flagos', ..., cache_enabled=False)"
        )
    groups = sample_args if isinstance(callables, tuple) else (sample_args,)
    for args in groups:
        for t in torch.utils._pytree.arg_tree_leaves(*args):
            if isinstance(t, torch.Tensor) and t.device.type != "flagos":
                raise ValueError(f"torch.flagos.make_graphed_callables takes flagos tensors, got one on {t.device}")
    with torch.cuda.device(_index()):
        return torch.cuda.make_graphed_callables(
            callables,
            sample_args,
            num_warmup_iters=num_warmup_iters,
            allow_unused_input=allow_unused_input,
            pool=pool,
        )


# torch.accelerator.Graph on flagos (torch >= 2.12): the core's graph implementation
# (csrc/runtime/graph_impl.cpp) calls this operator for each of its methods.
_graphs: dict[int, CUDAGraph] = {}
_handles = itertools.count(1)
_CAPTURE_MODES = {0: "global", 1: "global", 2: "thread_local", 3: "relaxed"}  # at::GraphCaptureMode


def _graph_op(method: str, handle: int, args: list[int], text: str) -> list[int]:
    if method == "new":
        handle = next(_handles)
        _graphs[handle] = CUDAGraph(keep_graph=bool(args[0]))
        return [handle]
    if method == "delete":
        _graphs.pop(handle, None)
        return []
    g = _graphs[handle]
    if method == "capture_begin":
        pool = None if (args[0], args[1]) == (0, 0) else (args[0], args[1])
        g.capture_begin(pool=pool, capture_error_mode=_CAPTURE_MODES[args[2]])
    elif method == "pool":
        return list(g.pool())
    elif method == "debug_dump":
        g.debug_dump(text)
    elif method in ("capture_end", "instantiate", "replay", "reset", "enable_debug_mode"):
        getattr(g, method)()
    else:
        raise ValueError(f"torch_fl::_graph: unknown method {method!r}")
    return []


_LIB = torch.library.Library("torch_fl", "DEF")
_LIB.define("_graph(str method, int handle, int[] args, str text) -> int[]")
_LIB.impl("_graph", _graph_op, "CompositeExplicitAutograd")
