"""flagos's post-grad graph pass (inductor's per-device custom pass): what inductor does for 'cuda' graphs by
name of the device type, done for flagos graphs on a CUDA backing.

- A `bmm` of a batch of one becomes `mm` of the two matrices (inductor's joint_graph.bmm_to_mm, which checks
  for the 'cuda' device type). cuBLAS then gets the matrices themselves; `bmm` copies an operand it cannot
  address with batch strides, such as the expanded one Qwen3's rotary embedding multiplies (a copy per call
  of every compiled prefill on flagos, where native cuda has none).
"""

from __future__ import annotations

import contextlib

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from torch_fl._core import DEVICE_NAME

_aten = torch.ops.aten


def _batch_of_one(val) -> bool:
    return isinstance(val, torch.Tensor) and val.device.type == DEVICE_NAME and statically_known_true(val.shape[0] == 1)


def _carry_origin(new: torch.fx.Node, old: torch.fx.Node) -> None:
    """What inductor's own rewrites carry from a replaced node to its replacement (pattern_matcher's
    _transfer_meta): its origin (original_aten, source_fn_stack, ...) and stack trace. Inductor names a fused
    kernel after its nodes' origins, and the name is part of the kernel's source: with the origin carried, the
    kernels of a flagos graph are those of the same graph on cuda, so they share inductor's caches and
    autotuning choices (a reduction tuned otherwise sums in another order: other bits than CUDA's)."""
    fields = getattr(torch.fx.proxy, "_COPY_META_FIELDS", ())
    new.meta.update((k, v) for k, v in old.meta.items() if k in fields)
    if "stack_trace" in old.meta:  # where the code comments of the generated kernels point
        new.meta["stack_trace"] = old.meta["stack_trace"]


def bmm_batch_of_one_to_mm(gm: torch.fx.GraphModule) -> int:
    """Rewrites `bmm(a, b)` of flagos tensors with batch 1 as `mm(a[0], b[0]).unsqueeze(0)` in `gm`'s graph
    (the new nodes' fake values set, as later passes and the lowering read them); how many it rewrote."""
    from torch._guards import detect_fake_mode

    graph, count = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _aten.bmm.default or len(node.args) != 2 or node.kwargs:
            continue
        a, b = node.args
        va, vb = a.meta.get("val"), b.meta.get("val")
        if not (_batch_of_one(va) and _batch_of_one(vb)):
            continue
        with graph.inserting_before(node):
            sa = graph.call_function(_aten.squeeze.dim, (a, 0))
            sb = graph.call_function(_aten.squeeze.dim, (b, 0))
            mm = graph.call_function(_aten.mm.default, (sa, sb))
            out = graph.call_function(_aten.unsqueeze.default, (mm, 0))
        with detect_fake_mode([va, vb]) or contextlib.nullcontext():
            sa.meta["val"], sb.meta["val"] = va.squeeze(0), vb.squeeze(0)
            mm.meta["val"] = torch.mm(sa.meta["val"], sb.meta["val"])
            out.meta["val"] = mm.meta["val"].unsqueeze(0)
        for new in (sa, sb, mm, out):
            _carry_origin(new, node)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


#: The operators inductor calls in their out= form where it leaves them as calls (its extern kernels,
#: torch/_inductor/kernel/mm.py and bmm.py): functional overload -> the out= overload compiled code calls.
EXTERN_OUT = {
    "mm": "mm.out",
    "mm.dtype": "mm.dtype_out",
    "addmm": "addmm.out",
    "bmm": "bmm.out",
    "bmm.dtype": "bmm.dtype_out",
    "baddbmm": "baddbmm.out",
    "_int_mm": "_int_mm.out",
    "_scaled_mm": "_scaled_mm.out",
}
_warned: set[str] = set()


def _entries(route) -> dict:
    """(dtype, min_numel) -> rule, for each rule of a resolved route (None: every dtype / below every size)."""
    out = {(None, None): route.default} if route.default is not None else {}
    out.update({(d, None): r for d, r in route.by_dtype})
    out.update({(d, n): r for d, cs in route.by_size for n, r in cs})
    # argument rules, keyed apart: (dtype, (value, min_numel))
    out.update({(d, (v, n)): r for d, vcs in route.by_value for v, b, cs in vcs for n, r in ((None, b), *cs) if r})
    return out


def unkept_routes() -> dict[str, str]:
    """Extern operator -> why compiled code cannot keep its route: its out= overload, what compiled code calls,
    does not take the functional overload's rule (routing gives it the rule unless a rule names the out=
    overload itself or the backend has no kernel for it). Operators kept as calls (keep_calls) are left out."""
    from torch_fl import backends
    from torch_fl._core import backing
    from torch_fl.compile import keep_calls
    from torch_fl.routing import rules
    from torch_fl.routing.state import STATE

    kept = set(keep_calls.kept_calls())
    found = {}
    for op, out in EXTERN_OUT.items():
        route = STATE.resolved.get(op)
        if route is None or op in kept:
            continue
        out_route = STATE.resolved.get(out)
        theirs = _entries(out_route) if out_route is not None else {}
        for key, rule in _entries(route).items():
            if rules.target_for(op, rule, key[0]).kind != "kernel":
                continue  # runs natively anyway (a native route, or one that falls back)
            other = theirs.get(key)
            if other is not None and other.backend == rule.backend:
                continue
            if other is not None and other.via is None:
                why = f"has a rule of its own ('{other.written}', {other.source})"
            else:
                why = f"is not routed with it: '{rule.backend}' has no kernel for it"
            runs = other.backend if other is not None else backends.log_name(backing())
            found[op] = (
                f"torch.compile: aten::{op} is routed to '{rule.backend}' ('{rule.written}', {rule.source}), but "
                f"compiled flagos code calls aten::{out} for it (inductor's extern kernel), and {out} {why}: compiled "
                f"{op} calls run on '{runs}' instead. To keep {op} on its route in compiled code, keep it as a "
                f"call before compiling: torch_fl.compile.keep_as_calls(['{op}'])."
            )
            break
    return found


def warn_unkept_routes(gm: torch.fx.GraphModule) -> list[str]:
    """Warn once per operator (FallbackWarning) for each extern operator of `gm` on flagos tensors whose route
    compiled code cannot keep (unkept_routes()); the operators warned about now."""
    import warnings

    from torch_fl.vocab import ops
    from torch_fl.vocab.errors import FallbackWarning

    unkept = unkept_routes()
    if not unkept:
        return []
    warned = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        op = ops.normalize(node.target.name())
        if op not in unkept or op in _warned:
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type == DEVICE_NAME:
            _warned.add(op)
            warned.append(op)
            warnings.warn(unkept[op], FallbackWarning, stacklevel=2)
    return warned
