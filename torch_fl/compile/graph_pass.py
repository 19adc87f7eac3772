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
        if "stack_trace" in node.meta:  # where the code comments of the generated kernels point
            for new in (sa, sb, mm, out):
                new.meta["stack_trace"] = node.meta["stack_trace"]
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
