"""torch.compile(mode="reduce-overhead") on flagos: inductor's CUDA graphs for flagos graphs.

Inductor keeps CUDA graphs for graphs on one 'cuda' device (cudagraph_utils.check_multiple_devices_or_any_cpu_nodes)
and wraps them in its cudagraph trees, which take only tensors whose `is_cuda` is true. On a CUDA backing a flagos
graph is CUDA work (its memory comes from the CUDA caching allocator, its kernels run on the CUDA stream behind the
current flagos stream), so torch_fl makes two changes when inductor is first imported:

- the device check takes an inference graph on one flagos device as it takes one on one CUDA device;
- such a graph is captured as inductor's other CUDA-graph implementation does (compile_fx.cudagraphify_impl, what
  `torch._inductor.config.triton.cudagraph_trees = False` selects; _capture), with the trees' order of steps: its
  first call runs it as a warm-up on the side stream it is captured on, and returns that call's outputs; its second
  call captures it, then each call copies its new inputs into the captured ones and replays. Its static inputs
  (parameters, buffers, a static cache) are read where they were at capture: a call whose static inputs moved is
  captured anew, without a second warm-up (as the cudagraph trees re-record; Hugging Face's generate() makes a new
  static cache each call). As in the trees, a capture holds no reference to its static inputs, the captures of one
  graph share one memory pool, and the graphs of a device and thread share one side stream, so an old capture keeps
  neither a dropped cache nor memory of its own alive. A dynamic-shape graph (its sizes are int inputs, which only
  the trees take) is captured per size, as the trees do.

That implementation hands back the same output tensors on every call, which the next call overwrites (the trees
detect this). Here each call's outputs are fresh tensors copied from the graph's memory (fresh_copies), so they stay
valid after the next call. Training graphs (a forward that saves activations, its backward) run without CUDA graphs,
with a warning (TRAINING_UNSUPPORTED): without the trees' bookkeeping a forward run again before its backward would
overwrite the activations that backward reads, and gradients accumulated over micro-batches would be overwritten.

Graphs on other devices keep inductor's behaviour. On host backing there are no CUDA graphs: a flagos graph
compiles without them, with a warning (CUDAGRAPHS_UNSUPPORTED).
"""

from __future__ import annotations

import collections
import functools
import importlib
import threading
import warnings

import torch
from torch._inductor import config as inductor_config
from torch.utils._ordered_set import OrderedSet

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import on_cuda
from torch_fl.flagos._streams import current_stream as flagos_current_stream

CUDAGRAPHS_UNSUPPORTED = (
    "torch.compile(mode='reduce-overhead') asks for CUDA graphs, and flagos is backed by host memory in this "
    "process (no usable GPU, or FLAGOS_ACCELERATOR=cpu): flagos graphs run without CUDA graphs. Run on a GPU "
    "(FLAGOS_ACCELERATOR=auto or cuda) for CUDA graphs, or use mode='default' or 'max-autotune-no-cudagraphs' to "
    "silence this."
)


TRAINING_UNSUPPORTED = (
    "torch.compile(mode='reduce-overhead'): this flagos graph is part of a training step (its forward saves "
    "activations for a backward), and it runs without CUDA graphs: inductor's CUDA graph trees, which keep a "
    "training step's memory safe across calls, take only 'cuda' tensors. Inference graphs (under torch.no_grad() "
    "or torch.inference_mode()) are captured and replayed."
)


def _has_flagos_tensor(values) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == DEVICE_NAME for t in values)


def install() -> None:
    """Route flagos graphs compiled with CUDA graphs (idempotent); see the module docstring."""
    # By module path: torch._inductor's package namespace may bind a function of the same name.
    compile_fx_module = importlib.import_module("torch._inductor.compile_fx")
    cudagraph_utils_module = importlib.import_module("torch._inductor.cudagraph_utils")

    compile_fx = compile_fx_module.compile_fx
    if getattr(compile_fx, "_flagos", False):
        return
    if on_cuda():
        cudagraph_utils_module.check_multiple_devices_or_any_cpu_nodes = _device_check(
            cudagraph_utils_module.check_multiple_devices_or_any_cpu_nodes
        )
        compile_fx_module.cudagraphify = _cudagraphify(compile_fx_module.cudagraphify)

    nested = threading.local()  # compile_fx calls itself (through this name) with the config patches applied

    @functools.wraps(compile_fx)
    def flagos_compile_fx(model_, example_inputs_, *args, **kwargs):
        if on_cuda() or getattr(nested, "inside", False):
            return compile_fx(model_, example_inputs_, *args, **kwargs)
        patches = kwargs.get("config_patches") or {}
        if patches.get("triton.cudagraphs", inductor_config.triton.cudagraphs) and _has_flagos_tensor(example_inputs_):
            warnings.warn(CUDAGRAPHS_UNSUPPORTED, UserWarning, stacklevel=2)
        nested.inside = True
        try:
            return compile_fx(model_, example_inputs_, *args, **kwargs)
        finally:
            nested.inside = False

    flagos_compile_fx._flagos = True
    compile_fx_module.compile_fx = flagos_compile_fx


def _device_check(check):
    """Inductor's check, with flagos:i read as the cuda:i behind it for an inference graph (a graph that also holds
    cuda:i tensors stays on two devices, and is refused as before); a training graph on flagos is refused with
    TRAINING_UNSUPPORTED. Inductor asks while it lowers a graph, with the graph being lowered in V.graph."""

    @functools.wraps(check)
    def check_devices(device_node_mapping):
        if any(d.type == DEVICE_NAME for d in device_node_mapping) and not any(
            d.type == "cuda" for d in device_node_mapping
        ):
            from torch._inductor.virtualized import V

            if not getattr(V.graph, "is_inference", False):
                warnings.warn(TRAINING_UNSUPPORTED, UserWarning, stacklevel=2)
                return "a flagos training graph (inductor's CUDA graph trees take only 'cuda' tensors)"
            device_node_mapping = {
                torch.device("cuda", d.index) if d.type == DEVICE_NAME else d: node
                for d, node in device_node_mapping.items()
            }
        return check(device_node_mapping)

    return check_devices


def _cudagraphify(cudagraphify):
    """compile_fx.cudagraphify, choosing the implementation by the first call's inputs: flagos tensors (an inference
    graph: _device_check refuses the others) take cudagraphify_impl with fresh outputs, anything else inductor's
    choice."""

    @functools.wraps(cudagraphify)
    def flagos_cudagraphify(model, static_input_idxs=(), *, device_index, **kwargs):
        inductors = cudagraphify(model, static_input_idxs, device_index=device_index, **kwargs)
        local = threading.local()
        mutated = [i for i in kwargs.get("mutated_input_idxs") or () if i in set(static_input_idxs)]

        def captures(ints: dict, count: int):
            """The captures of this graph for the values `ints` (position: value) of its int inputs, of `count`."""
            if not ints:
                return _by_static_inputs(
                    *_capturing(model, static_input_idxs, mutated, device_index), static_input_idxs
                )
            kept = {old: new for new, old in enumerate(i for i in range(count) if i not in ints)}
            static = [kept[i] for i in static_input_idxs if i in kept]
            bound = _capturing(_with_ints(model, ints), static, [kept[i] for i in mutated if i in kept], device_index)
            return _by_static_inputs(*bound, static)

        def run(new_inputs):
            fn = getattr(local, "fn", None)
            if fn is None:
                flagos = _has_flagos_tensor(new_inputs)
                fn = local.fn = _by_int_inputs(new_inputs, captures) if flagos else inductors
            return fn(new_inputs)

        return run

    return flagos_cudagraphify


def _capturing(model, static_input_idxs, mutated, device_index):
    """(warm_up, capture) for one graph. warm_up(new_inputs) runs it on its first call, on the side stream it is
    captured on, and returns that call's outputs, as a cudagraph tree warms a function up before it records it:
    what the graph initialises lazily (cuBLAS's workspace for that stream, autotuning) happens outside a capture,
    and the call writes its static inputs once, as every call does. capture(new_inputs) records the graph over
    `new_inputs` (_capture) with its outputs fresh. The captures of one graph share one memory pool, as a cudagraph
    tree's recordings share the tree's pool: a graph captured anew for moved static inputs reuses the memory of
    its earlier captures instead of adding its own."""
    pool: list = []  # the graph's memory pool, made at its first capture

    def warm_up(new_inputs):
        fx = importlib.import_module("torch._inductor.compile_fx")
        check_idxs = fx.get_input_idxs_to_check(new_inputs, static_input_idxs)
        run = fx.align_inputs_from_check_idxs(model, check_idxs, OrderedSet(mutated))
        with torch.cuda.device(device_index):
            current, stream = torch.cuda.current_stream(), _capture_stream(device_index)
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                outputs = run(new_inputs)
            current.wait_stream(stream)
        caller = flagos_current_stream(device_index)  # the flagos stream over `current`
        for out in outputs if isinstance(outputs, (list, tuple)) else (outputs,):
            if isinstance(out, torch.Tensor) and out.device.type == DEVICE_NAME:
                out.record_stream(caller)  # made on the side stream, used on the caller's
        return outputs

    def capture(new_inputs):
        # Outputs over a static input's memory (a buffer the graph returns) stay as they are.
        static = {
            new_inputs[i].untyped_storage().data_ptr()
            for i in static_input_idxs
            if isinstance(new_inputs[i], torch.Tensor)
        }
        with torch._dynamo.utils.preserve_rng_state(), torch.cuda.device(device_index):
            if not pool:
                pool.append(torch.cuda.graph_pool_handle())
            replay = _capture(model, new_inputs, static_input_idxs, pool[0], _capture_stream(device_index))
        return _fresh_outputs(replay, static)

    return warm_up, capture


_streams = threading.local()


def _capture_stream(device_index: int):
    """The side stream flagos graphs are warmed up and captured on, one per device and thread, as each cudagraph
    tree (one per device and thread) has one: cuBLAS keeps a workspace per stream it runs on, never freed."""
    per_device = getattr(_streams, "per_device", None)
    if per_device is None:
        per_device = _streams.per_device = {}
    stream = per_device.get(device_index)
    if stream is None:
        stream = per_device[device_index] = torch.cuda.Stream(device_index)
    return stream


def _capture(model, inputs, static_input_idxs, pool, stream):
    """`model` (inductor's callable), warmed up (_capturing), captured into a CUDA graph over `inputs`, as inductor's
    compile_fx.cudagraphify_impl does (the inputs that are not static are copied into the graph's own before each
    replay; misaligned ones handled as there), with three differences: the capture goes into `pool` on `stream`
    (the graph's shared ones), it runs no warm-up of its own, and the graph keeps no reference to its static inputs.
    It reads them where they were at the capture (_by_static_inputs keys it by those addresses), as the cudagraph
    trees do: a static cache that generate() dropped is freed, not kept alive by an old capture."""
    fx = importlib.import_module("torch._inductor.compile_fx")
    check_idxs = fx.get_input_idxs_to_check(inputs, static_input_idxs)
    static_idxs = set(fx.remove_unaligned_input_idxs(inputs, static_input_idxs))
    fx.copy_misaligned_inputs(inputs, check_idxs)
    copied = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static_idxs]
    dims = {i: fx.get_expanded_dims(inputs[i]) for i in copied}
    graph_inputs = [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs]
    for i in copied:
        graph_inputs[i] = fx.static_input(inputs[i])
        fx.index_expanded_dims_and_copy_(graph_inputs[i], inputs[i], dims[i])
    torch.cuda.synchronize()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
        outputs = model(list(graph_inputs))
    if not isinstance(outputs, (list, tuple)):
        outputs = (outputs,)
    targets = [(i, graph_inputs[i], dims[i]) for i in copied]
    del graph_inputs  # the static inputs: no reference kept

    def run(new_inputs):
        for i, dst, expanded in targets:
            fx.index_expanded_dims_and_copy_(dst, new_inputs[i], expanded)
        new_inputs.clear()
        graph.replay()
        return outputs

    return fx.align_inputs_from_check_idxs(run, check_idxs, OrderedSet())


def _by_int_inputs(first_inputs, captures):
    """A graph's captures per set of values of its int inputs (the sizes of a dynamic-shape graph), as inductor's
    cudagraph trees record one per size. Only the trees take int inputs (inductor makes them constants before
    choosing the other implementation, which copies every input that is not static as a tensor), so each size's
    captures see the ints bound into the graph and left out of its inputs. A graph without them is unchanged."""
    ints, count = [i for i, x in enumerate(first_inputs) if isinstance(x, int)], len(first_inputs)
    if not ints:
        return captures({}, count)
    positions = frozenset(ints)
    per_size: dict = {}

    def run(new_inputs):
        values = tuple(new_inputs[i] for i in ints)
        fn = per_size.get(values)
        if fn is None:
            fn = per_size[values] = captures(dict(zip(ints, values, strict=True)), count)
        others = [x for i, x in enumerate(new_inputs) if i not in positions]
        new_inputs.clear()  # inductor's calling convention: the callee empties the list
        return fn(others)

    return run


def _with_ints(model, ints: dict):
    """`model` (inductor's callable, taking its inputs as a list it empties) taking its inputs without the int
    inputs `ints` (position: value), which it puts back."""

    def run(inputs):
        full = list(inputs)
        inputs.clear()
        for i in sorted(ints):
            full.insert(i, ints[i])
        return model(full)

    return run


#: captures one compiled graph keeps, one per set of static input addresses (the oldest goes first)
CAPTURES_KEPT = 4


#: inductor's C++ check of inputs' data pointers (what the cudagraph trees call each run), where torch has it
_PTRS_EQUAL = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _by_static_inputs(warm_up, capture, static_input_idxs):
    """A graph warmed up on its first call (warm_up), then captured per set of static input addresses.
    cudagraphify_impl replays over the memory its static inputs (parameters, buffers, what
    torch._dynamo.mark_static_address marks: Hugging Face's static cache) had when it captured; a later call whose
    static inputs live elsewhere (a new cache for each generate(), a model moved) gets a capture of its own, as
    inductor's cudagraph trees re-record, instead of reading freed memory. A call whose static inputs are where the
    last call's were costs one pointer comparison per static input."""
    graphs: collections.OrderedDict = collections.OrderedDict()
    idxs = list(static_input_idxs)
    last: list = [None, None]  # the last call's graph and its static inputs' data pointers (None elsewhere)
    warmed_up = [False]

    def same_as_last(new_inputs) -> bool:
        ptrs = last[1]
        if ptrs is None or len(ptrs) != len(new_inputs):
            return False
        if _PTRS_EQUAL is not None:
            return _PTRS_EQUAL(new_inputs, ptrs, idxs)
        return all(new_inputs[i].data_ptr() == ptrs[i] for i in idxs)

    def run(new_inputs):
        if same_as_last(new_inputs):
            return last[0](new_inputs)
        if not warmed_up[0]:
            warmed_up[0] = True
            return warm_up(new_inputs)
        key = tuple(t.data_ptr() if isinstance(t := new_inputs[i], torch.Tensor) else id(t) for i in idxs)
        ptrs = None  # the fast check takes tensors only: a graph with another static input keys every call
        if all(isinstance(new_inputs[i], torch.Tensor) for i in idxs):
            ptrs = [None] * len(new_inputs)
            for i, p in zip(idxs, key, strict=True):
                ptrs[i] = p
        fn = graphs.get(key)
        if fn is None:
            while len(graphs) >= CAPTURES_KEPT:
                graphs.popitem(last=False)
            fn = graphs[key] = capture(new_inputs)
        else:
            graphs.move_to_end(key)
        last[:] = [fn, ptrs]
        return fn(new_inputs)

    return run


def _fresh_outputs(replay, static):
    def run(new_inputs):
        return fresh_copies(replay(new_inputs), keep=static)

    return run


def fresh_copies(outputs, keep=frozenset()):
    """Copies of `outputs` (a list or tuple; non-tensors pass through) in new memory, except tensors over the storages
    whose data pointers are in `keep`. A contiguous tensor alone on its storage is cloned; tensors that share a storage
    (or are not contiguous) are rebuilt over one copy of it, with their own offsets, sizes and strides, so they share
    the copy as they shared the original."""
    keys = [o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) else None for o in outputs]
    copies = {}
    fresh = []
    for out, key in zip(outputs, keys, strict=True):
        if key is None or key in keep:
            fresh.append(out)
        elif keys.count(key) == 1 and out.is_contiguous():
            fresh.append(out.clone())
        else:
            copy = copies.get(key)
            if copy is None:
                storage = out.untyped_storage()
                copy = copies[key] = torch.empty(storage.nbytes(), dtype=torch.uint8, device=out.device)
                copy.copy_(torch.empty(0, dtype=torch.uint8, device=out.device).set_(storage))
            fresh.append(
                torch.empty(0, dtype=out.dtype, device=out.device).set_(
                    copy.untyped_storage(), out.storage_offset(), out.size(), out.stride()
                )
            )
    return fresh
